//! Batched decode on the OpenCL backend (PoCL in CI): several sequences in one device batch,
//! each pass carrying a prompt chunk of some beside one decode token of the others, every
//! weight read once per pass. Each sequence's logits must equal, bit for bit, what the same
//! tokens give in an OpenCL session of its own (exact attention: rows are independent but
//! for attention, which runs over the row's own ring). On the reference model (llama) through
//! the engine's session API, and on a tiny random Gemma 3 whose sliding window (4 positions)
//! is far shorter than the sequences, with buffer canaries checked after every launch.

mod common;
mod synth;

use pocketperf_runtime::backend::BackendChoice;
use pocketperf_runtime::backend::opencl::{ClAttention, ClEngine, ClOptions};
use pocketperf_runtime::gguf::GgufFile;
use pocketperf_runtime::kv::KvPolicy;
use pocketperf_runtime::model::{Model, SessionOptions};
use pocketperf_runtime::quant::Isa;
use pocketperf_runtime::session::{Engine, argmax};
use std::sync::{Arc, Mutex};
use synth::{TinyGemma, tiny_gemma3};

/// PoCL builds and runs one engine at a time here.
fn lock() -> std::sync::MutexGuard<'static, ()> {
    static L: Mutex<()> = Mutex::new(());
    L.lock().unwrap_or_else(|e| e.into_inner())
}

/// Three prompts of different lengths over the first `vocab` ids (deterministic).
fn prompts(vocab: u32) -> Vec<Vec<u32>> {
    [11usize, 4, 7]
        .iter()
        .enumerate()
        .map(|(p, &n)| {
            (0..n)
                .map(|i| ((p * 7919 + i * 104_729 + 17) as u32) % vocab)
                .collect()
        })
        .collect()
}

/// What each sequence does in a pass: `Some(k)` feeds the next `k` prompt tokens (or, once the
/// prompt is in, one decode token), `None` sits the pass out.
type Plan = [Option<usize>; 3];

/// The passes of the schedule: sequence 0's prompt in chunks of 5, 5 and 1 beside the others'
/// prompts and decode tokens, a pass without sequence 1, then decode of all three.
const PLAN: [Plan; 8] = [
    [Some(5), Some(4), None],
    [Some(5), Some(1), Some(7)],
    [Some(1), None, Some(1)],
    [Some(1), Some(1), Some(1)],
    [Some(1), Some(1), Some(1)],
    [None, Some(1), Some(1)],
    [Some(1), Some(1), Some(1)],
    [Some(1), Some(1), Some(1)],
];

/// Per sequence: the tokens it fed, pass by pass (prompt chunks, then its greedy tokens), and
/// the logits after each pass it took part in.
struct Run {
    fed: Vec<Vec<Vec<u32>>>,
    logits: Vec<Vec<Vec<f32>>>,
}

/// Runs PLAN with `pass(sequences, tokens, counts) -> rows of logits`: prompts first, then
/// each sequence's own greedy token.
fn run_plan(
    prompts: &[Vec<u32>],
    vocab: usize,
    mut pass: impl FnMut(&[usize], &[u32], &[usize]) -> Vec<f32>,
) -> Run {
    let n = prompts.len();
    let mut run = Run {
        fed: vec![Vec::new(); n],
        logits: vec![Vec::new(); n],
    };
    let mut at = vec![0usize; n];
    let mut next: Vec<Option<u32>> = vec![None; n];
    for plan in PLAN {
        let (mut seqs, mut tokens, mut counts) = (Vec::new(), Vec::new(), Vec::new());
        for (i, k) in plan.iter().enumerate() {
            let Some(k) = *k else { continue };
            let chunk: Vec<u32> = if at[i] < prompts[i].len() {
                let c = prompts[i][at[i]..(at[i] + k).min(prompts[i].len())].to_vec();
                at[i] += c.len();
                c
            } else {
                vec![next[i].expect("a token decoded before")]
            };
            seqs.push(i);
            counts.push(chunk.len());
            tokens.extend_from_slice(&chunk);
            run.fed[i].push(chunk);
        }
        let rows = pass(&seqs, &tokens, &counts);
        assert_eq!(rows.len(), seqs.len() * vocab);
        for (r, &i) in seqs.iter().enumerate() {
            let row = rows[r * vocab..(r + 1) * vocab].to_vec();
            if at[i] == prompts[i].len() {
                next[i] = Some(argmax(&row));
            }
            run.logits[i].push(row);
        }
    }
    run
}

