//! Batched decode (several sequences, one KV ring each) against decoding each sequence
//! alone: the logits must be bit-identical on the active tier, and a batch step allocates
//! nothing once warm. Also the refusals: a full ring, a wrong batch size.

mod common;

use pocketperf_runtime::kv::{KvPolicy, KvType};
use pocketperf_runtime::model::{BatchForward, Forward, Model, SessionOptions};
use pocketperf_runtime::pool::ThreadPool;
use pocketperf_runtime::quant;
use pocketperf_runtime::session::argmax;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};

mod counting_alloc;
use counting_alloc::{ALLOCS, COUNTING, Counting};

#[global_allocator]
static GLOBAL: Counting = Counting;

const PROMPTS: [&[u32]; 3] = [
    &[504, 3575, 282, 4649, 314],
    &[6403, 1980, 253, 655, 28, 6403, 1980],
    &[1604, 3987, 46477],
];

fn session(model: &Model, pool: &Arc<ThreadPool>, cap: usize) -> Forward {
    session_of(model, pool, cap, KvType::F16)
}

fn session_of(model: &Model, pool: &Arc<ThreadPool>, cap: usize, kv_type: KvType) -> Forward {
    let isa = quant::isa_from_env().unwrap();
    Forward::new(
        model,
        SessionOptions {
            max_seq_len: cap,
            kv_type,
            ..Default::default()
        },
        pool.clone(),
        isa,
    )
    .unwrap()
}

/// The allocation counter is global: the tests of this file run one at a time, so that one
/// test's allocations are never counted in another's window.
static SERIAL: Mutex<()> = Mutex::new(());

fn serial() -> std::sync::MutexGuard<'static, ()> {
    SERIAL
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

#[test]
fn batch_decode_equals_one_at_a_time_and_allocates_nothing() {
    let _one_at_a_time = serial();
    batch_equals_alone(KvType::F16);
}

/// The same over Q8_0 caches (sequence 1 keeps an f16 one: a batch may mix them).
#[test]
fn batch_decode_over_q8_0_caches_equals_one_at_a_time() {
    let _one_at_a_time = serial();
    batch_equals_alone(KvType::Q8_0);
}

fn batch_equals_alone(kv_type: KvType) {
    let ty = |i: usize| if i == 1 { KvType::F16 } else { kv_type };
    let model = Model::open(&common::model_path()).unwrap();
    let isa = quant::isa_from_env().unwrap();
    let pool = Arc::new(ThreadPool::new(2));
    let vocab = model.config().vocab_size;
    let steps = 12;

    // Reference: each sequence alone, greedy.
    let mut alone: Vec<Vec<Vec<f32>>> = Vec::new();
    let mut tokens: Vec<Vec<u32>> = Vec::new();
    for (i, p) in PROMPTS.iter().enumerate() {
        let mut f = session_of(&model, &pool, 64, ty(i));
        let mut tok = argmax(f.forward(&model, p).unwrap());
        let (mut ls, mut ts) = (Vec::new(), vec![tok]);
        for _ in 0..steps {
            let l = f.forward(&model, &[tok]).unwrap().to_vec();
            tok = argmax(&l);
            ls.push(l);
            ts.push(tok);
        }
        alone.push(ls);
        tokens.push(ts);
    }

    // Batched: the same prompts, then the same tokens fed to all three at once.
    let mut seqs: Vec<Forward> = PROMPTS
        .iter()
        .enumerate()
        .map(|(i, p)| {
            let mut f = session_of(&model, &pool, 64, ty(i));
            f.forward(&model, p).unwrap();
            f
        })
        .collect();
    let mut batch = BatchForward::new(&model, 4, 64, pool.clone(), isa).unwrap();
    let mut step_tokens = [0u32; 3];
    for step in 0..steps {
        for (i, t) in step_tokens.iter_mut().enumerate() {
            *t = tokens[i][step];
        }
        if step == 2 {
            ALLOCS.store(0, Ordering::SeqCst);
            COUNTING.store(true, Ordering::SeqCst);
        }
        let logits = batch.decode(&model, &mut seqs[..], &step_tokens).unwrap();
        if step == steps - 1 {
            COUNTING.store(false, Ordering::SeqCst);
        }
        for i in 0..3 {
            let row = &logits[i * vocab..(i + 1) * vocab];
            assert!(
                row == &alone[i][step][..],
                "sequence {i} step {step}: batched logits differ from decoding alone"
            );
        }
    }
    let n = ALLOCS.load(Ordering::SeqCst);
    assert_eq!(n, 0, "{n} heap allocations in {} batched steps", steps - 2);
    for (i, f) in seqs.iter().enumerate() {
        assert_eq!(f.n_past(), PROMPTS[i].len() + steps);
    }
    assert_eq!(batch.counters.tokens_decoded, 3 * steps as u64);

    // A batch of one is a plain decode too.
    let mut one = session_of(&model, &pool, 64, kv_type);
    let mut two = session_of(&model, &pool, 64, kv_type);
    one.forward(&model, PROMPTS[0]).unwrap();
    two.forward(&model, PROMPTS[0]).unwrap();
    let a = one.forward(&model, &[tokens[0][0]]).unwrap().to_vec();
    let b = batch
        .decode(&model, &mut [&mut two][..], &[tokens[0][0]])
        .unwrap();
    assert!(a == b[..vocab]);
}

#[test]
fn batch_decode_refuses_bad_batches_without_changing_state() {
    let _one_at_a_time = serial();
    let model = Model::open(&common::model_path()).unwrap();
    let isa = quant::isa_from_env().unwrap();
    let pool = Arc::new(ThreadPool::new(1));
    let mut batch = BatchForward::new(&model, 2, 8, pool.clone(), isa).unwrap();
    let mut a = session(&model, &pool, 8);
    let mut full = Forward::new(
        &model,
        SessionOptions {
            max_seq_len: 4,
            kv_policy: KvPolicy::Error,
            ..Default::default()
        },
        pool.clone(),
        isa,
    )
    .unwrap();
    full.forward(&model, &[1, 2, 3, 4]).unwrap();
    a.forward(&model, &[1, 2]).unwrap();
    // one ring is full: refused, the other sequence untouched
    let e = batch.decode(&model, &mut [&mut a, &mut full][..], &[5, 6]);
    assert!(e.is_err());
    assert_eq!(a.n_past(), 2);
    assert_eq!(a.kv().used(), 2);
    // more tokens than sequences, more than the decoder's batch, unknown token
    assert!(batch.decode(&model, &mut [&mut a][..], &[5, 6]).is_err());
    let mut b = session(&model, &pool, 8);
    let mut c = session(&model, &pool, 8);
    assert!(
        batch
            .decode(&model, &mut [&mut a, &mut b, &mut c][..], &[1, 2, 3])
            .is_err()
    );
    let vocab = model.config().vocab_size as u32;
    assert!(batch.decode(&model, &mut [&mut a][..], &[vocab]).is_err());
    // a ring larger than the decoder serves
    let mut big = session(&model, &pool, 64);
    assert!(batch.decode(&model, &mut [&mut big][..], &[1]).is_err());
    assert_eq!(a.n_past(), 2);
    // and a good call still works
    batch.decode(&model, &mut [&mut a][..], &[5]).unwrap();
    assert_eq!(a.n_past(), 3);
}
