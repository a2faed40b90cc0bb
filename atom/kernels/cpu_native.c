/* The cpu backend's small kernels (cpu_native.py builds and loads this file): each replaces the
 * three to eight torch ops that one seam of a decoder layer takes at decode sizes, where a
 * torch op costs microseconds of dispatch and its arithmetic nanoseconds. Single-threaded: at
 * a few rows the work is smaller than an OpenMP region's entry. float32 in, float32 or bf16
 * out, bf16 rounded to nearest even as torch rounds it. */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

static inline uint16_t to_bf16(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40u); /* quiet NaN */
    return (uint16_t)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}

static inline float from_bf16(uint16_t b) {
    uint32_t u = (uint32_t)b << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}

/* h = x + residual (residual may be NULL: h is x, copied into h_out only when x is bf16);
 * xw = bf16(h * w); inv_rms = 1 / sqrt(mean(h^2) + eps), per row of [rows, hidden]. x is
 * float32, or bf16 when x_bf16 (a block's output, cpu_handoff.py). */
void atom_norm_bf16(const void *x, int64_t x_bf16, const float *residual, const float *w,
                    int64_t rows, int64_t hidden, int64_t x_stride, float eps, float *h_out,
                    uint16_t *xw, float *inv_rms) {
    for (int64_t t = 0; t < rows; t++) {
        const float *h;
        if (residual || x_bf16) {
            float *hr = h_out + t * hidden;
            const float *rr = residual ? residual + t * hidden : NULL;
            if (x_bf16) {
                const uint16_t *xr = (const uint16_t *)x + t * x_stride;
                for (int64_t i = 0; i < hidden; i++)
                    hr[i] = rr ? from_bf16(xr[i]) + rr[i] : from_bf16(xr[i]);
            } else {
                const float *xr = (const float *)x + t * x_stride;
                for (int64_t i = 0; i < hidden; i++) hr[i] = xr[i] + rr[i];
            }
            h = hr;
        } else {
            h = (const float *)x + t * x_stride;
        }
        float ss = 0.0f;
        uint16_t *o = xw + t * hidden;
        for (int64_t i = 0; i < hidden; i++) {
            ss += h[i] * h[i];
            o[i] = to_bf16(h[i] * w[i]);
        }
        inv_rms[t] = 1.0f / sqrtf(ss / (float)hidden + eps);
    }
}

/* out = float(y) * scale[row] (+ bias), y bf16 [rows, n]. */
void atom_scale_rows(const uint16_t *y, const float *scale, const float *bias, int64_t rows,
                     int64_t n, float *out) {
    for (int64_t t = 0; t < rows; t++) {
        const float s = scale[t];
        const uint16_t *yr = y + t * n;
        float *o = out + t * n;
        if (bias)
            for (int64_t i = 0; i < n; i++) o[i] = from_bf16(yr[i]) * s + bias[i];
        else
            for (int64_t i = 0; i < n; i++) o[i] = from_bf16(yr[i]) * s;
    }
}

/* out = bf16(silu(gate) * up) for x = [gate | up] [rows, 2 * inter] (row stride x_stride). */
void atom_silu_mul_bf16(const float *x, int64_t rows, int64_t inter, int64_t x_stride,
                        uint16_t *out) {
    for (int64_t t = 0; t < rows; t++) {
        const float *g = x + t * x_stride;
        const float *u = g + inter;
        uint16_t *o = out + t * inter;
        for (int64_t i = 0; i < inter; i++) o[i] = to_bf16(g[i] / (1.0f + expf(-g[i])) * u[i]);
    }
}

/* NeoX rotary of one head: the first rot dims as two halves (x1, x2) -> (x1 c - x2 s,
 * x2 c + x1 s); the dims past rot are copied. */
static inline void rotate(const float *x, const float *cs, int64_t rot, int64_t d, float *o) {
    const int64_t half = rot / 2;
    const float *c = cs, *s = cs + half;
    for (int64_t j = 0; j < half; j++) {
        const float a = x[j], b = x[j + half];
        o[j] = a * c[j] - b * s[j];
        o[j + half] = b * c[j] + a * s[j];
    }
    for (int64_t j = rot; j < d; j++) o[j] = x[j];
}

/* qkv [rows, (hq + 2 hk) * d] (row stride qkv_stride): q rotated into q_out [rows, hq, d], k
 * rotated and v copied into the caches' slot of each row ([slots, hk, d] contiguous; a slot
 * below 0 is padding, not stored). cos_sin [positions, rot]: cos | sin halves. */
