//! The OpenCL backend (PoCL in CI) on the catalog's Q4_K_M model (`qwen2.5-coder-0.5b`: Q5_0,
//! Q8_0, Q4_K and Q6_K matrices, Q5_0 token embeddings) against the CPU backend's scalar
//! reference tier: last-position logits of every reference prompt, perplexity over the first
//! chunks of the shared text through the runtime's own route, launches per decoded token, and
//! zero-copy import of an aligned copy. One engine per backend and model for the binary.

mod common;
use common::{ids, rms, top2};

use pocketperf_runtime::GgmlType;
use pocketperf_runtime::backend::BackendChoice;
use pocketperf_runtime::backend::opencl::{ClEngine, ClOptions, WeightImport};
use pocketperf_runtime::gguf::{GgufFile, write_aligned};
use pocketperf_runtime::model::{Model, SessionOptions};
use pocketperf_runtime::perplexity;
use pocketperf_runtime::quant::{self, Isa};
use pocketperf_runtime::session::Engine;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Instant;

const QWEN: &str = "qwen2.5-coder-0.5b";
const GEMMA: &str = "gemma3-270m";

/// The CPU engine on its scalar tier and the OpenCL engine of one model.
struct Pair {
    cpu: Engine,
    cl: Engine,
}

fn qwen() -> &'static Pair {
    static P: OnceLock<Pair> = OnceLock::new();
    P.get_or_init(|| pair(QWEN))
}

fn gemma() -> &'static Pair {
    static P: OnceLock<Pair> = OnceLock::new();
    P.get_or_init(|| pair(GEMMA))
}

fn pair(name: &str) -> Pair {
    let path = common::model_path_for(name);
    let cpu = Engine::load(&path, 2, Isa::Scalar).expect("load model");
    let cl = Engine::load(&path, 2, Isa::Scalar)
        .expect("load model")
        .with_backend(&BackendChoice::OpenCl(ClOptions::default()))
        .expect("OpenCL on PoCL");
    Pair { cpu, cl }
}

/// Serialises the tests' use of the device (PoCL has two cores to share).
fn device_lock() -> std::sync::MutexGuard<'static, ()> {
    static L: Mutex<()> = Mutex::new(());
    L.lock().unwrap_or_else(|e| e.into_inner())
}

fn opts(ctx: usize) -> SessionOptions {
    SessionOptions {
        max_seq_len: ctx,
        max_batch: ctx,
        ..Default::default()
    }
}

/// Last-position logits of every reference prompt: the OpenCL top-1 is the CPU scalar tier's;
/// returns the RMS logit difference of each prompt.
fn last_position_logits(name: &str, p: &Pair) -> Vec<(String, f64)> {
    let mut out = Vec::new();
    for c in common::cases_for(name) {
        let case = c["name"].as_str().unwrap().to_string();
        let prompt = ids(&c["prompt_ids"]);
        let want = p
            .cpu
            .session(opts(64))
            .unwrap()
            .prefill(&prompt)
            .unwrap()
            .to_vec();
        let got =
            p.cl.session(opts(64))
                .unwrap()
                .prefill(&prompt)
                .unwrap()
                .to_vec();
        assert!(
            got.iter().all(|v| v.is_finite()),
            "{case}: non-finite logits"
        );
        let (top, _) = top2(&got);
        let (wt, margin) = top2(&want);
        let r = rms(&got, &want);
        let differ = got
            .iter()
            .zip(&want)
            .filter(|(a, b)| a.to_bits() != b.to_bits());
        eprintln!(
            "{name} {case}: rms vs cpu scalar {r:.4} ({} of {} logits differ in bits), top-1 \
             {top} (cpu {wt}, margin {margin:.2})",
            differ.count(),
            got.len()
        );
        assert_eq!(
            top, wt,
            "{name} {case}: top-1 differs from the CPU scalar tier"
        );
        out.push((case, r));
    }
    out
}

/// Perplexity over the first `chunks` chunks of `ctx` tokens of the shared text on both
/// backends, through `perplexity::perplexity` (llama-perplexity's protocol: each chunk from an
/// empty cache, its second half scored). Against the CPU's scalar tier, the one the kernels
/// follow step by step (the SIMD tiers sum in other orders and differ from it by more than
/// 0.5% over so few tokens); it needs tens of seconds per hundred tokens on two cores, hence
/// the short text.
fn perplexity_pair(name: &str, p: &Pair, chunks: usize, ctx: usize) -> (f64, f64) {
    let path = common::reference_dir_for("smollm2-135m").join("ppl_text.txt");
    let mut text = std::fs::read_to_string(&path).unwrap();
    if text.ends_with('\n') {
        text.pop();
    }
    let tokens = perplexity::text_tokens(&p.cpu, &text).unwrap();
    let tokens = &tokens[..chunks * ctx];
    let t = Instant::now();
    let a = perplexity::perplexity(&p.cpu, tokens, ctx).unwrap();
    let t_cpu = t.elapsed().as_secs_f64();
    let t = Instant::now();
    let b = perplexity::perplexity(&p.cl, tokens, ctx).unwrap();
    eprintln!(
        "cpu scalar {t_cpu:.1} s, opencl {:.1} s",
        t.elapsed().as_secs_f64()
    );
    assert_eq!(
        (a.chunks, b.chunks, b.scored),
        (chunks, chunks, chunks * (ctx / 2 - 1))
    );
    eprintln!(
        "{name}: perplexity over {chunks} chunks: OpenCL {:.4}, CPU {:.4} ({:+.4}%)",
        b.ppl,
        a.ppl,
        100.0 * (b.ppl / a.ppl - 1.0)
    );
    (a.ppl, b.ppl)
}

