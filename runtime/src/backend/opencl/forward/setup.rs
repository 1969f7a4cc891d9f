//! Building a [`ClCore`]: the device buffers of a pass and of the rings, the kernel objects
//! (each checked against the work-group size it requires) and the arguments that stay the
//! same for every pass, set once.

use super::*;

pub(super) struct Bufs {
    pub(super) x: DevBuf,
    pub(super) q: DevBuf,
    pub(super) part: DevBuf,
    pub(super) g: DevBuf,
    pub(super) logits: DevBuf,
    pub(super) kc: DevBuf,
    pub(super) vc: DevBuf,
    pub(super) slot_pos: DevBuf,
    pub(super) step: DevBuf,
    /// Per row: the first slot of its lane's ring, and the slots that lane uses.
    pub(super) rows: DevBuf,
    pub(super) rope: DevBuf,
    pub(super) scores: DevBuf,
    /// Post-normed models: the residual after attention, and a sublayer's raw output.
    pub(super) h: DevBuf,
    pub(super) y: DevBuf,
}

impl Bufs {
    pub(super) fn all_mut(&mut self) -> [&mut DevBuf; 14] {
        [
            &mut self.x,
            &mut self.q,
            &mut self.part,
            &mut self.g,
            &mut self.logits,
            &mut self.kc,
            &mut self.vc,
            &mut self.slot_pos,
            &mut self.step,
            &mut self.rows,
            &mut self.rope,
            &mut self.scores,
            &mut self.h,
            &mut self.y,
        ]
    }
}

fn kernel(inner: &Inner, name: &str) -> Result<Kernel> {
    let k = Kernel::create(&inner.program, name)
        .map_err(|e| Error::OpenCl(format!("creating kernel `{name}`: {e}")))?;
    // The work-group size each kernel requires (reqd_work_group_size) must fit what the
    // compiled kernel allows on this device (register pressure can lower it below the
    // device maximum).
    let need = match name {
        "embed" => 1,
        "attn_qkv" | "attention" | "attention_exact" => inner.config.head_dim,
        _ => WG,
    };
    let can = k
        .get_work_group_size(inner.dev.id())
        .map_err(|e| Error::OpenCl(format!("querying kernel `{name}`: {e}")))?;
    if can < need {
        return Err(Error::OpenCl(format!(
            "kernel `{name}` needs work-groups of {need} on device `{}`, which allows {can}",
            inner.device.name
        )));
    }
    Ok(k)
}

impl ClCore {
    /// `lanes` rings of `opts.max_seq_len` slots (the context length when 0) and passes of
    /// up to `opts.max_batch` rows.
    pub(crate) fn new(inner: Arc<Inner>, opts: SessionOptions, lanes: usize) -> Result<Self> {
        let c = inner.config.clone();
        let mut opts = opts;
        if opts.max_seq_len == 0 {
            opts.max_seq_len = c.context_length;
        }
        if opts.max_batch == 0 || lanes == 0 {
            return Err(Error::InvalidArgument {
                what: if lanes == 0 { "sequences" } else { "max_batch" }.into(),
                reason: "must be at least 1".into(),
            });
        }
        if opts.logits_all && lanes > 1 {
            return Err(Error::InvalidArgument {
                what: "logits_all".into(),
                reason: "a core of several sequences returns one row per sequence".into(),
            });
        }
        let (b, cap) = (opts.max_batch, opts.max_seq_len);
        let rows = if opts.logits_all { b } else { lanes.min(b) };
        let half = (c.rope_dims / 2).max(1);
        let tables = 1 + usize::from(inner.inv_freq_swa.is_some());
        let resid = if c.post_norms { b * c.n_embd * 4 } else { 4 };
        let all_slots = lanes.checked_mul(cap).filter(|&s| s <= i32::MAX as usize);
        let kv_bytes = all_slots
            .and_then(|s| s.checked_mul(c.n_layers * c.n_kv_heads * c.head_dim * 2))
            .filter(|&n| n as u64 <= inner.device.max_alloc_bytes)
            .ok_or_else(|| {
                Error::OpenCl(format!(
                    "{lanes} KV ring(s) of {cap} tokens need {} bytes per buffer; device `{}` \
                     allocates at most {}",
                    (lanes as u128)
                        * (cap as u128)
                        * (c.n_layers * c.n_kv_heads * c.head_dim * 2) as u128,
                    inner.device.name,
                    inner.device.max_alloc_bytes
                ))
            })?;
        let guard = if inner.canaries { inner.guard_size } else { 0 };
        let exact = inner.attention == ClAttention::Exact;
        let nb = |name, len| DevBuf::new(&inner.ctx, &inner.queue, name, len, guard);
        let bufs = Bufs {
            x: nb("x", b * c.n_embd * 4)?,
            q: nb("q", b * c.q_dim() * 4)?,
            part: nb("attn", b * c.n_heads * NSPLIT_MAX * (c.head_dim + 2) * 4)?,
            g: nb("ffn_act", b * c.n_ff * 4)?,
            logits: nb("logits", rows * c.vocab_size * 4)?,
            kc: nb("k_cache", kv_bytes)?,
            vc: nb("v_cache", kv_bytes)?,
            slot_pos: nb("slot_pos", lanes * cap * 4)?,
            step: nb("step", b * 3 * 4)?,
            rows: nb("rows", b * 2 * 4)?,
            rope: nb("rope", tables * b * half * 2 * 4)?,
            scores: nb(
                "attn_scores",
                if exact { b * c.n_heads * cap * 4 } else { 4 },
            )?,
            h: nb("resid_h", resid)?,
            y: nb("sublayer_y", resid)?,
        };
        let embed = kernel(&inner, "embed")?;
        let head = kernel(&inner, "head")?;
        let mut layers = Vec::with_capacity(c.n_layers);
        for _ in 0..c.n_layers {
            layers.push([
                kernel(&inner, LAYER_KERNELS[0])?,
                kernel(
                    &inner,
                    if exact {
                        "attention_exact"
                    } else {
                        "attention"
                    },
                )?,
                kernel(&inner, LAYER_KERNELS[2])?,
                kernel(&inner, LAYER_KERNELS[3])?,
                kernel(&inner, LAYER_KERNELS[4])?,
            ]);
        }
        let mut f = ClCore {
            all_rows: opts.logits_all,
            opts,
            lanes,
            taken: vec![false; lanes],
            counters: Counters::default(),
            dev: DeviceCounters::default(),
            bufs,
            embed,
            layers,
            head,
            step_host: vec![0; b * 3],
            rows_host: vec![0; b * 2],
            rope_host: vec![0.0; tables * b * half * 2],
            logits: vec![0.0; rows * c.vocab_size],
            events: Vec::with_capacity(5 * c.n_layers + 2),
            inner,
        };
        f.set_static_args()?;
        Ok(f)
    }

