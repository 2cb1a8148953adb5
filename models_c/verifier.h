/*
 * Verification primitives for qverify's generated C, mapped per consumer:
 *   - default (ESBMC, qverify's engine): nondet_* are undefined functions (non-deterministic
 *     values); __ESBMC_assume / __ESBMC_assert are the checker's built-ins.
 *   - QV_REPLAY (gcc): the program is an oracle. nondet_* read the next value of the current input
 *     line; a failed assume or assert jumps back to the line loop of the replay main, which prints
 *     ASSUME-FAILED / VIOLATED <message> (harnesses) or OVERFLOW <message> (networks).
 *   - __FRAMAC__ (Frama-C EVA): see qverify/invariants (the harness is rewritten for EVA there).
 */
#ifndef QV_VERIFIER_H
#define QV_VERIFIER_H

#ifdef QV_REPLAY
#include <setjmp.h>
#include <stdio.h>
#include <stdlib.h>

#define QV_OUTCOME_HOLDS 0
#define QV_OUTCOME_ASSUME_FAILED 1
#define QV_OUTCOME_VIOLATED 2
#define QV_OUTCOME_BAD_INPUT 3

static jmp_buf qv_replay_jump;
static int qv_replay_outcome;
static const char *qv_replay_message = "";
static const char *qv_replay_cursor = "";

static inline void qv_replay_stop(int outcome, const char *message)
{
    qv_replay_outcome = outcome;
    qv_replay_message = message;
    longjmp(qv_replay_jump, 1);
}

static inline void __ESBMC_assume(int condition)
{
    if (!condition) {
        qv_replay_stop(QV_OUTCOME_ASSUME_FAILED, "");
    }
}

static inline void __ESBMC_assert(int condition, const char *message)
{
    if (!condition) {
        qv_replay_stop(QV_OUTCOME_VIOLATED, message);
    }
}

/* The next whitespace-separated token of the current line, parsed by `parse`. */
#define QV_REPLAY_NEXT(type, parse)                                                       \
    char *end;                                                                            \
    type value = (type)parse(qv_replay_cursor, &end);                                     \
    if (end == qv_replay_cursor) {                                                        \
        qv_replay_stop(QV_OUTCOME_BAD_INPUT, "missing or malformed nondet value");        \
    }                                                                                     \
    qv_replay_cursor = end;                                                               \
    return value

static inline long long qv_strtoll(const char *text, char **end)
{
    return strtoll(text, end, 10);
}

static inline int nondet_int(void) { QV_REPLAY_NEXT(int, qv_strtoll); }
static inline char nondet_char(void) { QV_REPLAY_NEXT(char, qv_strtoll); }
static inline unsigned char nondet_uchar(void) { QV_REPLAY_NEXT(unsigned char, qv_strtoll); }
static inline long long nondet_longlong(void) { QV_REPLAY_NEXT(long long, qv_strtoll); }
static inline float nondet_float(void) { QV_REPLAY_NEXT(float, strtof); }
static inline double nondet_double(void) { QV_REPLAY_NEXT(double, strtod); }

#else
int nondet_int(void);
char nondet_char(void);
unsigned char nondet_uchar(void);
long long nondet_longlong(void);
float nondet_float(void);
double nondet_double(void);
#ifndef __ESBMC_VERSION__
void __ESBMC_assume(_Bool condition);
void __ESBMC_assert(_Bool condition, const char *message);
#endif
#endif /* QV_REPLAY */

#endif /* QV_VERIFIER_H */
