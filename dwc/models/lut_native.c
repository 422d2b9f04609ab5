/* CPU kernels for a learnable LUT layer's sparse wiring update (dwc/models/native.py compiles this
 * with the system C compiler on first use; dwc/models/lut.py falls back to plain PyTorch without it).
 *
 * Why: with --wiring-optim sparse a wiring score has a gradient only on the few candidates near
 * each input's best one. PyTorch computes that in separate passes (the EFD gradient of every
 * selected bit as a (slots x batch) matrix, then a sampled product that reads a batch row of it
 * for every candidate, then a sparse product for the layer's input), each a full sweep through
 * memory. Taken one input slot at a time, the slot's gradient row stays in L1 while every
 * candidate of that slot and the input's gradient read it: one pass instead of three.
 * All arrays are contiguous, row-major, float32 / int64.
 */
#include <stdint.h>
#include <stdlib.h>
#include <math.h>
#include <string.h>

/* Sums over the batch keep LANES independent partial sums (the compiler vectorises them; the order is
 * fixed, so the result is the same on every run) and add them up pairwise: a sequential sum of the
 * partial sums would be a chain of LANES dependent adds, longer than the loop itself at batch 256. */
#ifndef LANES
#define LANES 16
#endif

static float reduce(float *acc)
{
    for (int w = LANES / 2; w >= 1; w /= 2)
        for (int j = 0; j < w; j++)
            acc[j] += acc[j + w];
    return acc[0];
}

static float sum(const float *a, int64_t n)
{
    float acc[LANES] = {0};
    int64_t i = 0;
    for (; i + LANES <= n; i += LANES)
        for (int j = 0; j < LANES; j++)
            acc[j] += a[i + j];
    float s = reduce(acc);
    for (; i < n; i++)
        s += a[i];
    return s;
}

/* sum of a[i] over the i with x[i] = 1 (x in {0, 1}): a dot product with a row of bits */
static float masked_sum(const float *x, const float *a, int64_t n)
{
    float acc[LANES] = {0};
    int64_t i = 0;
    for (; i + LANES <= n; i += LANES)
        for (int j = 0; j < LANES; j++)
            acc[j] += x[i + j] * a[i + j];
    float s = reduce(acc);
    for (; i < n; i++)
        s += x[i] * a[i];
    return s;
}

/* masked_sum of one row a against four rows of bits at once: a read of a serves four sums */
static void masked_sums4(const float *x0, const float *x1, const float *x2, const float *x3, const float *a, int64_t n,
                         float *out)
{
    float acc[4][LANES] = {{0}};
    int64_t i = 0;
    for (; i + LANES <= n; i += LANES)
        for (int j = 0; j < LANES; j++) {
            const float v = a[i + j];
            acc[0][j] += x0[i + j] * v;
            acc[1][j] += x1[i + j] * v;
            acc[2][j] += x2[i + j] * v;
            acc[3][j] += x3[i + j] * v;
        }
    for (int q = 0; q < 4; q++)
        out[q] = reduce(acc[q]);
    for (; i < n; i++) {
        out[0] += x0[i] * a[i];
        out[1] += x1[i] * a[i];
        out[2] += x2[i] * a[i];
        out[3] += x3[i] * a[i];
    }
}

/* Each kernel is written once for an input count n and instantiated for n = 1..8 (the switch at its
 * end): with n a constant the compiler unrolls the loops over a LUT's inputs and vectorises the
 * loops over the batch, ~10x faster than with n a variable. */
#define ALWAYS_INLINE static inline __attribute__((always_inline))
#define FOR_EACH_N(CALL) \
    switch (n) { \
    case 1: CALL(1); break; case 2: CALL(2); break; case 3: CALL(3); break; case 4: CALL(4); break; \
    case 5: CALL(5); break; case 6: CALL(6); break; case 7: CALL(7); break; case 8: CALL(8); break; \
    default: return 2; \
    }

/* The forward of one layer: LUT l reads bits x[idx[l * n + k], :] (x in {0, 1}, sources x batch) at
 * its input k; its address over the batch goes to addr[l, :] (uint8: n <= 8) and its output bit
 * (1.0 where tables[l, address] > 0) to out[l, :]. */