fn assert_same(batched: &Run, alone: &[Vec<Vec<f32>>], what: &str) {
    for (i, (b, a)) in batched.logits.iter().zip(alone).enumerate() {
        assert_eq!(b.len(), a.len(), "{what}: sequence {i}'s passes");
        for (p, (x, y)) in b.iter().zip(a).enumerate() {
            let diff = x
                .iter()
                .zip(y)
                .filter(|(u, v)| u.to_bits() != v.to_bits())
                .count();
            assert_eq!(
                diff, 0,
                "{what}: sequence {i}, its pass {p}: {diff} logits differ from the sequence \
                 run alone"
            );
        }
    }
}

/// The reference model through the engine's API: `batch_decoder_rows` + `BatchDecoder::session`
/// + `step`, against each sequence's own session fed the same chunks.
#[test]
fn batched_passes_on_opencl_equal_each_sequence_run_alone() {
    let _g = lock();
    let engine = Engine::load(&common::model_path(), 1, Isa::Scalar)
        .unwrap()
        .with_backend(&BackendChoice::OpenCl(ClOptions::default()))
        .expect("OpenCL on PoCL");
    let vocab = engine.model.config().vocab_size;
    let prompts = prompts(vocab as u32);
    let opts = SessionOptions {
        max_seq_len: 32,
        max_batch: 8,
        ..Default::default()
    };
    let mut batch = engine.batch_decoder_rows(3, 16, 32).unwrap();
    let mut sessions: Vec<_> = (0..3)
        .map(|_| batch.session(opts.clone()).unwrap())
        .collect();
    // a fourth sequence does not fit the batch's three rings
    let refused = batch.session(opts.clone()).map(|_| ()).unwrap_err();
    assert!(refused.to_string().contains("all 3 sequences"), "{refused}");
    let before = batch.counters();
    let run = run_plan(&prompts, vocab, |seqs, tokens, counts| {
        let mut pick: Vec<_> = sessions
            .iter_mut()
            .enumerate()
            .filter(|(i, _)| seqs.contains(i))
            .map(|(_, s)| s)
            .collect();
        batch.step(&mut pick, tokens, counts).unwrap().to_vec()
    });
    // one weight read per pass, not per sequence
    let c = batch.counters();
    assert_eq!(c.forward_calls - before.forward_calls, PLAN.len() as u64);
    let lane_tokens: u64 = sessions
        .iter()
        .map(|s| s.counters().tokens_decoded + s.counters().tokens_prefilled)
        .sum();
    let fed: usize = run.fed.iter().flatten().map(Vec::len).sum();
    assert_eq!(lane_tokens, fed as u64);
    for (s, f) in sessions.iter().zip(&run.fed) {
        assert_eq!(s.n_past(), f.iter().map(Vec::len).sum::<usize>());
    }

    let alone: Vec<Vec<Vec<f32>>> = run
        .fed
        .iter()
        .map(|chunks| {
            let mut s = engine.session(opts.clone()).unwrap();
            chunks
                .iter()
                .map(|c| s.prefill(c).unwrap().to_vec())
                .collect()
        })
        .collect();
    assert_same(&run, &alone, "reference model");

    // A session of the batch runs alone too (a one-sequence pass), after the batch's passes.
    let t = argmax(run.logits[2].last().unwrap());
    let own = sessions[2].decode(t).unwrap().to_vec();
    let mut s = engine.session(opts.clone()).unwrap();
    for c in &run.fed[2] {
        s.prefill(c).unwrap();
    }
    assert_eq!(own, s.decode(t).unwrap());

    // Sessions of another decoder or of the engine itself are refused by name.
    let mut stray = engine.session(opts.clone()).unwrap();
    let err = batch
        .step(&mut [&mut stray], &[1], &[1])
        .map(|_| ())
        .unwrap_err();
    assert!(err.to_string().contains("BatchDecoder::session"), "{err}");
    // A sequence twice in one pass, and more tokens than a pass carries, are refused before
    // anything runs.
    let (a, _) = sessions.split_at_mut(1);
    let n0 = a[0].n_past();
    let err = batch
        .step(&mut [&mut a[0]], &[1; 17], &[17])
        .map(|_| ())
        .unwrap_err();
    assert!(err.to_string().contains("at most 16"), "{err}");
    assert_eq!(a[0].n_past(), n0);
    // A dropped session gives its ring back.
    sessions.pop();
    let again = batch.session(opts.clone()).unwrap();
    assert_eq!(again.n_past(), 0);
}

