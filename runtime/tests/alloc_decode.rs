//! Zero heap allocations per decoded token after warm-up, counted by a global allocator
//! wrapper (every thread, including the pool's workers).
//!
//! Runs without libtest (`harness = false`): the test harness's own threads allocate (for
//! example its "running for over 60 seconds" notice on a slow machine), and a global counter
//! cannot tell those apart from the decode path's.

mod common;

use pocketperf_runtime::model::{Forward, Model, SessionOptions};
use pocketperf_runtime::pool::ThreadPool;
use pocketperf_runtime::quant;
use std::sync::Arc;
use std::sync::atomic::Ordering;

mod counting_alloc;
mod synth;
use counting_alloc::{ALLOCS, COUNTING, Counting};

#[global_allocator]
static GLOBAL: Counting = Counting;

fn main() {
    decode_allocates_nothing_after_warm_up();
    sliding_window_decode_allocates_nothing();
    println!(
        "alloc_decode: ok (0 heap allocations per decoded token at 1 and 2 threads, also \
         with sliding-window layers wrapping their ring)"
    );
}

/// A gemma3-style model whose local layers' ring (window 4 + batch 2) wraps many times
/// during the counted tokens.
fn sliding_window_decode_allocates_nothing() {
    let bytes = synth::tiny_gemma3(synth::TinyGemma::default());
    let g = pocketperf_runtime::gguf::GgufFile::from_bytes("tiny-gemma3", bytes).unwrap();
    let model = Model::from_gguf(Arc::new(g)).unwrap();
    assert!(model.config().n_swa_layers() > 0);
    let isa = quant::isa_from_env().unwrap();
    for threads in [1, 2] {
        let mut f = Forward::new(
            &model,
            SessionOptions {
                max_seq_len: 96,
                max_batch: 2,
                ..Default::default()
            },
            Arc::new(ThreadPool::new(threads)),
            isa,
        )
        .unwrap();
        f.forward(&model, &[1, 2, 3]).unwrap();
        f.forward(&model, &[4]).unwrap();
        ALLOCS.store(0, Ordering::SeqCst);
        COUNTING.store(true, Ordering::SeqCst);
        let mut tok = 5u32;
        for _ in 0..32 {
            let l = f.forward(&model, std::slice::from_ref(&tok)).unwrap();
            tok = pocketperf_runtime::session::argmax(l);
        }
        COUNTING.store(false, Ordering::SeqCst);
        let n = ALLOCS.load(Ordering::SeqCst);
        assert_eq!(
            n, 0,
            "{n} heap allocations during 32 decoded tokens at {threads} threads"
        );
        assert!(f.kv_swa().is_some_and(|r| r.has_wrapped()));
    }
}

fn decode_allocates_nothing_after_warm_up() {
    let model = Model::open(&common::model_path()).unwrap();
    let isa = quant::isa_from_env().unwrap();
    for threads in [1, 2] {
        let mut f = Forward::new(
            &model,
            SessionOptions {
                max_seq_len: 128,
                ..Default::default()
            },
            Arc::new(ThreadPool::new(threads)),
            isa,
        )
        .unwrap();
        f.forward(&model, &[504, 3575, 282]).unwrap();
        f.forward(&model, &[4649]).unwrap();
        ALLOCS.store(0, Ordering::SeqCst);
        COUNTING.store(true, Ordering::SeqCst);
        let mut tok = 314u32;
        for _ in 0..32 {
            let l = f.forward(&model, std::slice::from_ref(&tok)).unwrap();
            tok = pocketperf_runtime::session::argmax(l);
        }
        COUNTING.store(false, Ordering::SeqCst);
        let n = ALLOCS.load(Ordering::SeqCst);
        assert_eq!(
            n, 0,
            "{n} heap allocations during 32 decoded tokens at {threads} threads"
        );
        // the counter itself works: an allocation while counting is seen
        COUNTING.store(true, Ordering::SeqCst);
        let v = std::hint::black_box(vec![1u8; 16]);
        COUNTING.store(false, Ordering::SeqCst);
        drop(v);
        assert!(ALLOCS.load(Ordering::SeqCst) >= 1);
    }
}