ALWAYS_INLINE void forward_n(const int64_t n, int64_t luts, int64_t batch, const float *restrict x,
                             const int64_t *restrict idx, const float *restrict tables, float *restrict out,
                             uint8_t *restrict addr)
{
    const int64_t size = (int64_t)1 << n;
    for (int64_t l = 0; l < luts; l++) {
        const float *in[8];
        for (int64_t k = 0; k < n; k++)
            in[k] = x + idx[l * n + k] * batch;
        uint8_t truth[256]; /* the table's output at every address; up to 6 inputs also as one word */
        uint64_t word = 0;
        for (int64_t i = 0; i < size; i++) {
            truth[i] = tables[l * size + i] > 0.0f;
            word |= (uint64_t)truth[i] << (i & 63);
        }
        uint8_t *a = addr + l * batch;
        float *o = out + l * batch;
        for (int64_t b = 0; b < batch; b++) {
            uint32_t v = 0;
            for (int64_t k = 0; k < n; k++)
                v |= (uint32_t)(in[k][b] > 0.5f) << k;
            a[b] = (uint8_t)v;
            o[b] = n <= 6 ? (float)((word >> v) & 1) : truth[v]; /* a shift vectorises, a table read does not */
        }
    }
}

int lut_forward(int64_t luts, int64_t n, int64_t batch, const float *x, const int64_t *idx, const float *tables,
                float *out, uint8_t *addr)
{
#define FORWARD(N) forward_n(N, luts, batch, x, idx, tables, out, addr)
    FOR_EACH_N(FORWARD)
    return 0;
}

/* lut_forward without gradients: bytes in {0, 1} in and out, no addresses kept (acting, target actions). */
ALWAYS_INLINE void forward_bits_n(const int64_t n, int64_t luts, int64_t batch, const uint8_t *restrict x,
                                  const int64_t *restrict idx, const float *restrict tables, uint8_t *restrict out)
{
    const int64_t size = (int64_t)1 << n;
    for (int64_t l = 0; l < luts; l++) {
        const uint8_t *in[8];
        for (int64_t k = 0; k < n; k++)
            in[k] = x + idx[l * n + k] * batch;
        uint8_t truth[256];
        uint64_t word = 0;
        for (int64_t i = 0; i < size; i++) {
            truth[i] = tables[l * size + i] > 0.0f;
            word |= (uint64_t)truth[i] << (i & 63);
        }
        uint8_t *o = out + l * batch;
        for (int64_t b = 0; b < batch; b++) {
            uint32_t v = 0;
            for (int64_t k = 0; k < n; k++)
                v |= (uint32_t)(in[k][b] != 0) << k;
            o[b] = n <= 6 ? (uint8_t)((word >> v) & 1) : truth[v];
        }
    }
}

int lut_forward_bits(int64_t luts, int64_t n, int64_t batch, const uint8_t *x, const int64_t *idx,
                     const float *tables, uint8_t *out)
{
#define FORWARD_BITS(N) forward_bits_n(N, luts, batch, x, idx, tables, out)
    FOR_EACH_N(FORWARD_BITS)
    return 0;
}

/* The backward of one layer: input slot s = l * n + k reads bit src of x (sources x batch) into
 * input k of LUT l, whose address over the batch is addr[l, :]; gout (luts x batch) is the
 * gradient at the LUTs' outputs and surface (luts x 2^n x n) the EFD derivative of LUT l's output
 * by its input k at every address. For every LUT l, and every slot s of it in order:
 *   g_s[b]              = surface[l, addr[l, b], k] * gout[l, b]      the gradient at the selected bit
 *   grad_w[pos[e]]      = sum over b of (2 x[src[e], b] - 1) g_s[b]  for the slot's candidates e
 *                                                                     (slot_ptr[s] <= e < slot_ptr[s + 1])
 *   grad_x[src[e], b]  += soft[e] * g_s[b]                            if grad_x (zeroed by the caller)
 *   g[s, b]             = g_s[b]                                      if g
 * and grad_tables[l, addr[l, b]] += gout[l, b] (straight-through) if grad_tables (zeroed). */
enum { SPLIT = 4 }; /* partial tables for the straight-through sums: no chain of adds to one entry */