#[test]
fn qwen2_top1_equals_the_cpu_scalar_tier_on_the_reference_prompts() {
    let _g = device_lock();
    let t = Instant::now();
    let r = last_position_logits(QWEN, qwen());
    assert_eq!(r.len(), 4);
    // every block dot is exact in integers and every f32 step is the scalar tier's, in its
    // order: the logits are the CPU's bit for bit
    for (case, rms) in r {
        assert_eq!(rms, 0.0, "{case}: logits differ from the CPU scalar tier");
    }
    eprintln!("{:.1} s", t.elapsed().as_secs_f64());
}

#[test]
fn qwen2_perplexity_is_within_half_a_percent_of_the_cpu() {
    let _g = device_lock();
    let t = Instant::now();
    let (cpu, cl) = perplexity_pair(QWEN, qwen(), 2, 28);
    assert!(
        (cl / cpu - 1.0).abs() < 0.005,
        "OpenCL {cl:.4} vs CPU {cpu:.4}"
    );
    eprintln!("{:.1} s", t.elapsed().as_secs_f64());
}

/// Five launches per layer and two more per decoded token, with K-quant matrices and Gemma's
/// post-norms too; the host writes the token's step entry (id, position, slot: 12 bytes), its
/// row-table entry (its ring's first slot and the slots in use: 8 bytes) and its rotary rows
/// (two tables for Gemma: global and sliding-window layers) and reads the logits back.
fn launches_per_token(p: &Pair, tables: usize) {
    let c = p.cl.model.config();
    let mut s = p.cl.session(opts(16)).unwrap();
    s.prefill(&[785, 6722, 315]).unwrap();
    let before = s.device_counters().unwrap();
    s.decode(9625).unwrap();
    s.decode(374).unwrap();
    let d = s.device_counters().unwrap().since(&before).decode;
    let per = d.per_token().unwrap();
    assert_eq!(d.tokens, 2);
    assert_eq!(per.launches, (5 * c.n_layers + 2) as f64);
    assert_eq!(
        per.h2d_bytes,
        (12 + 8 + tables * c.rope_dims / 2 * 2 * 4) as f64
    );
    assert_eq!(per.d2h_bytes, (c.vocab_size * 4) as f64);
}

#[test]
fn qwen2_decoded_token_costs_five_launches_per_layer_plus_two() {
    let _g = device_lock();
    launches_per_token(qwen(), 1);
}

#[test]
fn gemma3_decoded_token_costs_five_launches_per_layer_plus_two() {
    let _g = device_lock();
    launches_per_token(gemma(), 2);
}

/// The page-aligned copy of the file is imported without a copy and computes the same bits.
#[test]
fn qwen2_aligned_copy_is_imported_zero_copy_with_identical_logits() {
    let _g = device_lock();
    let p = qwen();
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("aligned.gguf");
    write_aligned(p.cpu.model.gguf(), &out, 4096).unwrap();
    let aligned = Model::from_gguf(Arc::new(GgufFile::open(&out).unwrap())).unwrap();
    let zc = ClEngine::new(&aligned, &ClOptions::default()).unwrap();
    assert_eq!(zc.weights_import(), WeightImport::ZeroCopy);
    assert_eq!(zc.summary().uploaded_bytes, 0);
    let prompt = [785u32, 6722, 315, 9625, 374];
    let a =
        p.cl.session(opts(8))
            .unwrap()
            .prefill(&prompt)
            .unwrap()
            .to_vec();
    let b = zc
        .session(opts(8))
        .unwrap()
        .forward(&prompt)
        .unwrap()
        .to_vec();
    assert_eq!(a, b);
}

/// Gemma 3 (per-head Q/K norms, post-norms, scaled embeddings, GeGLU, sliding-window layers
/// with their own RoPE base, tied output): the CPU scalar tier's top-1 on every reference
/// prompt, logits close to it (the device's tanh in GELU rounds its own way).
#[test]
fn gemma3_top1_equals_the_cpu_scalar_tier_on_the_reference_prompts() {
    let _g = device_lock();
    let t = Instant::now();
    let r = last_position_logits(GEMMA, gemma());
    assert_eq!(r.len(), 4);
    // GELU with the CPU's formula and exponential, the prompts within the 512-token window
    // (past it the device keeps the local layers in the full ring, the CPU in a window-sized
    // one, and their softmax sums run in another order): the logits are the CPU's bit for bit
    for (case, rms) in r {
        assert_eq!(rms, 0.0, "{case}: logits differ from the CPU scalar tier");
    }
    eprintln!("{:.1} s", t.elapsed().as_secs_f64());
}

