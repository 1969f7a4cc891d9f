//! Mixed batched passes (continuous batching with chunked prefill): prompts fed in chunks
//! through [`BatchForward::step`] beside other sequences' decode tokens must give, for every
//! sequence, the logits (bit for bit) and greedy tokens of running that sequence alone; a
//! mixed pass allocates nothing once warm; bad runs are refused without changing any state.
//! On the reference model (SmolLM2), on Gemma 3 270M (sliding-window layers), on Qwen2.5 0.5B
//! (biases, K-quant rows), and on a tiny synthetic Gemma 3 whose window of 4 makes the local
//! ring wrap inside the chunked prompts.

mod common;
mod counting_alloc;
mod synth;

use counting_alloc::{ALLOCS, COUNTING, Counting};
use pocketperf_runtime::model::{BatchForward, Forward, Model, SeqSet, SessionOptions};
use pocketperf_runtime::pool::ThreadPool;
use pocketperf_runtime::quant;
use pocketperf_runtime::session::argmax;
use std::sync::Arc;
use std::sync::atomic::Ordering;

#[global_allocator]
static GLOBAL: Counting = Counting;

/// Runs without libtest (`harness = false`, as `alloc_decode`): the allocation counter is
/// process-wide, and libtest's own threads allocate (recording and printing other tests'
/// results) while a test counts.
fn main() {
    smollm2_mixed_chunked_passes_equal_each_sequence_alone();
    gemma3_mixed_chunked_passes_equal_each_sequence_alone();
    qwen2_mixed_chunked_passes_equal_each_sequence_alone();
    sliding_window_ring_wraps_inside_mixed_chunked_passes();
    mixed_pass_refuses_bad_runs_without_changing_state();
    println!(
        "batch_chunked: ok (mixed chunked passes bit-identical to each sequence alone on \
         SmolLM2, Gemma 3 270M, Qwen2.5 0.5B and a wrapping sliding window; 0 heap allocations per pass \
         after warm-up; bad runs refused)"
    );
}

/// The sequences of a pass: a subset of all, in index order.
struct Subset<'a> {
    all: &'a mut [Forward],
    idx: &'a [usize],
}

impl SeqSet for Subset<'_> {
    fn n_seqs(&self) -> usize {
        self.idx.len()
    }
    fn seq(&self, i: usize) -> &Forward {
        &self.all[self.idx[i]]
    }
    fn seq_mut(&mut self, i: usize) -> &mut Forward {
        &mut self.all[self.idx[i]]
    }
}

/// Prompt ids spread over the vocabulary (deterministic, below `vocab`).
fn prompt(len: usize, salt: usize, vocab: usize) -> Vec<u32> {
    (0..len)
        .map(|i| ((i * 7919 + salt * 104_729 + 13) % (vocab - 2) + 1) as u32)
        .collect()
}

struct Case {
    prompts: Vec<Vec<u32>>,
    /// The pass at which each sequence joins.
    starts: Vec<usize>,
    /// Prompt tokens per sequence and pass in the mixed run.
    chunk: usize,
    /// Decode steps after each prompt.
    steps: usize,
    cap: usize,
    /// `max_batch` of every session (the alone run's prefill chunk).
    session_batch: usize,
    threads: usize,
}

fn opts(c: &Case) -> SessionOptions {
    SessionOptions {
        max_seq_len: c.cap,
        max_batch: c.session_batch,
        ..Default::default()
    }
}

