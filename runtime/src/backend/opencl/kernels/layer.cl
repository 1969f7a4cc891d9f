// The fused kernels of one transformer layer and of the model's ends. A decode step of a layer
// is five launches:
//   attn_qkv     RMSNorm + Q/K/V matvec (+ bias) + RoPE + KV-ring write
//   attention    (attention.cl) online-softmax partials over a split of the ring
//   attn_out     merge of the partials + output projection + residual add
//   ffn_gate_up  RMSNorm + gate and up matvec + SwiGLU
//   ffn_down     down projection + residual add
// plus `embed` before the first layer and `head` (RMSNorm + output matvec) after the last.
// Each work-group stages the activations of up to TT tokens in local memory and every
// work-item computes one weight row for all of them (the prefill tiling; decode is TT = 1 in
// use). The residual stream `x` stays f32.
//
// Post-normed models (Gemma 3, POST_NORMS): a sublayer's output y is RMS-normalised before
// it joins the residual, which needs all of y's row; so attn_out and ffn_down write y, and the
// next kernel (ffn_gate_up, the next layer's attn_qkv, head) computes the residual
// x + RMSNorm(y) * pw in every work-group while one group stores it (to h after attention,
// to x after the feed-forward): still five launches per layer.
//
// `step` holds, per token of the batch, {token id, position, KV slot}; the slot indexes the KV
// buffers of every sequence lane (lane × ring capacity + the slot in the lane's ring), so the
// tokens of one launch may belong to several sequences (batched decode).

// Embedding rows: x[t][i] = dequant(embd[token[t]])[i] (times `scale` if has_scale).
__kernel void embed(__global const uchar *embd, int etype, __global const uint *step,
                    __global float *x, int n, float scale, int has_scale) {
    int i = get_global_id(0), t = get_global_id(1);
    if (i >= N_EMBD || t >= n) return;
    uint tok = step[t * 3];
    float v = dequant_elem(embd, etype, N_EMBD, tok, i);
    x[(ulong)t * N_EMBD + i] = has_scale ? v * scale : v;
}

// GELU, tanh form, with the CPU's operations (quant/act.rs gelu_tanh): x / (1 + e^t),
// t = -2*sqrt(2/pi)*x*(1 + 0.044715*x^2), with the project exponential (pp_exp), so the
// bits equal the CPU scalar tier's where division is correctly rounded.
inline float gelu_tanh(float x) {
    float t = (-2.0f * 0.7978846f) * x * (1.0f + 0.044715f * x * x);
    return x / (1.0f + pp_exp(t));
}