#[test]
fn gemma3_perplexity_is_within_half_a_percent_of_the_cpu() {
    let _g = device_lock();
    let t = Instant::now();
    let (cpu, cl) = perplexity_pair(GEMMA, gemma(), 3, 64);
    assert!(
        (cl / cpu - 1.0).abs() < 0.005,
        "OpenCL {cl:.4} vs CPU {cpu:.4}"
    );
    eprintln!("{:.1} s", t.elapsed().as_secs_f64());
}

/// Bytes of the copies the best tier makes of Qwen2.5's layer and output matrices, from the
/// file's tensor table: for Q5_0, 88 bytes per group of four blocks (a last partial group
/// whole), on the AVX-512 VBMI tier and on the AVX2 tier (rows of up to 512 blocks there),
/// except rows with units on the VBMI tier (Qwen2.5's 896-wide: 632 bytes, two units);
/// on the VBMI tier also Q4_1, the rows as they are (20 bytes per block), and Q8_0, rows with
/// units in block lanes (136 bytes per group of four blocks, a last partial group whole) and
/// others as they are (34 bytes per block), on the AVX2 tier as they are; none on any other
/// tier.
fn expected_copies(g: &GgufFile, isa: Isa) -> usize {
    let vbmi = isa == Isa::Avx512 && quant::has_vbmi();
    if !vbmi && isa != Isa::Avx2 {
        return 0;
    }
    g.tensors()
        .iter()
        .filter(|t| t.dims.len() == 2)
        .filter(|t| t.name.starts_with("blk.") || t.name == "output.weight")
        .map(|t| {
            let (cols, rows) = (t.dims[0] as usize, t.dims[1] as usize);
            match t.ty {
                GgmlType::Q5_0 if vbmi && quant::packed::has_units((cols / 32).div_ceil(4)) => {
                    // Units of sixteen blocks in 352 bytes, a last one of k groups in
                    // 72 k + 64 (the AVX-512 tier's block lanes).
                    let ng = (cols / 32).div_ceil(4);
                    let nu = ng.div_ceil(4);
                    rows * ((nu - 1) * 352 + 72 * (ng - 4 * (nu - 1)) + 64)
                }
                GgmlType::Q5_0 if vbmi || cols / 32 <= 512 => rows * (cols / 32).div_ceil(4) * 88,
                GgmlType::Q4_1 if vbmi || cols / 32 <= 512 => rows * cols / 32 * 20,
                GgmlType::Q8_0 if vbmi && quant::packed::has_units((cols / 32).div_ceil(4)) => {
                    rows * (cols / 32).div_ceil(4) * 136
                }
                GgmlType::Q8_0 => rows * cols / 32 * 34,
                _ => 0,
            }
        })
        .sum()
}

/// Repacking waits for the first CPU executor, and an OpenCL engine never makes the copies:
/// after load nothing is copied; a CPU session makes exactly the copies the file's Q5_0 and
/// Q8_0 matrices (and Q4_1, which this file has none of) call for on this tier (none where
/// the tier makes none: the test then checks that nothing is copied), and the bytes
/// per token read the same before and after; an OpenCL engine on the same tier has made none
/// after its session ran a prompt.
#[test]
fn qwen2_copies_are_made_for_the_first_cpu_session_and_never_for_opencl() {
    let path = common::model_path_for(QWEN);
    let isa = quant::detect_best();
    let cpu = Engine::load(&path, 1, isa).expect("load model");
    let want = expected_copies(cpu.model.gguf(), isa);
    assert_eq!(cpu.model.repacked_bytes(), 0, "nothing is copied at load");
    let before = cpu.model.bytes_per_token();
    {
        let mut s = cpu.session(opts(32)).expect("CPU session");
        s.prefill(&[1, 2, 3]).expect("prefill");
    }
    assert_eq!(
        cpu.model.repacked_bytes(),
        want,
        "copies after the first CPU session"
    );
    assert_eq!(
        cpu.model.bytes_per_token(),
        before,
        "bytes per token before and after"
    );
    let _ = cpu.session(opts(32)).expect("second CPU session");
    assert_eq!(cpu.model.repacked_bytes(), want, "the copies are made once");

    let _dev = device_lock();
    let cl = Engine::load(&path, 1, isa)
        .expect("load model")
        .with_backend(&BackendChoice::OpenCl(ClOptions::default()))
        .expect("OpenCL on PoCL");
    let mut s = cl.session(opts(32)).expect("OpenCL session");
    s.prefill(&[1, 2, 3]).expect("prefill");
    drop(s);
    assert_eq!(
        cl.model.repacked_bytes(),
        0,
        "an OpenCL engine makes no copies"
    );
    let file: usize = cl
        .model
        .gguf()
        .tensors()
        .iter()
        .filter(|t| t.name.starts_with("blk.") || t.name == "output.weight")
        .map(|t| t.n_bytes as usize)
        .sum();
    assert!(
        cl.model.bytes_per_token() as usize >= file,
        "an OpenCL engine counts the file's bytes"
    );
}
