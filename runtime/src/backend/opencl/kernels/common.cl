// Shared helpers of the PocketPerf OpenCL kernels: ggml block formats read in place,
// activation staging in local memory, and the tiled row dot products.
//
// Build-time constants (set by the host from the model and the device, see program.rs):
//   N_EMBD, N_FF, Q_DIM, KV_DIM, HEAD_DIM, N_HEADS, N_KV_HEADS, ROPE_HALF, ROPE_NEOX,
//   TT (tokens per tile), WG (rows per work-group), NSPLIT_MAX (attention splits),
//   ATT_BLOCK, ATT_CHUNK (the CPU attention's block and chunk of slots),
//   STAGE_* (floats of local staging per kernel).
//
// Numerics follow the CPU backend (runtime/src/quant): activations feeding a Q4_0/Q4_1/Q8_0
// matrix are quantized per 32-block with d = amax/127, q = rint(x * 127/amax) (ties to
// even), d rounded to f16 and, for Q4_1, s = f16(d * sum(q)); the block dot is an exact
// integer sum scaled in f32 and accumulated block by block. F16 matrices take f16-rounded
// activations, F32 matrices plain f32. The device needs no fp16 extension: halves are only
// read and written through vload_half / vstore_half_rte.

#pragma OPENCL FP_CONTRACT OFF

// ggml type ids (ggml.h)
#define T_F32 0
#define T_F16 1
#define T_Q4_0 2
#define T_Q4_1 3
#define T_Q8_0 8

// How a matrix wants its activation row staged.
#define FORM_INT8 0
#define FORM_F16 1
#define FORM_F32 2

#define QK 32

inline int form_of(int wtype) {
    return (wtype == T_F16) ? FORM_F16 : ((wtype == T_F32) ? FORM_F32 : FORM_INT8);
}

// Bytes of one row of `cols` elements of a ggml type.
inline ulong row_bytes(int wtype, int cols) {
    switch (wtype) {
    case T_F32: return (ulong)cols * 4;
    case T_F16: return (ulong)cols * 2;
    case T_Q4_0: return (ulong)(cols / QK) * 18;
    case T_Q4_1: return (ulong)(cols / QK) * 20;
    default: return (ulong)(cols / QK) * 34; // T_Q8_0
    }
}

// e^x by the CPU backend's own steps (runtime/src/quant/attn.rs `exp`: the same IEEE
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

inline void norm_scales(__global const float *x, int cols, int t0, int nt, float eps,
                        __local float *red, __local float *scl) {
    int lid = get_local_id(0), ls = get_local_size(0);
#ifdef NORM_F64
    __local double *r = (__local double *)red;
    for (int t = 0; t < TT; t++) {
        double s = 0.0;
        if (t < nt) {
            __global const float *row = x + (ulong)(t0 + t) * cols;
            for (int i = lid; i < cols; i += ls) s += (double)row[i] * (double)row[i];
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
            __global const float *row = x + (ulong)(t0 + t) * cols;
            for (int i = lid; i < cols; i += ls) {
                float v = row[i] * row[i];
                float e = fma(row[i], row[i], -v);
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

// Stages RMSNorm(x) * w of the tile's tokens. Ends with a barrier.
inline void stage_normed(__global const float *x, __global const float *w, int cols, int t0,
                         int nt, __local const float *scl, __local float *st, int form) {
    int lid = get_local_id(0), ls = get_local_size(0);
    int nb = cols / QK;
    for (int blk = lid; blk < nt * nb; blk += ls) {
        int t = blk / nb, b = blk % nb;
        __global const float *row = x + (ulong)(t0 + t) * cols + b * QK;
        float v[QK];
        for (int j = 0; j < QK; j++) v[j] = (row[j] * scl[t]) * w[b * QK + j];
        stage_block(st, cols, t, b, v, form);
    }
    barrier(CLK_LOCAL_MEM_FENCE);
}

// Stages rows of x as they are. Ends with a barrier.
inline void stage_plain(__global const float *x, int cols, int t0, int nt, __local float *st,
                        int form) {
    int lid = get_local_id(0), ls = get_local_size(0);
    int nb = cols / QK;
    for (int blk = lid; blk < nt * nb; blk += ls) {
        int t = blk / nb, b = blk % nb;
        __global const float *row = x + (ulong)(t0 + t) * cols + b * QK;
        float v[QK];
        for (int j = 0; j < QK; j++) v[j] = row[j];
        stage_block(st, cols, t, b, v, form);
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