ALWAYS_INLINE void backward_n(const int64_t n, int64_t luts, int64_t batch, const float *surface,
                              const uint8_t *addr, const float *gout, const float *x, const int64_t *src,
                              const int64_t *slot_ptr, const int64_t *pos, const float *soft, float *grad_w,
                              float *grad_x, float *g, float *grad_tables, float *rows, float *part)
{
    const int64_t size = (int64_t)1 << n;
    for (int64_t l = 0; l < luts; l++) {
        const uint8_t *a = addr + l * batch;
        const float *go = gout + l * batch;
        const float *surf = surface + l * size * n;
        for (int64_t b = 0; b < batch; b++) { /* one address read serves the LUT's n inputs */
            const float *at = surf + a[b] * n;
            for (int64_t k = 0; k < n; k++)
                rows[k * batch + b] = at[k] * go[b];
        }
        if (grad_tables) {
            memset(part, 0, sizeof(float) * (size_t)(SPLIT * size));
            int64_t b = 0;
            for (; b + SPLIT <= batch; b += SPLIT)
                for (int j = 0; j < SPLIT; j++)
                    part[j * size + a[b + j]] += go[b + j];
            for (; b < batch; b++)
                part[a[b]] += go[b];
            float *t = grad_tables + l * size;
            for (int64_t i = 0; i < size; i++)
                for (int j = 0; j < SPLIT; j++)
                    t[i] += part[j * size + i];
        }
        for (int64_t k = 0; k < n; k++) {
            const int64_t s = l * n + k;
            const float *row = rows + k * batch;
            if (g)
                memcpy(g + s * batch, row, sizeof(float) * (size_t)batch);
            if (slot_ptr[s] == slot_ptr[s + 1])
                continue;
            const float total = sum(row, batch);
            int64_t e = slot_ptr[s];
            for (; e + 4 <= slot_ptr[s + 1]; e += 4) { /* four candidates per pass over the row */
                float dots[4];
                masked_sums4(x + src[e] * batch, x + src[e + 1] * batch, x + src[e + 2] * batch,
                             x + src[e + 3] * batch, row, batch, dots);
                for (int q = 0; q < 4; q++)
                    grad_w[pos[e + q]] = 2.0f * dots[q] - total; /* x in {0, 1} */
            }
            for (; e < slot_ptr[s + 1]; e++)
                grad_w[pos[e]] = 2.0f * masked_sum(x + src[e] * batch, row, batch) - total;
            for (e = slot_ptr[s]; e < slot_ptr[s + 1]; e++) {
                if (grad_x) {
                    float *gx = grad_x + src[e] * batch;
                    const float w = soft[e];
                    for (int64_t b = 0; b < batch; b++)
                        gx[b] += w * row[b];
                }
            }
        }
    }
}

int lut_wiring_backward(int64_t luts, int64_t n, int64_t batch, const float *surface,
                        const uint8_t *addr, const float *gout, const float *x, const int64_t *src,
                        const int64_t *slot_ptr, const int64_t *pos, const float *soft, float *grad_w, float *grad_x,
                        float *g, float *grad_tables)
{
    float *rows = malloc(sizeof(float) * (size_t)(8 * batch));
    float *part = malloc(sizeof(float) * SPLIT * 256);
    if (!rows || !part) {
        free(rows);
        free(part);
        return 1;
    }

#define BACKWARD(N) backward_n(N, luts, batch, surface, addr, gout, x, src, slot_ptr, pos, soft, grad_w, grad_x, g, \
                               grad_tables, rows, part)
    FOR_EACH_N(BACKWARD)
    free(rows);
    free(part);
    return 0;
}

/* The support's entries (sources src, slots slot; E of them, in row-major order) ordered by slot, by a
 * stable counting sort: slot_ptr (slots + 1) the first entry of each slot, pos[e] the row-major index
 * of the e-th entry in slot order, src_by_slot[e] its source. */