// One work-group per (head of Q, K or V; tile of TT tokens); work-item = dimension in the head.
__kernel __attribute__((reqd_work_group_size(HEAD_DIM, 1, 1))) void
attn_qkv(__global const float *x, __global const float *norm_w, __global const uchar *wq,
         __global const uchar *wk, __global const uchar *wv, int tq, int tk, int tv,
         __global const float *bq, __global const float *bk, __global const float *bv,
         int has_bias, __global const uint *step, __global const float *rope,
         __global float *qout, __global half *kc, __global half *vc, __global uint *slot_pos,
         int layer, int cap, int n, float eps, __global const float *qn,
         __global const float *kn, int rope_off, __global const float *h,
         __global const float *y, __global const float *pw, int post, __global float *xdst) {
    __local float st[STAGE_QKV];
    __local float red[2 * TT * HEAD_DIM] __attribute__((aligned(8)));
    __local float scl[TT];
    __local float sy[TT];
    __local float res[TT * HEAD_DIM];

    int lid = get_local_id(0);
    int g = get_group_id(0);
    int t0 = get_group_id(1) * TT;
    int nt = min(TT, n - t0);

    // Which matrix and head this group computes (uniform over the group).
    int kind, hh, wtype;
    __global const uchar *w;
    __global const float *bias;
    if (g < N_HEADS) {
        kind = 0; hh = g; w = wq; wtype = tq; bias = bq;
    } else if (g < N_HEADS + N_KV_HEADS) {
        kind = 1; hh = g - N_HEADS; w = wk; wtype = tk; bias = bk;
    } else {
        kind = 2; hh = g - N_HEADS - N_KV_HEADS; w = wv; wtype = tv; bias = bv;
    }

    // the layer's input: x, or (post-normed, after the first layer) h + RMSNorm(y) * pw
    __global const float *src = post ? h : x;
    if (post) norm_scales(y, 0, 0, 0, 0, N_EMBD, t0, nt, eps, red, sy);
    norm_scales(src, y, pw, sy, post, N_EMBD, t0, nt, eps, red, scl);
    stage_rows(SRC_NORMED, src, norm_w, scl, N_EMBD, t0, nt, 0, y, pw, sy, post, st,
               form_of(wtype));
    if (post && g == 0) write_resid(h, y, pw, sy, N_EMBD, t0, nt, xdst);

    float acc[TT];
    int row = hh * HEAD_DIM + lid;
    row_dot_tile(w, wtype, row, N_EMBD, st, nt, acc);
    for (int t = 0; t < TT; t++) {
        if (t < nt) {
            float v = acc[t];
            if (has_bias) v += bias[row];
            res[t * HEAD_DIM + lid] = v;
        }
    }
    barrier(CLK_LOCAL_MEM_FENCE);
#if QK_NORM
    // per-head RMSNorm of Q and K before RoPE
    if (kind != 2) {
        if (lid < nt) scl[lid] = vec_scale(res + lid * HEAD_DIM, HEAD_DIM, eps);
        barrier(CLK_LOCAL_MEM_FENCE);
        __global const float *nw = (kind == 0) ? qn : kn;
        for (int t = 0; t < nt; t++) res[t * HEAD_DIM + lid] = (res[t * HEAD_DIM + lid] * scl[t]) * nw[lid];
        barrier(CLK_LOCAL_MEM_FENCE);
    }
#endif
    rope += rope_off;

    for (int t = 0; t < nt; t++) {
        uint pos = step[(t0 + t) * 3 + 1];
        uint slot = step[(t0 + t) * 3 + 2];
        __local const float *h = res + t * HEAD_DIM;
        float out = h[lid];
        if (kind != 2) {
#if ROPE_NEOX
            if (lid < 2 * ROPE_HALF) {
                int j = (lid < ROPE_HALF) ? lid : lid - ROPE_HALF;
                float c = rope[((t0 + t) * ROPE_HALF + j) * 2], s = rope[((t0 + t) * ROPE_HALF + j) * 2 + 1];
                float a = h[j], b = h[j + ROPE_HALF];
                out = (lid < ROPE_HALF) ? a * c - b * s : a * s + b * c;
            }
#else
            int j = lid >> 1;
            if (j < ROPE_HALF) {
                float c = rope[((t0 + t) * ROPE_HALF + j) * 2], s = rope[((t0 + t) * ROPE_HALF + j) * 2 + 1];
                float a = h[2 * j], b = h[2 * j + 1];
                out = ((lid & 1) == 0) ? a * c - b * s : a * s + b * c;
            }
#endif
        }
        if (kind == 0) {
            qout[(ulong)(t0 + t) * Q_DIM + hh * HEAD_DIM + lid] = out;
        } else {
            ulong o = (((ulong)layer * N_KV_HEADS + hh) * cap + slot) * HEAD_DIM + lid;
            vstore_half_rte(out, o, kind == 1 ? kc : vc);
        }
        if (g == 0 && lid == 0) slot_pos[slot] = pos;
    }
}

// Merges the attention partials of the tile's tokens (nsplit > 0; nsplit = 0: `part` holds
// the attention rows of attention_exact), then y = Wo . attn, x += y.
__kernel __attribute__((reqd_work_group_size(WG, 1, 1))) void
attn_out(__global const float *part, int nsplit, __global const uchar *wo, int to,
         __global float *x, int n, int accumulate) {
    __local float st[STAGE_OUT];
    int t0 = get_group_id(1) * TT;
    int nt = min(TT, n - t0);
    // nsplit = 0: attention_exact wrote the attention rows themselves
    stage_rows(nsplit == 0 ? SRC_PLAIN : SRC_MERGE, part, 0, 0, Q_DIM, t0, nt, nsplit, 0, 0, 0,
               0, st, form_of(to));

    int row = get_global_id(0);
    if (row >= N_EMBD) return;
    float acc[TT];
    row_dot_tile(wo, to, row, Q_DIM, st, nt, acc);
    for (int t = 0; t < nt; t++) {
        ulong o = (ulong)(t0 + t) * N_EMBD + row;
        x[o] = accumulate ? x[o] + acc[t] : acc[t];
    }
}

