/*
 * qverify half-precision model: IEEE binary16 values as C's _Float16 (gcc >= 12 on x86-64, clang).
 * The generated code casts every operation's result to _Float16, so each operation is rounded once
 * to binary16 (see qverify/quant/floatfmt.py for why gcc's excess precision then does not matter).
 * nondet_half() supplies inputs; in replay programs it reads the next value of the input line (a
 * hexadecimal or decimal float that is a half value).
 */
#ifndef QV_HALF_H
#define QV_HALF_H

#include "verifier.h"

__extension__ typedef _Float16 qv_half;

#ifdef QV_REPLAY
static inline qv_half nondet_half(void)
{
    return (qv_half)nondet_double(); /* one rounding, as numpy float64 -> float16 */
}
#else
qv_half nondet_half(void);
#endif

#endif /* QV_HALF_H */