void order_by_slot(int64_t entries, int64_t slots, const int64_t *src, const int64_t *slot, int64_t *slot_ptr,
                   int64_t *pos, int64_t *src_by_slot)
{
    memset(slot_ptr, 0, sizeof(int64_t) * (size_t)(slots + 1));
    for (int64_t e = 0; e < entries; e++)
        slot_ptr[slot[e] + 1]++;
    for (int64_t s = 0; s < slots; s++)
        slot_ptr[s + 1] += slot_ptr[s];
    for (int64_t e = 0; e < entries; e++) {
        const int64_t at = slot_ptr[slot[e]]++;
        pos[at] = e;
        src_by_slot[at] = src[e];
    }
    for (int64_t s = slots; s > 0; s--) /* back from each slot's end to its start */
        slot_ptr[s] = slot_ptr[s - 1];
    slot_ptr[0] = 0;
}

/* Adam's step on the entries flat[e] of a parameter and its two moments, with gradient grad[e]
 * (WiringAdam's lazy step: every other entry keeps its value and moments). The caller computes the
 * scalars in double, as PyTorch does: step_size = lr / (1 - beta1^t), bc2_sqrt = sqrt(1 - beta2^t),
 * w1 = 1 - beta1, w2 = 1 - beta2; decay > 0 is L2 weight decay (Adam's), decay < 0 decoupled decay
 * (AdamW's: the parameter scaled by 1 + decay, decay = -lr * weight_decay). The new values go to
 * stepped[e] too. */
void lazy_adam(int64_t entries, const int64_t *flat, const float *grad, float *param, float *exp_avg,
               float *exp_avg_sq, float step_size, float bc2_sqrt, float w1, float beta2, float w2, float eps,
               float decay, int maximize, float *stepped)
{
    enum { AHEAD = 16 }; /* entries scattered over tens of MB: ask for their cache lines early */
    for (int64_t e = 0; e < entries; e++) {
        if (e + AHEAD < entries) {
            const int64_t j = flat[e + AHEAD];
            __builtin_prefetch(param + j, 1);
            __builtin_prefetch(exp_avg + j, 1);
            __builtin_prefetch(exp_avg_sq + j, 1);
        }
        const int64_t i = flat[e];
        float g = maximize ? -grad[e] : grad[e];
        if (decay > 0.0f)
            g += decay * param[i];
        else if (decay < 0.0f)
            param[i] *= 1.0f + decay;
        const float m = exp_avg[i] + w1 * (g - exp_avg[i]);
        const float v = exp_avg_sq[i] * beta2 + w2 * g * g;
        exp_avg[i] = m;
        exp_avg_sq[i] = v;
        param[i] -= step_size * m / (sqrtf(v) / bc2_sqrt + eps);
        stepped[e] = param[i];
    }
}

/* A tracked band's scores after a lazy step (dwc/models/lut.py, LUTLayer._band): of the band's
 * entries (flat positions band_flat, ascending), those also in changed (ascending: the entries the
 * step moved) take their new score from changed_values; every other entry kept its score. A merge
 * of two sorted lists: no read of the score matrix, whose entries lie far apart. */
void band_refresh(int64_t band, const int64_t *band_flat, float *values, int64_t changed_n, const int64_t *changed,
                  const float *changed_values)
{
    int64_t i = 0;
    for (int64_t c = 0; c < changed_n && i < band; c++) {
        const int64_t f = changed[c];
        while (i < band && band_flat[i] < f)
            i++;
        if (i < band && band_flat[i] == f)
            values[i] = changed_values[c];
    }
}

/* out[k, c] = the largest of w[r, c] over the rows r of block k (block rows each, the last block
 * possibly shorter) of a rows x cols matrix, NaN if any is NaN (as torch's amax): the rows stream past
 * a row of maxima that stays in cache, ~2x faster than torch's amax over a middle dimension. */
void block_max(int64_t rows, int64_t cols, int64_t block, const float *w, float *out)
{
    for (int64_t k = 0; k * block < rows; k++) {
        float *top = out + k * cols;
        const int64_t first = k * block, last = first + block < rows ? first + block : rows;
        memcpy(top, w + first * cols, sizeof(float) * (size_t)cols);
        for (int64_t r = first + 1; r < last; r++) {
            const float *row = w + r * cols;
            for (int64_t c = 0; c < cols; c++)
                top[c] = (row[c] > top[c] || row[c] != row[c]) ? row[c] : top[c];
        }
    }
}

