/*
 * qverify int8 affine implementation model, C99 (readable by gcc, ESBMC, Frama-C and qverify's engine).
 *
 * Codes are int8_t or uint8_t, weights int8_t, biases and accumulators int32_t (the generator proves
 * that no accumulator can leave int32). Requantization -- the runtime's rounding of
 * z_out + acc * s_in * s_w / s_out, clamped to the code range (and at z_out under a fused ReLU) -- is
 * a non-decreasing step function of acc, stored as 255 sorted thresholds: the output code is the
 * code range's minimum plus the number of thresholds <= acc. qv_requant finds that number by an
 * 8-step binary search (integer only, constant time). The Python twin is qverify/quant/affine.py.
 */
#ifndef QV_INT8_H
#define QV_INT8_H

#include <stdint.h>
#include "verifier.h"

/* The number of entries of the sorted table t[0..254] that are <= acc (0..255). */
static inline int32_t qv_requant(int32_t acc, const int32_t t[255])
{
    int32_t q = 0;
    if (acc >= t[127]) {
        q = 128;
    }
    if (acc >= t[q + 63]) {
        q += 64;
    }
    if (acc >= t[q + 31]) {
        q += 32;
    }
    if (acc >= t[q + 15]) {
        q += 16;
    }
    if (acc >= t[q + 7]) {
        q += 8;
    }
    if (acc >= t[q + 3]) {
        q += 4;
    }
    if (acc >= t[q + 1]) {
        q += 2;
    }
    if (acc >= t[q]) {
        q += 1;
    }
    return q;
}

/* A pair sum of onnxruntime's x86 u8 x s8 kernel (vpmaddubsw): saturated to int16. */
static inline int32_t qv_sat16(int32_t sum)
{
    return sum > 32767 ? 32767 : (sum < -32768 ? -32768 : sum);
}

#endif /* QV_INT8_H */
