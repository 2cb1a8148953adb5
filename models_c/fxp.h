/*
 * qverify fixed-point implementation model, C99 (readable by gcc, ESBMC and Frama-C).
 *
 * A word of format <K,L> is an integer q in [-2^(W-1), 2^(W-1)-1], W = K + L, meaning q * 2^-L.
 * Words are stored in int32_t; products and sums are formed in int64_t, where they are exact.
 * Compile-time parameters (defined by the generated file before including this header):
 *   QV_K, QV_L        integer bits (sign included) and fractional bits, 2 <= K + L <= 32
 *   QV_ROUNDING       QV_ROUND_NEAREST (ties away from zero) or QV_ROUND_FLOOR (towards -inf)
 *   QV_OVERFLOW       QV_OVERFLOW_WRAP, QV_OVERFLOW_SATURATE or QV_OVERFLOW_DETECT
 *
 * No undefined or implementation-defined behaviour: no signed overflow (|a*b| <= 2^62), no shift of
 * a negative value (rounding works on magnitudes), wrap-around through uint64_t (modular by the C
 * standard). The Python twin is qverify/quant/fixed.py: change both together.
 */
#ifndef QV_FXP_H
#define QV_FXP_H

#include <stdint.h>
#include "verifier.h"

#define QV_ROUND_NEAREST 0
#define QV_ROUND_FLOOR 1
#define QV_OVERFLOW_WRAP 0
#define QV_OVERFLOW_SATURATE 1
#define QV_OVERFLOW_DETECT 2

#if !defined(QV_K) || !defined(QV_L) || !defined(QV_ROUNDING) || !defined(QV_OVERFLOW)
#error "define QV_K, QV_L, QV_ROUNDING and QV_OVERFLOW before including fxp.h"
#endif
#if QV_K < 1 || QV_L < 0 || QV_K + QV_L < 2 || QV_K + QV_L > 32
#error "fixed-point format out of range: need K >= 1, L >= 0, 2 <= K + L <= 32"
#endif

#define QV_W (QV_K + QV_L)
#define FXP_MIN (-((int64_t)1 << (QV_W - 1)))
#define FXP_MAX (((int64_t)1 << (QV_W - 1)) - 1)
#define FXP_ONE ((int64_t)1 << QV_L)
#define FXP_MASK ((((uint64_t)1) << QV_W) - 1u)
#define FXP_SIGN (((uint64_t)1) << (QV_W - 1))

typedef int32_t fxp_t;

/* Bring an exact int64 result into the word range: wrap, saturate, or assert (detect). */
static inline fxp_t fxp_quantize(int64_t value)
{
#if QV_OVERFLOW == QV_OVERFLOW_WRAP
    uint64_t bits = ((uint64_t)value) & FXP_MASK;
    return (fxp_t)((int64_t)(bits ^ FXP_SIGN) - (int64_t)FXP_SIGN);
#elif QV_OVERFLOW == QV_OVERFLOW_SATURATE
    return (fxp_t)(value < FXP_MIN ? FXP_MIN : (value > FXP_MAX ? FXP_MAX : value));
#else
    __ESBMC_assert(value >= FXP_MIN && value <= FXP_MAX, "fixed-point overflow");
    return (fxp_t)(value < FXP_MIN ? FXP_MIN : (value > FXP_MAX ? FXP_MAX : value));
#endif
}

/* value / 2^L rounded to an integer (|value| < 2^62): the rounding after a product. */
static inline int64_t fxp_shift(int64_t value)
{
#if QV_L == 0
    return value;
#elif QV_ROUNDING == QV_ROUND_NEAREST
    return value >= 0 ? (value + (FXP_ONE >> 1)) >> QV_L : -((-value + (FXP_ONE >> 1)) >> QV_L);
#else
    return value >= 0 ? value >> QV_L : -((-value + (FXP_ONE - 1)) >> QV_L);
#endif
}

static inline fxp_t fxp_add(fxp_t a, fxp_t b)
{
    return fxp_quantize((int64_t)a + (int64_t)b);
}

static inline fxp_t fxp_sub(fxp_t a, fxp_t b)
{
    return fxp_quantize((int64_t)a - (int64_t)b);
}

static inline fxp_t fxp_mult(fxp_t a, fxp_t b)
{
    return fxp_quantize(fxp_shift((int64_t)a * (int64_t)b));
}

/* An integer n (|n| < 2^31) as a word: n * 2^L with the overflow mode. */
static inline fxp_t fxp_from_int(int32_t n)
{
    return fxp_quantize((int64_t)n * FXP_ONE);
}

/* A wide (int64) accumulator of products, rounded once: int8-kernel style accumulation. */
static inline fxp_t fxp_wide_result(int64_t accumulator)
{
    return fxp_quantize(fxp_shift(accumulator));
}

#ifdef QV_REPLAY
#include <math.h>
/* A real number to a word: round(x * 2^L) by the rounding mode, then the overflow mode (exact:
 * x * 2^L is exact in double, and fmod is exact). Used only by replay programs, never verified. */
static inline fxp_t fxp_from_double(double x)
{
    double scaled = ldexp(x, QV_L);
    double integral = QV_ROUNDING == QV_ROUND_NEAREST ? round(scaled) : floor(scaled);
#if QV_OVERFLOW == QV_OVERFLOW_WRAP
    integral = fmod(integral, ldexp(1.0, QV_W));
#else
    if (integral < (double)FXP_MIN - 1.0) {
        integral = (double)FXP_MIN - 1.0;
    } else if (integral > (double)FXP_MAX + 1.0) {
        integral = (double)FXP_MAX + 1.0;
    }
#endif
    return fxp_quantize((int64_t)integral);
}

static inline double fxp_to_double(fxp_t q)
{
    return ldexp((double)q, -QV_L);
}
#endif /* QV_REPLAY */

#endif /* QV_FXP_H */