/* top[s] = the largest values[e] with slot[e] = s (-inf for a slot with none). */
void slot_max(int64_t entries, int64_t slots, const float *values, const int64_t *slot, float *top)
{
    for (int64_t s = 0; s < slots; s++)
        top[s] = -INFINITY;
    for (int64_t e = 0; e < entries; e++)
        top[slot[e]] = values[e] > top[slot[e]] ? values[e] : top[slot[e]];
}

/* Of a band's entries (row-major: src ascending), those within margin of their slot's maximum top,
 * in order (near_src, near_slot, near_values; their count returned), and each slot's first source
 * at its maximum (argmax; none for a slot without one): the softmax's support and the wiring. */
int64_t near_entries(int64_t entries, int64_t slots, const float *values, const int64_t *src, const int64_t *slot,
                     const float *top, float margin, int64_t none, int64_t *near_src, int64_t *near_slot,
                     float *near_values, int64_t *argmax)
{
    for (int64_t s = 0; s < slots; s++)
        argmax[s] = none;
    int64_t count = 0;
    for (int64_t e = 0; e < entries; e++) {
        const int64_t s = slot[e];
        const float v = values[e];
        near_src[count] = src[e]; /* written always, kept if near: no branch to mispredict */
        near_slot[count] = s;
        near_values[count] = v;
        count += v >= top[s] - margin;
        if (v == top[s] && argmax[s] == none)
            argmax[s] = src[e];
    }
    return count;
}

/* The EFD surface of every LUT (dwc/models/lut.py, efd_matrix): surface[l, a, k] = alpha * sum over
 * addresses a' of (a'_k ? 1 : -1) tables[l, a'] beta^(bits other than k where a and a' differ). It
 * does not depend on a_k, and the weight is a product over the other bits, so it is the difference
 * tables[.., k = 1] - tables[.., k = 0] passed through one 2-point butterfly (x0 + beta x1,
 * beta x0 + x1) per other bit: n 2^n (n - 1) multiply-adds per LUT where the (2^n x n 2^n) matrix
 * product takes n 4^n. */
ALWAYS_INLINE void surface_n(const int64_t n, int64_t luts, const float *tables, float alpha, float beta,
                             float *surface)
{
    enum { LANE = 16 }; /* LUTs side by side: every step below is one vector operation on them */
    const int64_t size = (int64_t)1 << n, half = size / 2;
    float t[256][LANE], d[128][LANE];
    for (int64_t l0 = 0; l0 < luts; l0 += LANE) {
        const int64_t m = luts - l0 < LANE ? luts - l0 : LANE;
        for (int64_t a = 0; a < size; a++)
            for (int64_t j = 0; j < LANE; j++)
                t[a][j] = j < m ? tables[(l0 + j) * size + a] : 0.0f;
        for (int64_t k = 0; k < n; k++) {
            const int64_t low = ((int64_t)1 << k) - 1, bit = (int64_t)1 << k;
            for (int64_t u = 0; u < half; u++) { /* u: the address without bit k */
                const int64_t a0 = ((u & ~low) << 1) | (u & low);
                for (int64_t j = 0; j < LANE; j++)
                    d[u][j] = t[a0 | bit][j] - t[a0][j];
            }
            for (int64_t step = 1; step < half; step <<= 1)
                for (int64_t base = 0; base < half; base += 2 * step)
                    for (int64_t u = base; u < base + step; u++)
                        for (int64_t j = 0; j < LANE; j++) {
                            const float x0 = d[u][j], x1 = d[u + step][j];
                            d[u][j] = x0 + beta * x1;
                            d[u + step][j] = beta * x0 + x1;
                        }
            for (int64_t u = 0; u < half; u++) {
                const int64_t a0 = ((u & ~low) << 1) | (u & low);
                for (int64_t j = 0; j < m; j++) {
                    float *out = surface + (l0 + j) * size * n;
                    out[a0 * n + k] = out[(a0 | bit) * n + k] = alpha * d[u][j];
                }
            }
        }
    }
}

int efd_surface(int64_t luts, int64_t n, const float *tables, float alpha, float beta, float *surface)
{
#define SURFACE(N) surface_n(N, luts, tables, alpha, beta, surface)
    FOR_EACH_N(SURFACE)
    return 0;
}

