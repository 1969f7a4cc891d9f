//! `bench`: llama-bench-style throughput rows (prompt processing `pp`, token generation
//! `tg`, and `tg` over several sequences decoded together) at each thread count, the
//! roofline (read bandwidth from [`super::roofline`] against decode's bytes per token), peak
//! memory against its budget, and optionally the start-up time of `generate`; printed as a
//! Markdown table or JSON under the output header.
//!
//! Timings are measurements, never pass/fail: the rows report what this machine did.

use super::roofline;
use crate::cmd::backend::BackendArgs;
use crate::meta::{self, OutputHeader};
use crate::outputs::{BackendCounters, backend_counters};
use crate::sut::prompts::prompt_tokens;
use anyhow::{Context, Result, bail};
use pocketperf_runtime::backend::DeviceCounters;
use pocketperf_runtime::model::SessionOptions;
use pocketperf_runtime::quant::{self, Isa};
use pocketperf_runtime::residency::LoadOptions;
use pocketperf_runtime::session::Engine;
use std::path::Path;
use std::time::Instant;

/// A bench run, from `bench`'s flags (the model resolved, the thread list parsed).
pub struct BenchSpec<'a> {
    pub model: &'a Path,
    /// Thread counts to measure.
    pub threads: &'a [usize],
    /// Prompt-processing test length (0 to skip).
    pub pp: usize,
    /// Text-generation test length (0 to skip).
    pub tg: usize,
    /// Tokens already in the KV cache when each pp/tg test starts (filled once, untimed,
    /// and rewound to between repetitions; the batched test always starts empty).
    pub depth: usize,
    pub reps: usize,
    /// Sequences decoded together in the batched-decode test (0 to skip it).
    pub batch: usize,
    /// Size of the read-bandwidth probe buffer in MiB (0 to skip the roofline probe).
    pub probe_mib: usize,
    /// Runs of the start-up timing after one warm-up run (0 to skip it).
    pub startup_runs: usize,
    /// Time cold starts too (`startup_runs` of them, at least one; see [`super::cold_start`]).
    pub cold: bool,
    /// How the model is made resident (`--mlock`, `--prefault`).
    pub load: LoadOptions,
    pub json: bool,
    /// Also write the JSON here.
    pub out: Option<&'a Path>,
    pub backend: &'a BackendArgs,
}

#[derive(Debug, Clone, serde::Serialize)]
pub struct BenchRow {
    pub test: String,
    pub threads: usize,
    pub isa: String,
    pub n_tokens: usize,
    /// Sequences decoded at once (1 except in the batched test, whose tokens/s is the
    /// aggregate over all sequences).
    pub batch: usize,
    pub reps: usize,
    pub tokens_per_s_median: f64,
    pub tokens_per_s_min: f64,
    pub tokens_per_s_max: f64,
    pub samples: Vec<f64>,
    pub weight_bytes_per_token: u64,
    /// KV-cache bytes read per token, averaged over the test (decode tests).
    pub kv_bytes_per_token: u64,
    /// (weights + KV) bytes per token × tokens/s (decode tests).
    pub gb_per_s_median: f64,
    /// `cpu` or `opencl`.
    pub backend: String,
    /// Launches, host↔device bytes and kernel time per token over the repetitions (OpenCL).
    pub counters: Option<BackendCounters>,
}

/// The roofline section of the bench output.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Roofline {
    pub llc_bytes: Option<u64>,
    pub model_file_bytes: u64,
    /// Whether the model file is no larger than the last-level cache.
    pub model_fits_llc: Option<bool>,
    /// Read bandwidth over a buffer far larger than the LLC (DRAM).
    pub dram: Vec<roofline::ReadProbe>,
    /// Read bandwidth over a buffer the size of the model file.
    pub model_sized: Vec<roofline::ReadProbe>,
    /// Per thread count: decode (tg) GB/s as a fraction of the DRAM probe's best.
    pub decode_fraction_of_dram: Vec<(usize, f64)>,
}

#[derive(Debug, Clone, serde::Serialize)]
pub struct MemoryReport {
    pub peak_rss_bytes: Option<u64>,
    pub model_file_bytes: u64,
    /// Largest KV mapping of one benchmark session (the batched test's rings summed).
    pub kv_bytes: u64,
    /// model file + KV + 64 MiB.
    pub budget_bytes: u64,
    pub within_budget: Option<bool>,
}