void atom_rope_store(const float *qkv, int64_t rows, int64_t qkv_stride, int64_t hq, int64_t hk,
                     int64_t d, int64_t rot, const int64_t *positions, const float *cos_sin,
                     const int64_t *slots, float *q_out, float *k_cache, float *v_cache) {
    for (int64_t t = 0; t < rows; t++) {
        const float *row = qkv + t * qkv_stride;
        const float *cs = cos_sin + positions[t] * rot;
        for (int64_t h = 0; h < hq; h++) rotate(row + h * d, cs, rot, d, q_out + (t * hq + h) * d);
        const int64_t slot = slots[t];
        if (slot < 0) continue;
        for (int64_t h = 0; h < hk; h++)
            rotate(row + (hq + h) * d, cs, rot, d, k_cache + (slot * hk + h) * d);
        memcpy(v_cache + slot * hk * d, row + (hq + hk) * d, (size_t)(hk * d) * sizeof(float));
    }
}

/* The cache row of kv head kh at position pos of a sequence with block table bt. */
static inline int64_t row_of(const int32_t *bt, int64_t pos, int64_t page, int64_t hk,
                             int64_t kh) {
    return ((int64_t)bt[pos / page] * page + pos % page) * hk + kh;
}

/* One query per sequence over its paged keys: q [seqs, hq, d] (row stride q_stride), caches
 * [blocks, page, hk, d], block_tables [seqs, bt_stride] int32, context_lens int32; the keys
 * of sequence b are positions [lo, ctx) with lo = ctx - window when a window is set. Each kv
 * head's group of hq / hk query heads reads each key and value row once. out [seqs, hq, d]. */
int atom_decode_attention(const float *q, int64_t q_stride, const float *k_cache,
                          const float *v_cache, const int32_t *block_tables, int64_t bt_stride,
                          const int32_t *context_lens, int64_t seqs, int64_t hq, int64_t hk,
                          int64_t d, int64_t page, float scale, int64_t window, float *out) {
    const int64_t group = hq / hk;
    int64_t most = 0;
    for (int64_t b = 0; b < seqs; b++)
        if (context_lens[b] > most) most = context_lens[b];
    float *scores = malloc(sizeof(float) * (size_t)(most * group + 1));
    if (!scores) return 1;
    for (int64_t b = 0; b < seqs; b++) {
        const int64_t ctx = context_lens[b];
        const int64_t lo = (window > 0 && ctx > window) ? ctx - window : 0;
        const int64_t n = ctx - lo;
        const int32_t *bt = block_tables + b * bt_stride;
        for (int64_t kh = 0; kh < hk; kh++) {
            const float *qh = q + b * q_stride + kh * group * d;
            float *oh = out + (b * hq + kh * group) * d;
            for (int64_t i = 0; i < n; i++) {
                const int64_t pos = lo + i;
                const float *kr = k_cache + row_of(bt, pos, page, hk, kh) * d;
                for (int64_t g = 0; g < group; g++) {
                    const float *qg = qh + g * d;
                    float s = 0.0f;
                    for (int64_t j = 0; j < d; j++) s += qg[j] * kr[j];
                    scores[g * n + i] = s * scale;
                }
            }
            for (int64_t g = 0; g < group; g++) {
                float *sg = scores + g * n, m = n > 0 ? sg[0] : 0.0f, total = 0.0f;
                for (int64_t i = 1; i < n; i++) m = fmaxf(m, sg[i]);
                for (int64_t i = 0; i < n; i++) total += (sg[i] = expf(sg[i] - m));
                const float inv = total > 0.0f ? 1.0f / total : 0.0f;
                for (int64_t i = 0; i < n; i++) sg[i] *= inv;
            }
            memset(oh, 0, sizeof(float) * (size_t)(group * d));
            for (int64_t i = 0; i < n; i++) {
                const int64_t pos = lo + i;
                const float *vr = v_cache + row_of(bt, pos, page, hk, kh) * d;
                for (int64_t g = 0; g < group; g++) {
                    const float p = scores[g * n + i];
                    float *og = oh + g * d;
                    for (int64_t j = 0; j < d; j++) og[j] += p * vr[j];
                }
            }
        }
    }
    free(scores);
    return 0;
}