/* The gradient of every candidate score of a first layer over thermometer codes (dwc/models/lut.py,
 * thermometer_wiring_grad): out[d * bits + j, s] = sum over b of (2 [level[d, b] > j] - 1) g_t[b, s],
 * for dims observation dimensions of bits thresholds each, the batch's levels (0..bits) and the
 * gradient g_t (batch x slots) at the selected bits. Per dimension: the sum of the gradient rows of the
 * samples at each level, a running sum of those from the top level down (the samples whose bit j is
 * set), then 2 x that - the batch's total. The samples are first ordered by level (a stable counting
 * sort), so for CHUNK slots at a time both sums stay in registers: one load per sample and slot and one
 * store per output entry, where summing into rows in memory costs two loads and a store (the same
 * additions in the same order: the same bits; ~1.4x faster at Humanoid's 348 x 15 thresholds x 1536 slots).
 * The CHUNK slots of every sample stay in cache across all dimensions. Returns -1 if out of memory. */
typedef float lanes_t __attribute__((vector_size(LANES * sizeof(float)))); /* 16: one AVX-512 register */
enum { VECS = 4, CHUNK = LANES * VECS }; /* 4 independent sums hide the adds' latency */

static inline lanes_t load_lanes(const float *p)
{
    lanes_t v;
    memcpy(&v, p, sizeof v);
    return v;
}

int thermometer_grad(int64_t dims, int64_t bits, int64_t batch, int64_t slots, const int64_t *levels,
                     const float *g_t, float *out, float *total)
{
    /* per dimension: its samples by level, then where each level starts (levels + 2 entries) */
    int32_t *order = malloc(sizeof(int32_t) * (size_t)(dims * (batch + bits + 2)));
    if (!order)
        return -1;
    memset(total, 0, sizeof(float) * (size_t)slots);
    for (int64_t b = 0; b < batch; b++)
        for (int64_t s = 0; s < slots; s++)
            total[s] += g_t[b * slots + s];
    for (int64_t d = 0; d < dims; d++) {
        const int64_t *level = levels + d * batch;
        int32_t *by_level = order + d * (batch + bits + 2), *start = by_level + batch;
        memset(start, 0, sizeof(int32_t) * (size_t)(bits + 2));
        for (int64_t b = 0; b < batch; b++)
            start[level[b] + 1]++;
        for (int64_t l = 1; l <= bits + 1; l++)
            start[l] += start[l - 1];
        for (int64_t b = 0; b < batch; b++) /* start[l] moves to the end of level l */
            by_level[start[level[b]]++] = (int32_t)b;
        for (int64_t l = bits; l > 0; l--)
            start[l] = start[l - 1];
        start[0] = 0; /* now level l is by_level[start[l] .. start[l + 1]) */
    }
    int64_t c = 0;
    for (; c + CHUNK <= slots; c += CHUNK)
        for (int64_t d = 0; d < dims; d++) {
            const int32_t *by_level = order + d * (batch + bits + 2), *start = by_level + batch;
            float *rows = out + d * bits * slots + c; /* row j: the samples with bit j set, level > j */
            lanes_t above[VECS] = {{0}};
            for (int64_t l = bits; l > 0; l--) {
                lanes_t at[VECS] = {{0}};
                for (int32_t i = start[l]; i < start[l + 1]; i++) {
                    const float *g = g_t + by_level[i] * slots + c;
                    for (int v = 0; v < VECS; v++)
                        at[v] += load_lanes(g + v * LANES);
                }
                for (int v = 0; v < VECS; v++) {
                    above[v] = at[v] + above[v];
                    lanes_t r = 2.0f * above[v] - load_lanes(total + c + v * LANES);
                    memcpy(rows + (l - 1) * slots + v * LANES, &r, sizeof r);
                }
            }
        }
    for (; c < slots; c++) /* the slots left over, one at a time */
        for (int64_t d = 0; d < dims; d++) {
            const int32_t *by_level = order + d * (batch + bits + 2), *start = by_level + batch;
            float above = 0.0f;
            for (int64_t l = bits; l > 0; l--) {
                float at = 0.0f;
                for (int32_t i = start[l]; i < start[l + 1]; i++)
                    at += g_t[by_level[i] * slots + c];
                above = at + above;
                out[(d * bits + l - 1) * slots + c] = 2.0f * above - total[c];
            }
        }
    free(order);
    return 0;
}