#[derive(Debug, Clone, serde::Serialize)]
pub struct Startup {
    pub command: String,
    pub prompt_tokens: usize,
    pub runs: usize,
    pub ms_median: f64,
    pub ms_min: f64,
    pub ms_max: f64,
    pub samples_ms: Vec<f64>,
}

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    let n = v.len();
    if n == 0 {
        0.0
    } else if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    }
}

/// Deterministic pseudo-random token ids (as llama-bench does, content does not matter for speed).
fn bench_tokens(n: usize, vocab: usize) -> Vec<u32> {
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
fn kv_read_per_token(c: &pocketperf_runtime::model::ModelConfig, start: usize, n: usize) -> u64 {
    if n == 0 {
        return 0;
    }
    let total: u64 = (start..start + n).map(|p| c.kv_bytes_read(p)).sum();
    total / n as u64
}

fn row(
    test: String,
    threads: usize,
    isa: Isa,
    n: usize,
    batch: usize,
    samples: Vec<f64>,
    bytes: (u64, u64),
) -> BenchRow {
    let mut sorted = samples.clone();
    let med = median(&mut sorted);
    let decode = !test.starts_with("pp");
    BenchRow {
        test,
        threads,
        isa: isa.name().to_string(),
        n_tokens: n,
        batch,
        reps: samples.len(),
        tokens_per_s_median: med,
        tokens_per_s_min: sorted.first().copied().unwrap_or(0.0),
        tokens_per_s_max: sorted.last().copied().unwrap_or(0.0),
        samples,
        weight_bytes_per_token: bytes.0,
        kv_bytes_per_token: if decode { bytes.1 } else { 0 },
        gb_per_s_median: if decode {
            med * (bytes.0 + bytes.1) as f64 / 1e9
        } else {
            0.0
        },
        backend: "cpu".into(),
        counters: None,
    }
}

/// A test's name: `pp512`, `tg128`, and on top of a filled KV `pp512 @ d4096` (as
/// llama-bench names its depth rows).
fn test_name(base: String, depth: usize) -> String {
    if depth == 0 {
        base
    } else {
        format!("{base} @ d{depth}")
    }
}

/// Runs the pp/tg (and batched tg) tests at each thread count, the pp/tg tests on top of
/// `depth` cached tokens. Returns the rows and the largest KV mapping used at once.
#[allow(clippy::too_many_arguments)]
pub fn bench_rows(
    path: &Path,
    threads: &[usize],
    pp: usize,
    tg: usize,
    depth: usize,
    batch: usize,
    reps: usize,
    isa: Isa,
    backend: &BackendArgs,
    load: &LoadOptions,
    progress: &dyn Fn(&str),
) -> Result<(Vec<BenchRow>, u64)> {
    let mut rows = Vec::new();
    let mut kv_max = 0u64;
    // The OpenCL backend does not use the CPU threads (measure it once) and has no batched
    // decode.
    let cpu = matches!(
        backend.choice(),
        pocketperf_runtime::backend::BackendChoice::Cpu
    );
    let threads = if cpu {
        threads
    } else {
        &threads[..threads.len().min(1)]
    };
    let batch = if cpu { batch } else { 0 };
    for &t in threads {
        let engine = backend.apply(Engine::load_with(path, t, isa, load)?)?;
        let backend_name = engine.backend().name().to_string();
        // Stamps a row with the backend and the device counters accumulated since `before`.
        let finish =
            |mut r: BenchRow, before: Option<DeviceCounters>, after: Option<DeviceCounters>| {
                r.backend = backend_name.clone();
                r.counters = match (before, after) {
                    (Some(b), Some(a)) => backend_counters(&engine, &a.since(&b)),
                    _ => None,
                };
                r
            };
        let cfg = engine.model.config().clone();
        let vocab = cfg.vocab_size;
        let bpt = engine.model.bytes_per_token();
        let mut s = engine.session(SessionOptions {
            max_seq_len: (depth + pp + tg + 1).max(16),
            max_batch: pp.max(depth).clamp(1, 512),
            ..Default::default()
        })?;
        kv_max = kv_max.max(s.forward_state().map_or(0, |f| f.kv().bytes() as u64));
        // warm-up (page cache, pool, caches)
        s.prefill(&bench_tokens(8.min(pp.max(1)), vocab))?;
        // The context every test starts from: `depth` tokens, prefilled once and rewound to.
        let ctx = bench_tokens(depth, vocab);
        if depth > 0 {
            progress(&format!(
                "filling the KV cache to depth {depth} at {t} threads"
            ));
            s.reset();
            s.prefill(&ctx)?;
        }
        let rewind = |s: &mut pocketperf_runtime::session::Session<'_>| -> Result<()> {
            if depth == 0 {
                s.reset();
            } else {
                s.truncate(depth)?;
            }
            Ok(())
        };
        if pp > 0 {
            progress(&format!("pp{pp} at {t} threads"));
            let toks = bench_tokens(pp, vocab);
            let mut samples = Vec::with_capacity(reps);
            let before = s.device_counters();
            for _ in 0..reps {
                rewind(&mut s)?;
                let t0 = Instant::now();
                s.prefill(&toks)?;
                samples.push(pp as f64 / t0.elapsed().as_secs_f64());
            }
            let r = row(
                test_name(format!("pp{pp}"), depth),
                engine.threads(),
                isa,
                pp,
                1,
                samples,
                (bpt, 0),
            );
            rows.push(finish(r, before, s.device_counters()));
        }
        if tg > 0 {
            progress(&format!("tg{tg} at {t} threads"));
            let toks = bench_tokens(tg, vocab);
            let mut samples = Vec::with_capacity(reps);
            let before = s.device_counters();
            for _ in 0..reps {
                rewind(&mut s)?;
                let t0 = Instant::now();
                for &tok in &toks {
                    s.decode(tok)?;
                }
                samples.push(tg as f64 / t0.elapsed().as_secs_f64());
            }
            let kvb = kv_read_per_token(&cfg, depth, tg);
            let r = row(
                test_name(format!("tg{tg}"), depth),
                engine.threads(),
                isa,
                tg,
                1,
                samples,
                (bpt, kvb),
            );
            rows.push(finish(r, before, s.device_counters()));
        }
        if tg > 0 && batch > 0 {
            progress(&format!("tg{tg} x {batch} sequences at {t} threads"));
            let cap = tg + 1;
            let mut sessions = (0..batch)
                .map(|_| {
                    engine.session(SessionOptions {
                        max_seq_len: cap,
                        max_batch: 1,
                        ..Default::default()
                    })
                })
                .collect::<std::result::Result<Vec<_>, _>>()?;
            kv_max = kv_max.max(
                sessions
                    .iter()
                    .map(|x| x.forward_state().map_or(0, |f| f.kv().bytes() as u64))
                    .sum::<u64>(),
            );
            let mut dec = engine.batch_decoder(batch, cap)?;
            let toks = bench_tokens(tg * batch, vocab);
            let mut samples = Vec::with_capacity(reps);
            for _ in 0..reps {
                for x in sessions.iter_mut() {
                    x.reset();
                }
                let mut refs: Vec<_> = sessions.iter_mut().collect();
                let t0 = Instant::now();
                for step in toks.chunks_exact(batch) {
                    dec.decode(&mut refs, step)?;
                }
                samples.push((tg * batch) as f64 / t0.elapsed().as_secs_f64());
            }
            let kvb = kv_read_per_token(&cfg, 0, tg);
            rows.push(row(
                format!("tg{tg}xb{batch}"),
                engine.threads(),
                isa,
                tg,
                batch,
                samples,
                (bpt / batch as u64, kvb),
            ));
        }
    }
    Ok((rows, kv_max))
}

