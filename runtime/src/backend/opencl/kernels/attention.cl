// Causal attention over the ring KV cache, split over the sequence (flash-decoding style).
//
// The KV buffers hold one ring of `cap` slots per sequence lane, each layer and KV head a run
// of `cap` slots (all lanes' rings side by side: `cap` is lanes × the ring's capacity); a
// token's row of `rows` is {first slot of its lane's ring, slots its lane uses}, so the rows
// of one launch may belong to different sequences (batched decode).
//
// Grid: (HEAD_DIM * nsplit, N_HEADS, n tokens); one work-group per (split, head, token).
// A split scans its lane's slots [split * chunk, min(used, (split + 1) * chunk)) (none when
// the lane uses fewer: the record then says so with m = -inf) in tiles of HEAD_DIM
// slots: work-item i scores slot (tile + i) against the query (masked when the slot's
// position is after the query's), then, as dimension i, accumulates the values with the
// online-softmax recurrence (running max m, running sum l, rescaled accumulator). Each
// group writes the record {m, l, acc[HEAD_DIM]}; attn_out merges the records of the splits.
// Slot order does not matter (positions mask), so the ring may have wrapped. A sliding-window
// layer passes its window (a query at p sees p - window + 1 ..= p), other layers UINT_MAX.

__kernel __attribute__((reqd_work_group_size(HEAD_DIM, 1, 1))) void
attention(__global const float *q, __global const half *kc, __global const half *vc,
          __global const uint *slot_pos, __global const uint *step, __global float *part,
          int layer, int cap, __global const uint *rows, int nsplit, int chunk, float scale,
          uint window) {
    __local float qv[HEAD_DIM];
    __local float sc[HEAD_DIM];
    __local float pr[HEAD_DIM];

    int lid = get_local_id(0);
    int split = get_group_id(0);
    int h = get_group_id(1);
    int t = get_group_id(2);
    int kvh = h / (N_HEADS / N_KV_HEADS);
    uint p = step[t * 3 + 1];
    int used = (int)rows[t * 2 + 1];

    qv[lid] = q[(ulong)t * Q_DIM + h * HEAD_DIM + lid];
    barrier(CLK_LOCAL_MEM_FENCE);

    // element offset of this head's ring in the token's lane (no arithmetic on half
    // pointers: PoCL and phones lack cl_khr_fp16); slot_pos from the lane's first slot
    ulong hb = (((ulong)layer * N_KV_HEADS + kvh) * cap + rows[t * 2]) * HEAD_DIM;
    slot_pos += rows[t * 2];
    int begin = split * chunk;
    int end = min(used, begin + chunk);

    float m = -INFINITY, l = 0.0f, acc = 0.0f;
    for (int base = begin; base < end; base += HEAD_DIM) {
        int s = base + lid;
        float own = -INFINITY;
        if (s < end && slot_pos[s] <= p && p - slot_pos[s] < window) {
            float d = 0.0f;
            for (int i = 0; i < HEAD_DIM; i++) d += qv[i] * vload_half(hb + (ulong)s * HEAD_DIM + i, kc);
            own = d * scale;
        }
        sc[lid] = own;
        barrier(CLK_LOCAL_MEM_FENCE);
        float mt = -INFINITY;
        for (int i = 0; i < HEAD_DIM; i++) mt = fmax(mt, sc[i]);
        float mn = fmax(m, mt);
        float corr = (m == -INFINITY) ? 0.0f : pp_exp(m - mn);
        pr[lid] = (own == -INFINITY) ? 0.0f : pp_exp(own - mn);
        barrier(CLK_LOCAL_MEM_FENCE);
        float ts = 0.0f, tv = 0.0f;
        for (int i = 0; i < HEAD_DIM; i++) {
            float wgt = pr[i];
            if (wgt != 0.0f) {
                ts += wgt;
                tv += wgt * vload_half(hb + (ulong)(base + i) * HEAD_DIM + lid, vc);
            }
        }
        l = l * corr + ts;
        acc = acc * corr + tv;
        m = mn;
        barrier(CLK_LOCAL_MEM_FENCE);
    }
    __global float *rec = part + (((ulong)t * N_HEADS + h) * NSPLIT_MAX + split) * (HEAD_DIM + 2);
    rec[2 + lid] = acc;
    if (lid == 0) {
        rec[0] = m;
        rec[1] = l;
    }
}