    /// Arguments that never change for this session: buffers, weights, types, layer indices.
    fn set_static_args(&mut self) -> Result<()> {
        let inner = &*self.inner;
        let c = &inner.config;
        let w = &inner.weights;
        let b = &self.bufs;
        // the KV buffers' slots per layer and head: every lane's ring
        let cap = int(self.lanes * self.opts.max_seq_len, "KV slots")?;
        let ring = int(self.opts.max_seq_len, "max_seq_len")?;
        let eps = c.rms_eps;
        let scale = c.attn_scale;
        let post = c.post_norms;
        let half = (c.rope_dims / 2).max(1);
        let dummy = inner.dummy.get();
        let wbuf = |i: usize| w.get(i).buf.get();
        let wty = |i: usize| w.get(i).ty.id() as cl_int;

        let k = &self.embed;
        let n = "embed";
        set(k, n, 0, &wbuf(w.embd))?;
        set(k, n, 1, &wty(w.embd))?;
        set(k, n, 2, &mem(&b.step))?;
        set(k, n, 3, &mem(&b.x))?;
        set(k, n, 5, &c.embd_scale.unwrap_or(1.0))?;
        set(k, n, 6, &cl_int::from(c.embd_scale.is_some()))?;

        for (li, (lw, ks)) in w.layers.iter().zip(&self.layers).enumerate() {
            let layer = li as cl_int;
            let (k, n) = (&ks[K_QKV], LAYER_KERNELS[K_QKV]);
            set(k, n, 0, &mem(&b.x))?;
            set(k, n, 1, &wbuf(lw.attn_norm))?;
            set(k, n, 2, &wbuf(lw.wq))?;
            set(k, n, 3, &wbuf(lw.wk))?;
            set(k, n, 4, &wbuf(lw.wv))?;
            set(k, n, 5, &wty(lw.wq))?;
            set(k, n, 6, &wty(lw.wk))?;
            set(k, n, 7, &wty(lw.wv))?;
            let dummy = inner.dummy.get();
            let [bq, bk, bv] = match lw.bias {
                Some([q, k, v]) => [wbuf(q), wbuf(k), wbuf(v)],
                None => [dummy, dummy, dummy],
            };
            set(k, n, 8, &bq)?;
            set(k, n, 9, &bk)?;
            set(k, n, 10, &bv)?;
            set(k, n, 11, &cl_int::from(lw.bias.is_some()))?;
            set(k, n, 12, &mem(&b.step))?;
            set(k, n, 13, &mem(&b.rope))?;
            set(k, n, 14, &mem(&b.q))?;
            set(k, n, 15, &mem(&b.kc))?;
            set(k, n, 16, &mem(&b.vc))?;
            set(k, n, 17, &mem(&b.slot_pos))?;
            set(k, n, 18, &layer)?;
            set(k, n, 19, &cap)?;
            set(k, n, 21, &eps)?;
            let [qn, kn] = lw
                .qk_norm
                .map_or([dummy, dummy], |[q, k]| [wbuf(q), wbuf(k)]);
            set(k, n, 22, &qn)?;
            set(k, n, 23, &kn)?;
            // a sliding-window layer reads the second rotary table (its own RoPE base)
            let local = c.is_swa(li) && inner.inv_freq_swa.is_some();
            let rope_off = if local {
                self.opts.max_batch * half * 2
            } else {
                0
            };
            set(k, n, 24, &int(rope_off, "rope table")?)?;
            set(k, n, 25, &mem(&b.h))?;
            set(k, n, 26, &mem(&b.y))?;
            // from the second layer on, the input is h + RMSNorm(y) * the previous post_ffw
            let prev = li.checked_sub(1).and_then(|p| w.layers[p].post_norms);
            set(k, n, 27, &prev.map_or(dummy, |[_, f]| wbuf(f)))?;
            set(k, n, 28, &cl_int::from(prev.is_some()))?;
            set(k, n, 29, &mem(&b.x))?;
            let window = if c.is_swa(li) && c.sliding_window > 0 {
                u32::try_from(c.sliding_window).unwrap_or(u32::MAX)
            } else {
                u32::MAX
            };

            let (k, n) = (&ks[K_ATT], LAYER_KERNELS[K_ATT]);
            set(k, n, 0, &mem(&b.q))?;
            set(k, n, 1, &mem(&b.kc))?;
            set(k, n, 2, &mem(&b.vc))?;
            set(k, n, 3, &mem(&b.slot_pos))?;
            set(k, n, 4, &mem(&b.step))?;
            if inner.attention == ClAttention::Exact {
                set(k, n, 5, &mem(&b.scores))?;
                set(k, n, 6, &mem(&b.part))?;
                set(k, n, 7, &layer)?;
                set(k, n, 8, &cap)?;
                set(k, n, 9, &mem(&b.rows))?;
                set(k, n, 10, &scale)?;
                set(k, n, 11, &window)?;
                set(k, n, 12, &ring)?;
            } else {
                set(k, n, 5, &mem(&b.part))?;
                set(k, n, 6, &layer)?;
                set(k, n, 7, &cap)?;
                set(k, n, 8, &mem(&b.rows))?;
                set(k, n, 11, &scale)?;
                set(k, n, 12, &window)?;
            }

            let (k, n) = (&ks[K_OUT], LAYER_KERNELS[K_OUT]);
            set(k, n, 0, &mem(&b.part))?;
            set(k, n, 2, &wbuf(lw.wo))?;
            set(k, n, 3, &wty(lw.wo))?;
            // post-normed: y = Wo . attn (normalised by ffn_gate_up); else x += Wo . attn
            set(k, n, 4, &mem(if post { &b.y } else { &b.x }))?;
            set(k, n, 6, &cl_int::from(!post))?;

            let (k, n) = (&ks[K_FFN], LAYER_KERNELS[K_FFN]);
            set(k, n, 0, &mem(&b.x))?;
            set(k, n, 1, &wbuf(lw.ffn_norm))?;
            set(k, n, 2, &wbuf(lw.w_gate))?;
            set(k, n, 3, &wbuf(lw.w_up))?;
            set(k, n, 4, &wty(lw.w_gate))?;
            set(k, n, 5, &wty(lw.w_up))?;
            set(k, n, 6, &mem(&b.g))?;
            set(k, n, 8, &eps)?;
            set(k, n, 9, &mem(&b.y))?;
            set(k, n, 10, &lw.post_norms.map_or(dummy, |[a, _]| wbuf(a)))?;
            set(k, n, 11, &cl_int::from(lw.post_norms.is_some()))?;
            set(k, n, 12, &mem(&b.h))?;

            let (k, n) = (&ks[K_DOWN], LAYER_KERNELS[K_DOWN]);
            set(k, n, 0, &mem(&b.g))?;
            set(k, n, 1, &wbuf(lw.w_down))?;
            set(k, n, 2, &wty(lw.w_down))?;
            set(k, n, 3, &mem(if post { &b.y } else { &b.x }))?;
            set(k, n, 5, &cl_int::from(!post))?;
        }

        let k = &self.head;
        let n = "head";
        // post-normed: the final residual is h + RMSNorm(y) * the last post_ffw
        let last = w.layers.last().and_then(|l| l.post_norms);
        set(k, n, 0, &mem(if last.is_some() { &b.h } else { &b.x }))?;
        set(k, n, 9, &mem(&b.y))?;
        set(k, n, 10, &last.map_or(dummy, |[_, f]| wbuf(f)))?;
        set(k, n, 11, &cl_int::from(last.is_some()))?;
        set(k, n, 1, &wbuf(w.output_norm))?;
        set(k, n, 2, &wbuf(w.output))?;
        set(k, n, 3, &wty(w.output))?;
        set(k, n, 4, &mem(&b.logits))?;
        set(k, n, 5, &int(c.vocab_size, "vocab")?)?;
        set(k, n, 8, &eps)?;
        Ok(())
    }
}
