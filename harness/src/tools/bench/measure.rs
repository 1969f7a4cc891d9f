//! The timed tests of one model: at each thread count, every depth of the sweep filled once
//! (untimed) and every pp, tg and batched tg test run on top of it, `reps` times each,
//! rewinding the KV cache to the depth between repetitions. Unless `warmup` is off, each test
//! first runs once untimed, as llama-bench's warm-up does: the whole prompt of a pp test (so
//! the first timed prompt finds the KV pages and the workspace of that many rows already
//! touched), one token of a tg or batched tg test.

use super::model_info::ModelColumns;
use super::rows::{BenchRow, Measured, TestKind};
use super::sweep::Sweep;
use crate::cmd::backend::BackendArgs;
use crate::outputs::backend_counters;
use anyhow::Result;
use pocketperf_runtime::backend::{BackendChoice, DeviceCounters};
use pocketperf_runtime::kv::KvType;
use pocketperf_runtime::model::{ModelConfig, SessionOptions};
use pocketperf_runtime::quant::Isa;
use pocketperf_runtime::residency::LoadOptions;
use pocketperf_runtime::session::{Engine, Session};
use std::path::Path;
use std::time::Instant;

/// How the tests of one model run.
pub struct MeasureSpec<'a> {
    pub path: &'a Path,
    pub model: &'a ModelColumns,
    pub threads: &'a [usize],
    pub sweep: &'a Sweep,
    pub reps: usize,
    /// One untimed run of each test before its repetitions.
    pub warmup: bool,
    pub isa: Isa,
    pub backend: &'a BackendArgs,
    pub load: &'a LoadOptions,
    pub kv_type: KvType,
}

/// Deterministic pseudo-random token ids (as llama-bench does, content does not matter for speed).
pub fn bench_tokens(n: usize, vocab: usize) -> Vec<u32> {
    let mut x = 0x2545_F491_4F6C_DD1Du64;
    (0..n)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            (x % vocab as u64) as u32
        })
        .collect()
}

/// KV bytes decode reads per token, averaged over `n` tokens appended to `start` cached ones
/// (sliding-window layers read at most their window).
fn kv_read_per_token(c: &ModelConfig, ty: KvType, start: usize, n: usize) -> u64 {
    if n == 0 {
        return 0;
    }
    let total: u64 = (start..start + n).map(|p| c.kv_bytes_read(p, ty)).sum();
    total / n as u64
}

/// Brings a session back to the `depth` tokens `ctx` the tests start from: a rewind where the
/// cache can be cut back, else (a sliding-window layer's ring has wrapped past the depth, as
/// on Gemma 3 beyond its window) a fresh prefill of `ctx`, untimed either way.
fn rewind(s: &mut Session<'_>, depth: usize, ctx: &[u32]) -> Result<()> {
    if depth == 0 {
        s.reset();
    } else if s.truncate(depth).is_err() {
        s.reset();
        s.prefill(ctx)?;
    }
    Ok(())
}

/// The KV a session maps: the full-context cache and, on models with sliding-window layers
/// (Gemma 3), their own window-sized ring.
fn kv_bytes(f: &pocketperf_runtime::model::Forward) -> u64 {
    (f.kv().bytes() + f.kv_swa().map_or(0, |k| k.bytes())) as u64
}