/// A prompt of exactly `n` tokens (or the nearest above) cut from a fixed text.
fn prompt_of(engine: &Engine, n: usize) -> Result<(String, usize)> {
    const TEXT: &str = "one two three four five six seven eight nine ten eleven twelve thirteen \
fourteen fifteen sixteen seventeen eighteen nineteen twenty";
    let words: Vec<&str> = TEXT.split(' ').collect();
    let mut best = (TEXT.to_string(), usize::MAX);
    for k in 1..=words.len() {
        let t = words[..k].join(" ");
        let c = prompt_tokens(engine, &t, false)?.len();
        if c >= n && c < best.1 {
            best = (t, c);
        }
        if c >= n {
            break;
        }
    }
    Ok(best)
}

/// Times `pocketperf generate --max-tokens 1` from spawn to exit, `runs` times after one
/// warm-up run.
fn startup(model: &Path, threads: usize, runs: usize, engine: &Engine) -> Result<Startup> {
    let (prompt, n) = prompt_of(engine, 16)?;
    let exe = std::env::current_exe().context("cannot locate the pocketperf executable")?;
    let t = threads.to_string();
    let m = model.display().to_string();
    let args = [
        "generate",
        "--model",
        m.as_str(),
        "--threads",
        t.as_str(),
        "--max-tokens",
        "1",
        "--ctx",
        "64",
        "--prompt",
        prompt.as_str(),
    ];
    let mut samples = Vec::with_capacity(runs);
    for i in 0..=runs {
        let t0 = Instant::now();
        let out = std::process::Command::new(&exe)
            .args(args)
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::piped())
            .output()
            .with_context(|| format!("{}: cannot start", exe.display()))?;
        let ms = t0.elapsed().as_secs_f64() * 1e3;
        if !out.status.success() {
            bail!(
                "start-up run failed: {}",
                String::from_utf8_lossy(&out.stderr).trim()
            );
        }
        if i > 0 {
            samples.push(ms);
        }
    }
    let mut sorted = samples.clone();
    let med = median(&mut sorted);
    Ok(Startup {
        command: format!("pocketperf {}", args.join(" ")),
        prompt_tokens: n,
        runs,
        ms_median: med,
        ms_min: sorted.first().copied().unwrap_or(0.0),
        ms_max: sorted.last().copied().unwrap_or(0.0),
        samples_ms: samples,
    })
}

