// Shared helpers of the PocketPerf OpenCL kernels: ggml block formats read in place,
// activation staging in local memory, and the tiled row dot products.
//
// Build-time constants (set by the host from the model and the device, see program.rs):
//   N_EMBD, N_FF, Q_DIM, KV_DIM, HEAD_DIM, N_HEADS, N_KV_HEADS, ROPE_HALF, ROPE_NEOX,
//   TT (tokens per tile), WG (rows per work-group), NSPLIT_MAX (attention splits),
//   ATT_BLOCK, ATT_CHUNK (the CPU attention's block and chunk of slots),
//   STAGE_* (floats of local staging per kernel).
//
// Numerics follow the CPU backend (runtime/src/quant): activations feeding a Q4_0/Q4_1/Q5_0/
// Q8_0 matrix are quantized per 32-block with d = amax/127, q = rint(x * 127/amax) (ties to
// even), d rounded to f16 and, for Q4_1, s = f16(d * sum(q)); activations feeding a K-quant
// (Q4_K, Q6_K) matrix become Q8_K blocks of 256 (the signed value of largest magnitude maps
// to -127, d in f32). Every block dot is an exact integer sum scaled in f32 and accumulated
// block by block. F16 matrices take f16-rounded activations, F32 matrices plain f32. The device needs no fp16 extension: halves are only
// read and written through vload_half / vstore_half_rte.

#pragma OPENCL FP_CONTRACT OFF

// ggml type ids (ggml.h)
#define T_F32 0
#define T_F16 1
#define T_Q4_0 2
#define T_Q4_1 3
#define T_Q5_0 6
#define T_Q8_0 8
#define T_Q4_K 12
#define T_Q6_K 14

// How a matrix wants its activation row staged.
#define FORM_INT8 0
#define FORM_F16 1
#define FORM_F32 2
#define FORM_Q8K 3

#define QK 32
#define QK_K 256

inline int form_of(int wtype) {
    if (wtype == T_Q4_K || wtype == T_Q6_K) return FORM_Q8K;
    return (wtype == T_F16) ? FORM_F16 : ((wtype == T_F32) ? FORM_F32 : FORM_INT8);
}

// Bytes of one row of `cols` elements of a ggml type.
inline ulong row_bytes(int wtype, int cols) {
    switch (wtype) {
    case T_F32: return (ulong)cols * 4;
    case T_F16: return (ulong)cols * 2;
    case T_Q4_0: return (ulong)(cols / QK) * 18;
    case T_Q4_1: return (ulong)(cols / QK) * 20;
    case T_Q5_0: return (ulong)(cols / QK) * 22;
    case T_Q4_K: return (ulong)(cols / QK_K) * 144;
    case T_Q6_K: return (ulong)(cols / QK_K) * 210;
    default: return (ulong)(cols / QK) * 34; // T_Q8_0
    }
}

// e^x by the CPU backend's own steps (runtime/src/quant/attn/mod.rs `exp`: the same IEEE
// operations and constants, FP_CONTRACT OFF), not the device's exp(), whose rounding is the
// device's (PoCL's differs from glibc's by an ulp on about one argument in ten).
inline float pp_exp(float x) {
    if (isnan(x)) return x;
    if (x < -87.0f) return 0.0f;
    if (x > 88.8f) return INFINITY;
    float kf = rint(x * as_float(0x3fb8aa3bu));
    float r = (x - kf * as_float(0x3f317200u)) - kf * as_float(0x35bfbe8eu);
    float q = as_float(0x3f000000u) +
              r * (as_float(0x3e2aaaabu) +
                   r * (as_float(0x3d2aaaabu) +
                        r * (as_float(0x3c088889u) + r * (as_float(0x3ab60b61u) + r * as_float(0x39500d01u)))));
    float p = 1.0f + (r + (r * r) * q);
    int k = (int)kf;
    if (k > 127) return (p * as_float(254u << 23)) * 2.0f;
    return p * as_float((uint)(k + 127) << 23);
}

// Rounds to the nearest f16 (ties to even) and widens back, without the fp16 extension.
inline float f16r(float x) {
    ushort u;
    vstore_half_rte(x, 0, (half *)&u);
    return vload_half(0, (const half *)&u);
}