/// Gemma 3's sliding window (4 positions), two RoPE bases, post-norms and GeGLU in batched
/// passes, under both attention kernels, with canaries, in rings of 12 slots under the
/// `sliding` policy (2 sinks), so the longest sequence wraps its ring and the lanes' slots
/// hold different positions: each sequence's logits equal those of its own one-lane core
/// (exact) or agree closely (split: the split boundaries follow the longest ring of the pass).
#[test]
fn batched_passes_on_a_sliding_window_gemma_equal_each_sequence_run_alone() {
    let _g = lock();
    let bytes = tiny_gemma3(TinyGemma {
        window: 4,
        ..TinyGemma::default()
    });
    let model = Model::from_gguf(Arc::new(
        GgufFile::from_bytes("tiny-gemma3", bytes).unwrap(),
    ))
    .unwrap();
    let vocab = model.config().vocab_size;
    let prompts = prompts(vocab as u32);
    for attention in [ClAttention::Exact, ClAttention::Split] {
        let cl = ClEngine::new(
            &model,
            &ClOptions {
                attention,
                canaries: true,
                ..Default::default()
            },
        )
        .unwrap();
        let opts = SessionOptions {
            max_seq_len: 12,
            max_batch: 8,
            kv_policy: KvPolicy::Sliding { sinks: 2 },
            ..Default::default()
        };
        let mut core = cl.batch(3, 16, 12).unwrap();
        let mut seqs: Vec<_> = (0..3).map(|_| core.take_lane(&opts).unwrap()).collect();
        // another ring size than the batch's is refused
        let other = SessionOptions {
            max_seq_len: 24,
            ..opts.clone()
        };
        let err = core.take_lane(&other).map(|_| ()).unwrap_err();
        assert!(err.to_string().contains("hold 12 tokens"), "{err}");
        let run = run_plan(&prompts, vocab, |which, tokens, counts| {
            let mut pick: Vec<_> = seqs
                .iter_mut()
                .enumerate()
                .filter(|(i, _)| which.contains(i))
                .map(|(_, s)| s)
                .collect();
            core.pass(&mut pick[..], tokens, counts).unwrap().to_vec()
        });
        let longest = seqs.iter().map(|s| s.n_past()).max().unwrap();
        assert!(longest > 12, "sequence 0 wraps its ring: {longest} tokens");
        let alone: Vec<Vec<Vec<f32>>> = run
            .fed
            .iter()
            .map(|chunks| {
                let mut s = cl.session(opts.clone()).unwrap();
                chunks
                    .iter()
                    .map(|c| s.forward(c).unwrap().to_vec())
                    .collect()
            })
            .collect();
        if attention == ClAttention::Exact {
            assert_same(&run, &alone, "tiny gemma3, exact attention");
        } else {
            for (b, a) in run.logits.iter().flatten().zip(alone.iter().flatten()) {
                let scale = a.iter().fold(0f32, |m, v| m.max(v.abs())).max(1e-6);
                let d = b.iter().zip(a).fold(0f32, |m, (x, y)| m.max((x - y).abs())) / scale;
                assert!(
                    d < 1e-4,
                    "split attention: {d} relative to the sequence alone"
                );
                assert_eq!(argmax(b), argmax(a));
            }
        }
    }
}