/// Measures and prints one bench run.
pub fn bench(a: &BenchSpec) -> Result<()> {
    let path = a.model;
    let threads = a.threads;
    let isa = quant::isa_from_env()?;
    let bar = crate::progress::spinner("bench");
    let progress = |m: &str| bar.set_message(m.to_string());
    let (rows, kv_bytes) = bench_rows(
        path, threads, a.pp, a.tg, a.depth, a.batch, a.reps, isa, a.backend, &a.load, &progress,
    )?;
    let file_bytes = std::fs::metadata(path)
        .with_context(|| format!("{}: cannot stat", path.display()))?
        .len();
    let peak = roofline::peak_rss_bytes();
    let budget = file_bytes + kv_bytes + (64 << 20);
    let memory = MemoryReport {
        peak_rss_bytes: peak,
        model_file_bytes: file_bytes,
        kv_bytes,
        budget_bytes: budget,
        within_budget: peak.map(|p| p <= budget),
    };
    let roof = if a.probe_mib > 0 {
        progress("read-bandwidth probe");
        let big = roofline::probe_buffer(a.probe_mib << 20);
        let dram: Vec<_> = threads
            .iter()
            .map(|&t| roofline::read_bandwidth(&big, t, 5))
            .collect();
        drop(big);
        let small = roofline::probe_buffer(file_bytes as usize);
        let model_sized: Vec<_> = threads
            .iter()
            .map(|&t| roofline::read_bandwidth(&small, t, 10))
            .collect();
        let llc = roofline::llc_bytes();
        let frac = dram
            .iter()
            .filter_map(|p| {
                rows.iter()
                    .find(|r| r.threads == p.threads && r.test.starts_with("tg") && r.batch == 1)
                    .map(|r| (p.threads, r.gb_per_s_median / p.gb_per_s_best.max(1e-9)))
            })
            .collect();
        Some(Roofline {
            llc_bytes: llc,
            model_file_bytes: file_bytes,
            model_fits_llc: llc.map(|l| file_bytes <= l),
            dram,
            model_sized,
            decode_fraction_of_dram: frac,
        })
    } else {
        None
    };
    let start = if a.startup_runs > 0 {
        progress("start-up");
        let engine = Engine::load(path, threads.first().copied().unwrap_or(1), isa)?;
        Some(startup(
            path,
            threads.last().copied().unwrap_or(1),
            a.startup_runs,
            &engine,
        )?)
    } else {
        None
    };
    let cold = if a.cold {
        progress("cold start");
        Some(super::cold_start::cold_bench(
            path,
            threads.last().copied().unwrap_or(1),
            a.startup_runs.max(1),
            &a.load,
        )?)
    } else {
        None
    };
    bar.finish_and_clear();
    let header = OutputHeader::new(
        2,
        path,
        &meta::model_sha256(path),
        serde_json::json!({
            "threads": threads, "pp": a.pp, "tg": a.tg, "batch": a.batch, "reps": a.reps,
            "probe_mib": a.probe_mib, "startup_runs": a.startup_runs, "cold": a.cold,
            "mlock": a.load.mlock, "prefault": a.load.prefault, "isa": isa.name(),
            "vnni": quant::has_vnni(), "vbmi": quant::has_vbmi(), "backend": &a.backend,
        }),
    );
    let doc = serde_json::json!({
        "header": header, "rows": rows, "roofline": roof, "memory": memory, "startup": start,
        "cold_start": cold,
    });
    if let Some(p) = a.out {
        std::fs::write(p, serde_json::to_string_pretty(&doc)?)
            .with_context(|| format!("{}: cannot write", p.display()))?;
    }
    if a.json {
        println!("{}", serde_json::to_string_pretty(&doc)?);
        return Ok(());
    }
    println!(
        "| test | backend | threads | isa | t/s median | min | max | reps | GB/s (weights+KV) | launches/token | H2D B/token | D2H B/token | kernel ms/token |"
    );
    println!("|---|---|---|---|---|---|---|---|---|---|---|---|---|");
    for r in &rows {
        let per = r.counters.as_ref().and_then(|c| c.decode.or(c.prefill));
        let cols = match per {
            Some(p) => format!(
                "{:.1} | {:.0} | {:.0} | {}",
                p.launches,
                p.h2d_bytes,
                p.d2h_bytes,
                p.kernel_ms.map_or("-".into(), |k| format!("{k:.3}"))
            ),
            None => "- | - | - | -".into(),
        };
        println!(
            "| {} | {} | {} | {} | {:.2} | {:.2} | {:.2} | {} | {} | {cols} |",
            r.test,
            r.backend,
            r.threads,
            r.isa,
            r.tokens_per_s_median,
            r.tokens_per_s_min,
            r.tokens_per_s_max,
            r.reps,
            if r.gb_per_s_median > 0.0 {
                format!("{:.2}", r.gb_per_s_median)
            } else {
                "-".into()
            }
        );
    }
    for r in rows.iter().filter(|r| r.batch > 1) {
        if let Some(single) = rows
            .iter()
            .find(|x| x.threads == r.threads && x.batch == 1 && x.test.starts_with("tg"))
        {
            println!(
                "batched decode at {} threads: {:.2}x single-sequence decode ({} sequences)",
                r.threads,
                r.tokens_per_s_median / single.tokens_per_s_median.max(1e-9),
                r.batch
            );
        }
    }
    if let Some(roof) = &roof {
        println!(
            "bytes per decoded token: {:.1} MB of weights + KV; model file {:.1} MB; LLC {}",
            rows.first()
                .map_or(0.0, |r| r.weight_bytes_per_token as f64 / 1e6),
            roof.model_file_bytes as f64 / 1e6,
            roof.llc_bytes
                .map_or("unknown".into(), |l| format!("{:.1} MB", l as f64 / 1e6))
        );
        for (p, q) in roof.dram.iter().zip(&roof.model_sized) {
            let frac = roof
                .decode_fraction_of_dram
                .iter()
                .find(|(t, _)| *t == p.threads)
                .map_or("-".into(), |(_, f)| format!("{:.0}%", f * 100.0));
            println!(
                "read bandwidth at {} threads: {:.1} GB/s over {} MiB (DRAM), {:.1} GB/s over a model-sized buffer; decode at {frac} of DRAM",
                p.threads,
                p.gb_per_s_best,
                p.buffer_bytes >> 20,
                q.gb_per_s_best
            );
        }
    }
    if let Some(p) = memory.peak_rss_bytes {
        println!(
            "peak RSS {:.1} MiB; budget (model + KV + 64 MiB) {:.1} MiB",
            p as f64 / 1048576.0,
            memory.budget_bytes as f64 / 1048576.0
        );
    }
    if let Some(s) = &start {
        println!(
            "start-up to first token ({} prompt tokens): median {:.1} ms (min {:.1}, max {:.1}, {} runs)",
            s.prompt_tokens, s.ms_median, s.ms_min, s.ms_max, s.runs
        );
    }
    if let Some(c) = &cold {
        super::cold_start::print(c);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn depth_rows_are_named_as_llama_bench_names_them() {
        assert_eq!(test_name("tg128".into(), 0), "tg128");
        assert_eq!(test_name("pp512".into(), 4096), "pp512 @ d4096");
    }
}