// g = silu(Wgate . RMSNorm(x)) * (Wup . RMSNorm(x)).
__kernel __attribute__((reqd_work_group_size(WG, 1, 1))) void
ffn_gate_up(__global const float *x, __global const float *norm_w, __global const uchar *wg,
            __global const uchar *wu, int tg, int tu, __global float *gout, int n, float eps,
            __global const float *y, __global const float *pw, int post, __global float *hdst) {
    __local float st[STAGE_FFN];
    __local float red[2 * TT * WG] __attribute__((aligned(8)));
    __local float scl[TT];
    __local float sy[TT];
    int t0 = get_group_id(1) * TT;
    int nt = min(TT, n - t0);
    // post-normed: the input is x + RMSNorm(y_attention) * pw, stored to h by group 0
    if (post) norm_scales(y, 0, 0, 0, 0, N_EMBD, t0, nt, eps, red, sy);
    norm_scales(x, y, pw, sy, post, N_EMBD, t0, nt, eps, red, scl);
    stage_rows(SRC_NORMED, x, norm_w, scl, N_EMBD, t0, nt, 0, y, pw, sy, post, st, form_of(tg));
    if (post && get_group_id(0) == 0) write_resid(x, y, pw, sy, N_EMBD, t0, nt, hdst);

    int row = get_global_id(0);
    if (row >= N_FF) return;
    float ga[TT], ua[TT];
    row_dot_tile(wg, tg, row, N_EMBD, st, nt, ga);
    row_dot_tile(wu, tu, row, N_EMBD, st, nt, ua);
    for (int t = 0; t < nt; t++) {
        float a = ga[t];
#if GELU
        gout[(ulong)(t0 + t) * N_FF + row] = gelu_tanh(a) * ua[t];
#else
        gout[(ulong)(t0 + t) * N_FF + row] = (a / (1.0f + pp_exp(-a))) * ua[t];
#endif
    }
}

// x += Wdown . g.
__kernel __attribute__((reqd_work_group_size(WG, 1, 1))) void
ffn_down(__global const float *g, __global const uchar *wd, int td, __global float *x, int n,
         int accumulate) {
    __local float st[STAGE_DOWN];
    int t0 = get_group_id(1) * TT;
    int nt = min(TT, n - t0);
    stage_rows(SRC_PLAIN, g, 0, 0, N_FF, t0, nt, 0, 0, 0, 0, 0, st, form_of(td));

    int row = get_global_id(0);
    if (row >= N_EMBD) return;
    float acc[TT];
    row_dot_tile(wd, td, row, N_FF, st, nt, acc);
    for (int t = 0; t < nt; t++) {
        ulong o = (ulong)(t0 + t) * N_EMBD + row;
        x[o] = accumulate ? x[o] + acc[t] : acc[t];
    }
}

// logits[r][v] = Wout[v] . RMSNorm(x[first + r]) for the n_rows rows asked for.
__kernel __attribute__((reqd_work_group_size(WG, 1, 1))) void
head(__global const float *x, __global const float *norm_w, __global const uchar *w, int tw,
     __global float *logits, int vocab, int first, int n_rows, float eps,
     __global const float *y, __global const float *pw, int post) {
    __local float st[STAGE_HEAD];
    __local float red[2 * TT * WG] __attribute__((aligned(8)));
    __local float scl[TT];
    __local float sy[TT];
    int r0 = get_group_id(1) * TT;
    int nt = min(TT, n_rows - r0);
    int t0 = first + r0;
    // post-normed: x is h, the residual is h + RMSNorm(y_ffn) * pw
    if (post) norm_scales(y, 0, 0, 0, 0, N_EMBD, t0, nt, eps, red, sy);
    norm_scales(x, y, pw, sy, post, N_EMBD, t0, nt, eps, red, scl);
    stage_rows(SRC_NORMED, x, norm_w, scl, N_EMBD, t0, nt, 0, y, pw, sy, post, st, form_of(tw));

    int row = get_global_id(0);
    if (row >= vocab) return;
    float acc[TT];
    row_dot_tile(w, tw, row, N_EMBD, st, nt, acc);
    for (int t = 0; t < nt; t++) logits[(ulong)(r0 + t) * vocab + row] = acc[t];
}