/// The rows of one model, ordered thread count → pp tests → tg tests → batched tests (each
/// in the order of its list, then by depth), and the largest KV mapping used at once.
pub fn model_rows(m: &MeasureSpec, progress: &dyn Fn(&str)) -> Result<(Vec<BenchRow>, u64)> {
    let mut rows = Vec::new();
    let mut kv_max = 0u64;
    // The OpenCL backend does not use the CPU threads (measure it once).
    let cpu = matches!(m.backend.choice(), BackendChoice::Cpu);
    let threads = if cpu {
        m.threads
    } else {
        &m.threads[..m.threads.len().min(1)]
    };
    let pps = m.sweep.pp_tests();
    let tgs = m.sweep.tg_tests();
    let batches = m.sweep.batch_tests();
    let depths = &m.sweep.depth;
    let cap = m.sweep.max_tokens() + 1;
    for &t in threads {
        let engine = m
            .backend
            .apply(Engine::load_with(m.path, t, m.isa, m.load)?)?;
        let backend_name = engine.backend().name().to_string();
        let cfg = engine.model.config().clone();
        let vocab = cfg.vocab_size;
        let bpt = engine.model.bytes_per_token();
        let deepest = depths.iter().copied().max().unwrap_or(0);
        let prefill_batch = pps.iter().copied().max().unwrap_or(0).max(deepest);
        let mut s = engine.session(SessionOptions {
            max_seq_len: cap.max(16),
            max_batch: prefill_batch.clamp(1, 512),
            kv_type: m.kv_type,
            ..Default::default()
        })?;
        kv_max = kv_max.max(s.forward_state().map_or(0, kv_bytes));
        // warm-up (page cache, pool, caches)
        s.prefill(&bench_tokens(8.min(prefill_batch.max(1)), vocab))?;
        // Rows keyed by their place in the output order.
        let mut keyed: Vec<((TestKind, usize, usize), BenchRow)> = Vec::new();
        let mut push = |key: (TestKind, usize, usize),
                        meas: Measured,
                        before: Option<DeviceCounters>,
                        after: Option<DeviceCounters>| {
            let mut r = BenchRow::new(m.model, m.isa.name(), &backend_name, engine.threads(), meas);
            r.counters = match (before, after) {
                (Some(b), Some(a)) => backend_counters(&engine, &a.since(&b)),
                _ => None,
            };
            keyed.push((key, r));
        };
        for (di, &depth) in depths.iter().enumerate() {
            // The context every test at this depth starts from, prefilled once, rewound to.
            let ctx = bench_tokens(depth, vocab);
            if depth > 0 && !(pps.is_empty() && tgs.is_empty()) {
                progress(&format!(
                    "{}: filling the KV cache to depth {depth} at {t} threads",
                    m.model.model
                ));
                s.reset();
                s.prefill(&ctx)?;
            }
            for (i, &pp) in pps.iter().enumerate() {
                progress(&format!(
                    "{}: pp{pp} depth {depth} at {t} threads",
                    m.model.model
                ));
                let toks = bench_tokens(pp, vocab);
                if m.warmup {
                    rewind(&mut s, depth, &ctx)?;
                    s.prefill(&toks)?;
                }
                let mut samples = Vec::with_capacity(m.reps);
                let before = s.device_counters();
                for _ in 0..m.reps {
                    rewind(&mut s, depth, &ctx)?;
                    let t0 = Instant::now();
                    s.prefill(&toks)?;
                    samples.push(pp as f64 / t0.elapsed().as_secs_f64());
                }
                let meas = Measured {
                    kind: TestKind::Prompt,
                    n: pp,
                    depth,
                    samples,
                    bytes: (bpt, 0),
                };
                push((TestKind::Prompt, i, di), meas, before, s.device_counters());
            }
            for (i, &tg) in tgs.iter().enumerate() {
                progress(&format!(
                    "{}: tg{tg} depth {depth} at {t} threads",
                    m.model.model
                ));
                let toks = bench_tokens(tg, vocab);
                if let Some(&tok) = toks.first().filter(|_| m.warmup) {
                    rewind(&mut s, depth, &ctx)?;
                    s.decode(tok)?;
                }
                let mut samples = Vec::with_capacity(m.reps);
                let before = s.device_counters();
                for _ in 0..m.reps {
                    rewind(&mut s, depth, &ctx)?;
                    let t0 = Instant::now();
                    for &tok in &toks {
                        s.decode(tok)?;
                    }
                    samples.push(tg as f64 / t0.elapsed().as_secs_f64());
                }
                let meas = Measured {
                    kind: TestKind::Generate,
                    n: tg,
                    depth,
                    samples,
                    bytes: (bpt, kv_read_per_token(&cfg, m.kv_type, depth, tg)),
                };
                push(
                    (TestKind::Generate, i, di),
                    meas,
                    before,
                    s.device_counters(),
                );
            }
            for &b in &batches {
                // the depth is prefilled a session at a time, in chunks of up to 512 tokens:
                // on OpenCL those run in the batch's device buffers
                let chunk = depth.clamp(1, 512);
                let rows = if cpu { b } else { b.max(chunk) };
                let mut dec = engine.batch_decoder_rows(b, rows, cap)?;
                let mut sessions = (0..b)
                    .map(|_| {
                        dec.session(SessionOptions {
                            max_seq_len: cap,
                            max_batch: chunk,
                            kv_type: m.kv_type,
                            ..Default::default()
                        })
                    })
                    .collect::<std::result::Result<Vec<_>, _>>()?;
                kv_max = kv_max.max(
                    sessions
                        .iter()
                        .map(|x| x.forward_state().map_or(0, kv_bytes))
                        .sum::<u64>(),
                );
                if depth > 0 {
                    progress(&format!(
                        "{}: filling {b} KV caches to depth {depth} at {t} threads",
                        m.model.model
                    ));
                    for x in sessions.iter_mut() {
                        x.prefill(&ctx)?;
                    }
                }
                for (i, &tg) in tgs.iter().enumerate() {
                    progress(&format!(
                        "{}: tg{tg} x {b} sequences depth {depth} at {t} threads",
                        m.model.model
                    ));
                    let toks = bench_tokens(tg * b, vocab);
                    if let Some(step) = toks.chunks_exact(b).next().filter(|_| m.warmup) {
                        for x in sessions.iter_mut() {
                            rewind(x, depth, &ctx)?;
                        }
                        let mut refs: Vec<_> = sessions.iter_mut().collect();
                        dec.decode(&mut refs, step)?;
                    }
                    let mut samples = Vec::with_capacity(m.reps);
                    for _ in 0..m.reps {
                        for x in sessions.iter_mut() {
                            rewind(x, depth, &ctx)?;
                        }
                        let mut refs: Vec<_> = sessions.iter_mut().collect();
                        let t0 = Instant::now();
                        for step in toks.chunks_exact(b) {
                            dec.decode(&mut refs, step)?;
                        }
                        samples.push((tg * b) as f64 / t0.elapsed().as_secs_f64());
                    }
                    let meas = Measured {
                        kind: TestKind::Batched(b),
                        n: tg,
                        depth,
                        samples,
                        bytes: (
                            bpt / b as u64,
                            kv_read_per_token(&cfg, m.kv_type, depth, tg),
                        ),
                    };
                    push((TestKind::Batched(b), i, di), meas, None, None);
                }
            }
        }
        keyed.sort_by_key(|(k, _)| *k);
        rows.extend(keyed.into_iter().map(|(_, r)| r));
    }
    Ok((rows, kv_max))
}