/// Runs `case` alone and mixed; returns the heap allocations of the mixed passes after the
/// first three, and the number of passes that carried two or more prompt chunks and that
/// mixed a prompt chunk with decode rows.
fn run(model: &Model, case: &Case) -> (usize, usize, usize) {
    let isa = quant::isa_from_env().unwrap();
    let pool = Arc::new(ThreadPool::new(case.threads));
    let vocab = model.config().vocab_size;
    let n = case.prompts.len();

    // Alone: the prompt in one forward call (chunked by the session's max_batch), then
    // greedy decode.
    let mut alone: Vec<Vec<Vec<f32>>> = Vec::new();
    let mut greedy: Vec<Vec<u32>> = Vec::new();
    for p in &case.prompts {
        let mut f = Forward::new(model, opts(case), pool.clone(), isa).unwrap();
        let mut l = f.forward(model, p).unwrap().to_vec();
        let (mut ls, mut ts) = (Vec::new(), Vec::new());
        for _ in 0..=case.steps {
            let t = argmax(&l);
            ls.push(l);
            ts.push(t);
            if ts.len() > case.steps {
                break;
            }
            l = f.forward(model, &[t]).unwrap().to_vec();
        }
        alone.push(ls);
        greedy.push(ts);
    }

    // Mixed: every pass, each sequence in flight takes its next prompt chunk or its last
    // greedy token.
    let mut seqs: Vec<Forward> = (0..n)
        .map(|_| Forward::new(model, opts(case), pool.clone(), isa).unwrap())
        .collect();
    let mut batch =
        BatchForward::with_rows(model, n, n * case.chunk, case.cap, pool.clone(), isa).unwrap();
    let mut fed = vec![0usize; n];
    let mut out: Vec<Vec<u32>> = (0..n).map(|_| Vec::with_capacity(case.steps + 1)).collect();
    let (mut tokens, mut counts, mut idx) = (
        Vec::with_capacity(n * case.chunk),
        Vec::with_capacity(n),
        Vec::with_capacity(n),
    );
    let (mut two_chunks, mut mixed, mut chunked_rows) = (0, 0, 0u64);
    let mut pass = 0;
    loop {
        tokens.clear();
        counts.clear();
        idx.clear();
        for i in 0..n {
            if case.starts[i] > pass || out[i].len() > case.steps {
                continue;
            }
            let p = &case.prompts[i];
            let k = if fed[i] < p.len() {
                let k = case.chunk.min(p.len() - fed[i]);
                tokens.extend_from_slice(&p[fed[i]..fed[i] + k]);
                k
            } else {
                tokens.push(*out[i].last().unwrap());
                1
            };
            counts.push(k);
            idx.push(i);
        }
        if idx.is_empty() && (0..n).all(|i| case.starts[i] <= pass) {
            break;
        }
        if idx.is_empty() {
            pass += 1;
            continue;
        }
        let chunks = counts.iter().filter(|&&k| k > 1).count();
        two_chunks += usize::from(chunks >= 2);
        chunked_rows += counts.iter().filter(|&&k| k > 1).sum::<usize>() as u64;
        mixed += usize::from(chunks >= 1 && counts.contains(&1));
        if pass == 3 {
            ALLOCS.store(0, Ordering::SeqCst);
            COUNTING.store(true, Ordering::SeqCst);
        }
        let logits = {
            let mut set = Subset {
                all: &mut seqs,
                idx: &idx,
            };
            batch.step(model, &mut set, &tokens, &counts).unwrap()
        };
        for (row, &i) in idx.iter().enumerate() {
            let l = &logits[row * vocab..(row + 1) * vocab];
            let p = &case.prompts[i];
            if fed[i] < p.len() {
                fed[i] += counts[row];
                if fed[i] < p.len() {
                    continue;
                }
            }
            let s = out[i].len();
            assert!(
                l == &alone[i][s][..],
                "sequence {i} step {s} (pass {pass}, chunk {}): mixed-pass logits differ from running it alone",
                case.chunk
            );
            out[i].push(argmax(l));
        }
        pass += 1;
    }
    COUNTING.store(false, Ordering::SeqCst);
    let allocs = ALLOCS.load(Ordering::SeqCst);
    assert_eq!(out, greedy, "greedy tokens of the mixed run");
    for (i, f) in seqs.iter().enumerate() {
        assert_eq!(f.n_past(), case.prompts[i].len() + case.steps);
    }
    // Runs of several tokens count as prefill, single tokens as decode (as for one sequence).
    let total_prompt: usize = case.prompts.iter().map(Vec::len).sum();
    let c = batch.counters;
    assert_eq!(c.tokens_prefilled, chunked_rows);
    assert_eq!(
        c.tokens_prefilled + c.tokens_decoded,
        (total_prompt + n * case.steps) as u64
    );
    (allocs, two_chunks, mixed)
}

fn check(model: &Model, case: &Case) {
    assert!(
        case.prompts.iter().all(|p| p.len() % case.chunk != 0),
        "the chunk divides no prompt"
    );
    let (allocs, two_chunks, mixed) = run(model, case);
    assert_eq!(
        allocs, 0,
        "{allocs} heap allocations in the mixed passes after warm-up"
    );
    assert!(two_chunks > 0, "some pass carried two prompt chunks");
    assert!(mixed > 0, "some pass mixed a prompt chunk with decode rows");
}

fn smollm2_mixed_chunked_passes_equal_each_sequence_alone() {
    let model = Model::open(&common::model_path()).unwrap();
    let vocab = model.config().vocab_size;
    for (chunk, threads) in [(5, 2), (16, 1)] {
        check(
            &model,
            &Case {
                prompts: vec![
                    prompt(23, 0, vocab),
                    prompt(9 + chunk, 1, vocab),
                    prompt(37, 2, vocab),
                ],
                starts: vec![0, 1, 3],
                chunk,
                steps: 10,
                cap: 64,
                session_batch: 64,
                threads,
            },
        );
    }
}