// The same attention in the CPU backend's exact order of operations
// (runtime/src/model/attention.rs), one work-group per (head, token), work-item = dimension:
// the slots in chunks of ATT_CHUNK and blocks of ATT_BLOCK slots (both from slot 0); per
// block the scores in slot order, their maximum m_b, and if the row sees any slot of the
// block the online-softmax update m' = max(m, m_b), l' = l * e^(m - m') + sum of
// e^(s - m') in slot order, o' = o * (l * e^(m - m') / l') + sum of (e^(s - m') / l') * v in
// slot order; a chunk's blocks fold into a fresh state; the chunks' states merge in order
// (each weighted by its share of the merged sum). A row that sees one block gets the classic
// softmax. Exponentials are pp_exp, the CPU's. It is the conformance mode.
// `scores` is scratch of [n][N_HEADS][scap] floats (scap: one ring's capacity); the output
// goes to out[t][Q_DIM]. KV layout and `rows` as for `attention`.
__kernel __attribute__((reqd_work_group_size(HEAD_DIM, 1, 1))) void
attention_exact(__global const float *q, __global const half *kc, __global const half *vc,
                __global const uint *slot_pos, __global const uint *step,
                __global float *scores, __global float *out, int layer, int cap,
                __global const uint *rows, float scale, uint window, int scap) {
    __local float qv[HEAD_DIM];
    __local float red[HEAD_DIM];

    int lid = get_local_id(0);
    int h = get_group_id(1);
    int t = get_group_id(2);
    int kvh = h / (N_HEADS / N_KV_HEADS);
    uint p = step[t * 3 + 1];
    int used = (int)rows[t * 2 + 1];

    qv[lid] = q[(ulong)t * Q_DIM + h * HEAD_DIM + lid];
    barrier(CLK_LOCAL_MEM_FENCE);

    // element offset of this head's ring in the token's lane (no arithmetic on half
    // pointers: PoCL and phones lack cl_khr_fp16); slot_pos from the lane's first slot
    ulong hb = (((ulong)layer * N_KV_HEADS + kvh) * cap + rows[t * 2]) * HEAD_DIM;
    slot_pos += rows[t * 2];
    __global float *sc = scores + ((ulong)t * N_HEADS + h) * scap;

    // merged state of the chunks so far (am = -inf: none seen)
    float am = -INFINITY, al = 0.0f, ao = 0.0f;
    for (int c0 = 0; c0 < used; c0 += ATT_CHUNK) {
        int c1 = min(used, c0 + ATT_CHUNK);
        float m = -INFINITY, l = 0.0f, o = 0.0f;
        for (int b0 = c0; b0 < c1; b0 += ATT_BLOCK) {
            int b1 = min(c1, b0 + ATT_BLOCK);
            float mx = -INFINITY;
            for (int s = b0 + lid; s < b1; s += HEAD_DIM) {
                float v = -INFINITY;
                if (slot_pos[s] <= p && p - slot_pos[s] < window) {
                    float d = 0.0f;
                    for (int i = 0; i < HEAD_DIM; i++) d += qv[i] * vload_half(hb + (ulong)s * HEAD_DIM + i, kc);
                    v = d * scale;
                    mx = fmax(mx, v);
                }
                sc[s] = v;
            }
            red[lid] = mx;
            barrier(CLK_LOCAL_MEM_FENCE | CLK_GLOBAL_MEM_FENCE);
            mx = -INFINITY;
            for (int i = 0; i < HEAD_DIM; i++) mx = fmax(mx, red[i]);
            // every work-item has read `red` before the next block writes it
            barrier(CLK_LOCAL_MEM_FENCE);
            // nothing of the block seen (the same for the whole group): state unchanged
            if (mx == -INFINITY) continue;
            float mn = fmax(mx, m);
            float prev = (m == -INFINITY) ? 0.0f : ((mn == m) ? l : l * pp_exp(m - mn));
            for (int s = b0 + lid; s < b1; s += HEAD_DIM) sc[s] = pp_exp(sc[s] - mn);
            barrier(CLK_GLOBAL_MEM_FENCE);
            float sum = 0.0f;
            for (int s = b0; s < b1; s++) sum += sc[s];
            float lnew = prev + sum;
            float inv = 1.0f / lnew;
            if (prev != 0.0f) o *= prev * inv;
            for (int s = b0; s < b1; s++) {
                float w = sc[s] * inv;
                if (w != 0.0f) o += w * vload_half(hb + (ulong)s * HEAD_DIM + lid, vc);
            }
            m = mn;
            l = lnew;
        }
        if (m == -INFINITY) continue;
        if (am == -INFINITY) {
            am = m;
            al = l;
            ao = o;
        } else {
            float mn = fmax(am, m);
            float wa = al * pp_exp(am - mn), wb = l * pp_exp(m - mn);
            float lnew = wa + wb;
            float fa = wa / lnew, fb = wb / lnew;
            ao = ao * fa + o * fb;
            am = mn;
            al = lnew;
        }
    }
    out[(ulong)t * Q_DIM + h * HEAD_DIM + lid] = ao;
}