inline int hsum16(int16 v) {
    int8 a = v.lo + v.hi;
    int4 b = a.lo + a.hi;
    int2 c = b.lo + b.hi;
    return c.x + c.y;
}

// The 32 five-bit quants of a Q5_0 block at `p`, minus 16: elements 0..15 in `lo`, 16..31 in
// `hi` (nibbles as Q4_0; bit i of the little-endian qh is bit 4 of element i).
inline void q5_0_quants(__global const uchar *p, int16 *lo, int16 *hi) {
    uint h = (uint)p[2] | ((uint)p[3] << 8) | ((uint)p[4] << 16) | ((uint)p[5] << 24);
    const uint16 sh = (uint16)(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
    uchar16 qs = vload16(0, p + 6);
    int16 hl = convert_int16(((uint16)(h) >> sh) & (uint16)(1)) << 4;
    int16 hh = convert_int16(((uint16)(h) >> (sh + (uint16)(16))) & (uint16)(1)) << 4;
    *lo = (convert_int16(qs & (uchar16)(0x0F)) | hl) - (int16)(16);
    *hi = (convert_int16(qs >> (uchar16)(4)) | hh) - (int16)(16);
}

// Scale and min of 32-element group j of a Q4_K block (6 bits each in the 12 bytes at `s`).
inline void scale_min_k4(int j, __global const uchar *s, int *sc, int *mn) {
    if (j < 4) {
        *sc = s[j] & 63;
        *mn = s[j + 4] & 63;
    } else {
        *sc = (s[j + 4] & 0x0F) | ((s[j - 4] >> 6) << 4);
        *mn = (s[j + 4] >> 4) | ((s[j] >> 6) << 4);
    }
}

// Element `i` of row `row` of a matrix, dequantized (embedding lookup).
inline float dequant_elem(__global const uchar *w, int wtype, int cols, ulong row, int i) {
    __global const uchar *r = w + row * row_bytes(wtype, cols);
    int b = i / QK, j = i % QK;
    switch (wtype) {
    case T_F32: return ((__global const float *)r)[i];
    case T_F16: return vload_half(i, (__global const half *)r);
    case T_Q4_0: {
        __global const uchar *p = r + b * 18;
        float d = vload_half(0, (__global const half *)p);
        uchar q = p[2 + (j % 16)];
        int v = (j < 16) ? (q & 0x0F) : (q >> 4);
        return (float)(v - 8) * d;
    }
    case T_Q4_1: {
        __global const uchar *p = r + b * 20;
        float d = vload_half(0, (__global const half *)p);
        float m = vload_half(1, (__global const half *)p);
        uchar q = p[4 + (j % 16)];
        int v = (j < 16) ? (q & 0x0F) : (q >> 4);
        return (float)v * d + m;
    }
    case T_Q5_0: {
        __global const uchar *p = r + b * 22;
        float d = vload_half(0, (__global const half *)p);
        uint h = (uint)p[2] | ((uint)p[3] << 8) | ((uint)p[4] << 16) | ((uint)p[5] << 24);
        uchar q = p[6 + (j % 16)];
        int v = ((j < 16) ? (q & 0x0F) : (q >> 4)) | (int)(((h >> j) & 1) << 4);
        return d * (float)(v - 16);
    }
    case T_Q4_K: {
        // e = 64c + 32hi + l: nibble hi of qs[32c + l]; scale/min of 32-group e / 32
        __global const uchar *p = r + (i / QK_K) * 144;
        int e = i % QK_K;
        int c = e / 64, hi = (e / 32) % 2, l = e % 32;
        int u = (p[16 + 32 * c + l] >> (4 * hi)) & 0x0F;
        int sc, mn;
        scale_min_k4(e / 32, p + 4, &sc, &mn);
        float d = vload_half(0, (__global const half *)p);
        float dmin = vload_half(1, (__global const half *)p);
        return (d * (float)sc) * (float)u - dmin * (float)mn;
    }
    case T_Q6_K: {
        // e = 128h + 32j + l: nibble j/2 of ql[64h + 32(j%2) + l], bits 2j of qh[32h + l]
        __global const uchar *p = r + (i / QK_K) * 210;
        int e = i % QK_K;
        int h = e / 128, jj = (e % 128) / 32, l = e % 32;
        int lo = (p[64 * h + 32 * (jj % 2) + l] >> (4 * (jj / 2))) & 0x0F;
        int hb = (p[128 + 32 * h + l] >> (2 * jj)) & 3;
        float d = vload_half(104, (__global const half *)p);
        float dl = d * (float)((__global const char *)p)[192 + e / 16];
        return dl * (float)((lo | (hb << 4)) - 32);
    }
    default: {
        __global const uchar *p = r + b * 34;
        float d = vload_half(0, (__global const half *)p);
        return (float)((__global const char *)p)[2 + j] * d;
    }
    }
}

// ---------------------------------------------------------------------------------------------
// Activation staging. A stage holds up to TT token rows of `cols` activations:
//   FORM_INT8: chars [TT][cols], then f32 d [TT][cols/32], then f32 s [TT][cols/32]
//   FORM_F16 / FORM_F32: f32 [TT][cols] (F16: already rounded to f16)
// ---------------------------------------------------------------------------------------------

inline __local char *stage_q(__local float *st) { return (__local char *)st; }
inline __local float *stage_d(__local float *st, int cols) { return st + (TT * cols) / 4; }
inline __local float *stage_s(__local float *st, int cols) {
    return st + (TT * cols) / 4 + TT * (cols / QK);
}

// Stages block `b` (32 values in `v`) of token `t`.
inline void stage_block(__local float *st, int cols, int t, int b, const float *v, int form) {
    if (form == FORM_INT8) {
        float amax = 0.0f;
        for (int j = 0; j < QK; j++) amax = fmax(amax, fabs(v[j]));
        float d = amax / 127.0f;
        float id = (amax != 0.0f) ? 127.0f / amax : 0.0f;
        __local char *q = stage_q(st) + t * cols + b * QK;
        int sum = 0;
        for (int j = 0; j < QK; j++) {
            int qi = (int)rint(v[j] * id);
            q[j] = (char)qi;
            sum += qi;
        }
        int nb = cols / QK;
        stage_d(st, cols)[t * nb + b] = f16r(d);
        stage_s(st, cols)[t * nb + b] = f16r(d * (float)sum);
    } else if (form == FORM_F16) {
        for (int j = 0; j < QK; j++) st[t * cols + b * QK + j] = f16r(v[j]);
    } else {
        for (int j = 0; j < QK; j++) st[t * cols + b * QK + j] = v[j];
    }
}

// RMSNorm scale of each token of the tile: scl[t] = 1/sqrt(mean(x^2) + eps), with the sum of
// squares in f64 where the device has it (as the CPU backend does; each square of an f32 is
// exact in f64, so the order of the sum does not show in the f32 result), else in
// compensated f32. `red` holds 2 * TT * get_local_size(0) floats. Ends with a barrier.
#if defined(cl_khr_fp64) && !defined(NO_FP64)
#define NORM_F64 1
#pragma OPENCL EXTENSION cl_khr_fp64 : enable
#endif

// Value i of token t's residual row: x, or with `post` (a post-normed model) the residual
// after a sublayer, x + RMSNorm(y) * pw with y's scales in sy (the CPU's norm_add: y
// normalised, then added).
inline float resid(__global const float *x, __global const float *y, __global const float *pw,
                   __local const float *sy, int post, int cols, int t0, int t, int i) {
    ulong o = (ulong)(t0 + t) * cols + i;
    return post ? x[o] + (y[o] * sy[t]) * pw[i] : x[o];
}

// With `post`, writes the tile's residual rows (x + RMSNorm(y) * pw) to `dst`; called by one
// work-group of a launch, whose other groups read only x and y.
inline void write_resid(__global const float *x, __global const float *y,
                        __global const float *pw, __local const float *sy, int cols, int t0,
                        int nt, __global float *dst) {
    for (int i = get_local_id(0); i < nt * cols; i += get_local_size(0)) {
        int t = i / cols, c = i % cols;
        dst[(ulong)t0 * cols + i] = resid(x, y, pw, sy, 1, cols, t0, t, c);
    }
}

inline void norm_scales(__global const float *x, __global const float *y,
                        __global const float *pw, __local const float *sy, int post, int cols,
                        int t0, int nt, float eps, __local float *red, __local float *scl) {
    int lid = get_local_id(0), ls = get_local_size(0);
#ifdef NORM_F64
    __local double *r = (__local double *)red;
    for (int t = 0; t < TT; t++) {
        double s = 0.0;
        if (t < nt) {
            for (int i = lid; i < cols; i += ls) {
                double v = (double)resid(x, y, pw, sy, post, cols, t0, t, i);
                s += v * v;
            }
        }
        r[t * ls + lid] = s;
    }
    barrier(CLK_LOCAL_MEM_FENCE);
    if (lid < nt) {
        double s = 0.0;
        for (int i = 0; i < ls; i++) s += r[lid * ls + i];
        scl[lid] = 1.0f / sqrt((float)(s / (double)cols) + eps);
    }
#else
    // Neumaier-compensated partial sums, combined with their error terms.
    for (int t = 0; t < TT; t++) {
        float s = 0.0f, c = 0.0f;
        if (t < nt) {
            for (int i = lid; i < cols; i += ls) {
                float r = resid(x, y, pw, sy, post, cols, t0, t, i);
                float v = r * r;
                float e = fma(r, r, -v);
                float u = s + v;
                c += (fabs(s) >= fabs(v)) ? ((s - u) + v) : ((v - u) + s);
                c += e;
                s = u;
            }
        }
        red[2 * (t * ls + lid)] = s;
        red[2 * (t * ls + lid) + 1] = c;
    }
    barrier(CLK_LOCAL_MEM_FENCE);
    if (lid < nt) {
        float s = 0.0f, c = 0.0f;
        for (int i = 0; i < ls; i++) {
            float v = red[2 * (lid * ls + i)];
            float u = s + v;
            c += (fabs(s) >= fabs(v)) ? ((s - u) + v) : ((v - u) + s);
            c += red[2 * (lid * ls + i) + 1];
            s = u;
        }
        scl[lid] = 1.0f / sqrt((s + c) / (float)cols + eps);
    }
#endif
    barrier(CLK_LOCAL_MEM_FENCE);
}

// RMSNorm scale of the n values at h (one work-item, in the CPU's order: f64 sum of squares
// where the device has fp64, else compensated f32).
inline float vec_scale(__local const float *h, int n, float eps) {
#ifdef NORM_F64
    double s = 0.0;
    for (int i = 0; i < n; i++) s += (double)h[i] * (double)h[i];
    return 1.0f / sqrt((float)(s / (double)n) + eps);
#else
    float s = 0.0f, c = 0.0f;
    for (int i = 0; i < n; i++) {
        float v = h[i] * h[i];
        float u = s + v;
        c += (fabs(s) >= fabs(v)) ? ((s - u) + v) : ((v - u) + s);
        c += fma(h[i], h[i], -v);
        s = u;
    }
    return 1.0f / sqrt((s + c) / (float)n + eps);
#endif
}

// Where a stage's values come from.
#define SRC_PLAIN 0  // rows of x as they are
#define SRC_NORMED 1 // RMSNorm(x) * w, with the tile's scales in scl
#define SRC_MERGE 2  // the merge of split-attention partials in x (see attn_out)
// (SRC_NORMED reads resid(): with `post`, the residual x + RMSNorm(y) * pw)

// Block b (32 values) of token t of the tile's source.
inline void src_block(int src, __global const float *x, __global const float *w,
                      __local const float *scl, int cols, int t0, int t, int b, int nsplit,
                      __global const float *y, __global const float *pw,
                      __local const float *sy, int post, float *v) {
    if (src == SRC_MERGE) {
        // x = partial records {m, l, acc[HEAD_DIM]} per (token, head, split); cols = Q_DIM
        const int rec = HEAD_DIM + 2;
        int h = (b * QK) / HEAD_DIM, d0 = (b * QK) % HEAD_DIM;
        __global const float *p = x + ((ulong)(t0 + t) * N_HEADS + h) * NSPLIT_MAX * rec;
        float m = -INFINITY;
        for (int i = 0; i < nsplit; i++) m = fmax(m, p[i * rec]);
        float l = 0.0f;
        for (int j = 0; j < QK; j++) v[j] = 0.0f;
        for (int i = 0; i < nsplit; i++) {
            float mi = p[i * rec];
            if (mi == -INFINITY) continue;
            float e = pp_exp(mi - m);
            l += e * p[i * rec + 1];
            for (int j = 0; j < QK; j++) v[j] += e * p[i * rec + 2 + d0 + j];
        }
        float inv = (l > 0.0f) ? 1.0f / l : 0.0f;
        for (int j = 0; j < QK; j++) v[j] *= inv;
        return;
    }
    __global const float *row = x + (ulong)(t0 + t) * cols + b * QK;
    if (src == SRC_NORMED) {
        for (int j = 0; j < QK; j++) {
            float r = resid(x, y, pw, sy, post, cols, t0, t, b * QK + j);
            v[j] = (r * scl[t]) * w[b * QK + j];
        }
    } else {
        for (int j = 0; j < QK; j++) v[j] = row[j];
    }
}

// Stages the tile's rows from `src` in the form of the matrix that reads them. Ends with a
// barrier. FORM_Q8K (ggml's quantize_row_q8_K_ref, as the CPU) takes two passes over the
// 32-blocks: each block's first value of largest magnitude goes to the d area, then every
// block finds its 256-block's (the first of the largest, as the CPU's scan), quantizes with
// iscale = -127/max, q = min(127, rint(iscale * v)), and stores d = 1/iscale in the s area
// (one copy per 32-block). The values are recomputed, bit for bit, in the second pass.
inline void stage_rows(int src, __global const float *x, __global const float *w,
                       __local const float *scl, int cols, int t0, int nt, int nsplit,
                       __global const float *y, __global const float *pw,
                       __local const float *sy, int post, __local float *st, int form) {
    int lid = get_local_id(0), ls = get_local_size(0);
    int nb = cols / QK;
    float v[QK];
    if (form != FORM_Q8K) {
        for (int blk = lid; blk < nt * nb; blk += ls) {
            int t = blk / nb, b = blk % nb;
            src_block(src, x, w, scl, cols, t0, t, b, nsplit, y, pw, sy, post, v);
            stage_block(st, cols, t, b, v, form);
        }
        barrier(CLK_LOCAL_MEM_FENCE);
        return;
    }
    __local float *mx = stage_d(st, cols);
    __local float *dd = stage_s(st, cols);
    for (int blk = lid; blk < nt * nb; blk += ls) {
        int t = blk / nb, b = blk % nb;
        src_block(src, x, w, scl, cols, t0, t, b, nsplit, y, pw, sy, post, v);
        float amax = 0.0f, m = 0.0f;
        for (int j = 0; j < QK; j++) {
            if (fabs(v[j]) > amax) {
                amax = fabs(v[j]);
                m = v[j];
            }
        }
        mx[t * nb + b] = m;
    }
    barrier(CLK_LOCAL_MEM_FENCE);
    for (int blk = lid; blk < nt * nb; blk += ls) {
        int t = blk / nb, b = blk % nb;
        int b0 = b - b % (QK_K / QK);
        float amax = 0.0f, m = 0.0f;
        for (int i = 0; i < QK_K / QK; i++) {
            float c = mx[t * nb + b0 + i];
            if (fabs(c) > amax) {
                amax = fabs(c);
                m = c;
            }
        }
        src_block(src, x, w, scl, cols, t0, t, b, nsplit, y, pw, sy, post, v);
        __local char *q = stage_q(st) + t * cols + b * QK;
        if (amax == 0.0f) {
            for (int j = 0; j < QK; j++) q[j] = 0;
            dd[t * nb + b] = 0.0f;
        } else {
            float iscale = -127.0f / m;
            for (int j = 0; j < QK; j++) q[j] = (char)min(127, (int)rint(iscale * v[j]));
            dd[t * nb + b] = 1.0f / iscale;
        }
    }
    barrier(CLK_LOCAL_MEM_FENCE);
}

// ---------------------------------------------------------------------------------------------
// Tiled row dot: acc[t] = W[row] . a[t] for the nt staged tokens. Each weight block is read
// once and used for every token of the tile; the quantized blocks are never expanded in memory.
// ---------------------------------------------------------------------------------------------

inline void row_dot_tile(__global const uchar *w, int wtype, ulong row, int cols,
                         __local const float *st, int nt, float *acc) {
    for (int t = 0; t < TT; t++) acc[t] = 0.0f;
    int nb = cols / QK;
    __global const uchar *r = w + row * row_bytes(wtype, cols);
    __local const char *aq = (__local const char *)st;
    __local const float *ad = st + (TT * cols) / 4;
    __local const float *as = ad + TT * nb;
    switch (wtype) {
    case T_Q4_1:
        for (int b = 0; b < nb; b++) {
            __global const uchar *p = r + b * 20;
            float dw = vload_half(0, (__global const half *)p);
            float mw = vload_half(1, (__global const half *)p);
            uchar16 qs = vload16(0, p + 4);
            int16 lo = convert_int16(qs & (uchar16)(0x0F));
            int16 hi = convert_int16(qs >> (uchar16)(4));
            for (int t = 0; t < TT; t++) {
                if (t < nt) {
                    __local const char *a = aq + t * cols + b * QK;
                    int16 a0 = convert_int16(vload16(0, a));
                    int16 a1 = convert_int16(vload16(1, a));
                    int sumi = hsum16(lo * a0 + hi * a1);
                    acc[t] += (dw * ad[t * nb + b]) * (float)sumi + mw * as[t * nb + b];
                }
            }
        }
        break;
    case T_Q4_0:
        for (int b = 0; b < nb; b++) {
            __global const uchar *p = r + b * 18;
            float dw = vload_half(0, (__global const half *)p);
            uchar16 qs = vload16(0, p + 2);
            int16 lo = convert_int16(qs & (uchar16)(0x0F)) - (int16)(8);
            int16 hi = convert_int16(qs >> (uchar16)(4)) - (int16)(8);
            for (int t = 0; t < TT; t++) {
                if (t < nt) {
                    __local const char *a = aq + t * cols + b * QK;
                    int16 a0 = convert_int16(vload16(0, a));
                    int16 a1 = convert_int16(vload16(1, a));
                    int sumi = hsum16(lo * a0 + hi * a1);
                    acc[t] += (float)sumi * (dw * ad[t * nb + b]);
                }
            }
        }
        break;
    case T_Q5_0:
        for (int b = 0; b < nb; b++) {
            __global const uchar *p = r + b * 22;
            float dw = vload_half(0, (__global const half *)p);
            int16 lo, hi;
            q5_0_quants(p, &lo, &hi);
            for (int t = 0; t < TT; t++) {
                if (t < nt) {
                    __local const char *a = aq + t * cols + b * QK;
                    int16 a0 = convert_int16(vload16(0, a));
                    int16 a1 = convert_int16(vload16(1, a));
                    int sumi = hsum16(lo * a0 + hi * a1);
                    acc[t] += (dw * ad[t * nb + b]) * (float)sumi;
                }
            }
        }
        break;
    case T_Q4_K:
        // kquants.rs: isum = sum_g sc[g] * sum(u q), msum = sum_g mn[g] * bsum[g];
        // block value (d * da) * isum - (dmin * da) * msum, added block by block
        for (int B = 0; B < cols / QK_K; B++) {
            __global const uchar *p = r + B * 144;
            float dw = vload_half(0, (__global const half *)p);
            float mw = vload_half(1, (__global const half *)p);
            int isum[TT], msum[TT];
            for (int t = 0; t < TT; t++) isum[t] = msum[t] = 0;
            for (int c = 0; c < 4; c++) {
                int s0, m0, s1, m1;
                scale_min_k4(2 * c, p + 4, &s0, &m0);
                scale_min_k4(2 * c + 1, p + 4, &s1, &m1);
                uchar16 q0 = vload16(0, p + 16 + 32 * c), q1 = vload16(1, p + 16 + 32 * c);
                int16 u00 = convert_int16(q0 & (uchar16)(0x0F));
                int16 u01 = convert_int16(q1 & (uchar16)(0x0F));
                int16 u10 = convert_int16(q0 >> (uchar16)(4));
                int16 u11 = convert_int16(q1 >> (uchar16)(4));
                for (int t = 0; t < TT; t++) {
                    if (t < nt) {
                        __local const char *a = aq + t * cols + B * QK_K + 64 * c;
                        int16 a00 = convert_int16(vload16(0, a)), a01 = convert_int16(vload16(1, a));
                        int16 a10 = convert_int16(vload16(2, a)), a11 = convert_int16(vload16(3, a));
                        isum[t] += s0 * hsum16(u00 * a00 + u01 * a01) +
                                   s1 * hsum16(u10 * a10 + u11 * a11);
                        msum[t] += m0 * hsum16(a00 + a01) + m1 * hsum16(a10 + a11);
                    }
                }
            }
            for (int t = 0; t < TT; t++) {
                if (t < nt) {
                    float da = as[t * nb + B * (QK_K / QK)];
                    acc[t] += (dw * da) * (float)isum[t] - (mw * da) * (float)msum[t];
                }
            }
        }
        break;
    case T_Q6_K:
        // value u - 32 with 16-element groups of signed 8-bit scales; no min
        for (int B = 0; B < cols / QK_K; B++) {
            __global const uchar *p = r + B * 210;
            __global const char *scs = (__global const char *)(p + 192);
            float dw = vload_half(104, (__global const half *)p);
            int isum[TT];
            for (int t = 0; t < TT; t++) isum[t] = 0;
            for (int h = 0; h < 2; h++) {
                uchar16 h0 = vload16(0, p + 128 + 32 * h), h1 = vload16(1, p + 128 + 32 * h);
                for (int j = 0; j < 4; j++) {
                    __global const uchar *ql = p + 64 * h + 32 * (j % 2);
                    uchar16 ls = (uchar16)(4 * (j / 2)), hs = (uchar16)(2 * j);
                    uchar16 l0 = (vload16(0, ql) >> ls) & (uchar16)(0x0F);
                    uchar16 l1 = (vload16(1, ql) >> ls) & (uchar16)(0x0F);
                    int16 u0 = convert_int16(l0 | (((h0 >> hs) & (uchar16)(3)) << (uchar16)(4))) - (int16)(32);
                    int16 u1 = convert_int16(l1 | (((h1 >> hs) & (uchar16)(3)) << (uchar16)(4))) - (int16)(32);
                    int g = 8 * h + 2 * j;
                    int sc0 = scs[g], sc1 = scs[g + 1];
                    for (int t = 0; t < TT; t++) {
                        if (t < nt) {
                            __local const char *a = aq + t * cols + B * QK_K + 128 * h + 32 * j;
                            int16 a0 = convert_int16(vload16(0, a)), a1 = convert_int16(vload16(1, a));
                            isum[t] += sc0 * hsum16(u0 * a0) + sc1 * hsum16(u1 * a1);
                        }
                    }
                }
            }
            for (int t = 0; t < TT; t++) {
                if (t < nt) acc[t] += (dw * as[t * nb + B * (QK_K / QK)]) * (float)isum[t];
            }
        }
        break;
    case T_Q8_0:
        for (int b = 0; b < nb; b++) {
            __global const uchar *p = r + b * 34;
            float dw = vload_half(0, (__global const half *)p);
            int16 w0 = convert_int16(vload16(0, (__global const char *)(p + 2)));
            int16 w1 = convert_int16(vload16(1, (__global const char *)(p + 2)));
            for (int t = 0; t < TT; t++) {
                if (t < nt) {
                    __local const char *a = aq + t * cols + b * QK;
                    int16 a0 = convert_int16(vload16(0, a));
                    int16 a1 = convert_int16(vload16(1, a));
                    int sumi = hsum16(w0 * a0 + w1 * a1);
                    acc[t] += (float)sumi * (dw * ad[t * nb + b]);
                }
            }
        }
        break;
    case T_F16:
        for (int i = 0; i < cols; i += 4) {
            float4 wv = vload_half4(i / 4, (__global const half *)r);
            for (int t = 0; t < TT; t++) {
                if (t < nt) {
                    float4 av = vload4(0, st + t * cols + i);
                    acc[t] += dot(wv, av);
                }
            }
        }
        break;
    default: // T_F32
        for (int i = 0; i < cols; i += 4) {
            float4 wv = vload4(0, (__global const float *)r + i);
            for (int t = 0; t < TT; t++) {
                if (t < nt) {
                    float4 av = vload4(0, st + t * cols + i);
                    acc[t] += dot(wv, av);
                }
            }
        }
        break;
    }
}