fn gemma3_mixed_chunked_passes_equal_each_sequence_alone() {
    let path = common::model_path_for("gemma3-270m");
    let model = Model::open(&path).unwrap();
    assert!(model.config().n_swa_layers() > 0);
    let vocab = model.config().vocab_size;
    check(
        &model,
        &Case {
            prompts: vec![
                prompt(29, 3, vocab),
                prompt(13, 4, vocab),
                prompt(19, 5, vocab),
            ],
            starts: vec![0, 1, 2],
            chunk: 6,
            steps: 6,
            cap: 64,
            session_batch: 64,
            threads: 2,
        },
    );
}

/// Qwen2.5's biases, packed Q5_0/Q8_0 tiles and K-quant `ffn_down` rows in mixed passes.
fn qwen2_mixed_chunked_passes_equal_each_sequence_alone() {
    let path = common::model_path_for("qwen2.5-coder-0.5b");
    let model = Model::open(&path).unwrap();
    let vocab = model.config().vocab_size;
    check(
        &model,
        &Case {
            prompts: vec![
                prompt(23, 6, vocab),
                prompt(11, 7, vocab),
                prompt(17, 8, vocab),
            ],
            starts: vec![0, 1, 2],
            chunk: 6,
            steps: 6,
            cap: 64,
            session_batch: 64,
            threads: 2,
        },
    );
}

/// Window 4, session batch 3: the sliding ring (7 slots) wraps inside every prompt, so the
/// chunks after the first attend through a wrapped ring.
fn sliding_window_ring_wraps_inside_mixed_chunked_passes() {
    let bytes = synth::tiny_gemma3(synth::TinyGemma::default());
    let g = pocketperf_runtime::gguf::GgufFile::from_bytes("tiny-gemma3", bytes).unwrap();
    let model = Model::from_gguf(Arc::new(g)).unwrap();
    assert_eq!(model.config().sliding_window, 4);
    let vocab = model.config().vocab_size;
    check(
        &model,
        &Case {
            prompts: vec![
                prompt(11, 6, vocab),
                prompt(7, 7, vocab),
                prompt(17, 8, vocab),
            ],
            starts: vec![0, 1, 4],
            chunk: 2,
            steps: 12,
            cap: 48,
            session_batch: 3,
            threads: 2,
        },
    );
}

fn mixed_pass_refuses_bad_runs_without_changing_state() {
    let model = Model::open(&common::model_path()).unwrap();
    let isa = quant::isa_from_env().unwrap();
    let pool = Arc::new(ThreadPool::new(1));
    let o = |max_batch| SessionOptions {
        max_seq_len: 32,
        max_batch,
        ..Default::default()
    };
    let mut batch = BatchForward::with_rows(&model, 2, 8, 32, pool.clone(), isa).unwrap();
    let mut a = Forward::new(&model, o(4), pool.clone(), isa).unwrap();
    let mut b = Forward::new(&model, o(8), pool.clone(), isa).unwrap();
    a.forward(&model, &[1, 2]).unwrap();
    let bad: [(&[u32], &[usize]); 5] = [
        (&[5, 6, 7], &[2, 0]),           // an empty run
        (&[5, 6, 7], &[1, 1]),           // counts do not add up to the tokens
        (&[5, 6, 7, 8, 9, 10], &[5, 1]), // a's run is over its session's max_batch (4)
        (&[1; 9], &[1, 8]),              // over the decoder's 8 rows
        (&[5, 6], &[2]),                 // one run for two sequences
    ];
    for (tokens, counts) in bad {
        let r = batch.step(&model, &mut [&mut a, &mut b][..], tokens, counts);
        assert!(r.is_err(), "{tokens:?} {counts:?} accepted");
        assert_eq!((a.n_past(), a.kv().used()), (2, 2));
        assert_eq!((b.n_past(), b.kv().used()), (0, 0));
    }
    assert_eq!(BatchForward::chunk_limit(&a), 4);
    assert!(BatchForward::with_rows(&model, 4, 3, 32, pool.clone(), isa).is_err());
    // and a good mixed call still works: a decodes one token, b prefills four
    batch
        .step(&model, &mut [&mut a, &mut b][..], &[5, 6, 7, 8, 9], &[1, 4])
        .unwrap();
    assert_eq!((a.n_past(), b.n_past()), (3, 4));
}
