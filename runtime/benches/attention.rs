//! Criterion benchmarks of attention over a long KV cache, at depths of 512 to 8,192 slots,
//! for the shapes of the reference model (head size 64, three query heads per KV head):
//!
//! - `decode_full_row/<depth>`: one row's three heads of one KV head the way attention ran
//!   before blocking (a full-length score row per head, softmax over it, then value sums);
//! - `decode_blocked/<depth>`: the same through [`attention::attend`] (blocks of
//!   [`attention::BLOCK`] slots, online softmax, chunks merged in order), one thread;
//! - `decode_blocked_q8_0/<depth>`: the same over a Q8_0 cache of the same keys and values;
//! - `decode_layer/<threads>t/<depth>`: a whole layer of one decode step (three KV heads),
//!   every (head, chunk) a task shared out over a pool of one or two threads, then the
//!   merges — the split that lets two workers share a single sequence;
//! - `prefill_tile/<depth>`: a prefill tile of four rows (twelve query heads) at the end of
//!   the context;
//! - `group7/<depth>`: one row of seven query heads over one KV head (Qwen2.5's group: a
//!   decode task, and a prefill task of that model, whose tiles hold one row).
//!
//! Throughput is in KV slots visited per second (per query row). Run with
//! `cargo bench -p pocketperf-runtime --bench attention` (`POCKETPERF_ISA` selects the tier).

use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use half::f16;
use pocketperf_runtime::kv::{KvCache, KvHead, KvPolicy, KvShape, KvType};
use pocketperf_runtime::model::attention::{self, BLOCK, HeadKv, Queries};
use pocketperf_runtime::pool::ThreadPool;
use pocketperf_runtime::quant::{self, attn};
use std::hint::black_box;
use std::sync::Mutex;

const HD: usize = 64;
const GROUP: usize = 3;
const KV_HEADS: usize = 3;
/// Query heads per KV head of Qwen2.5 (the `group7` case).
const QWEN_GROUP: usize = 7;
const DEPTHS: [usize; 5] = [512, 1024, 2048, 4096, 8192];

fn isa() -> quant::Isa {
    quant::isa_from_env().unwrap_or_else(|_| quant::detect_best())
}

fn vals(n: usize, seed: u32, scale: f32) -> Vec<f32> {
    let mut x = seed.wrapping_mul(2654435761).wrapping_add(7);
    (0..n)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 17;
            x ^= x << 5;
            ((x % 2001) as f32 / 1000.0 - 1.0) * scale
        })
        .collect()
}

fn halves(n: usize, seed: u32) -> Vec<f16> {
    vals(n, seed, 1.0).into_iter().map(f16::from_f32).collect()
}

struct Kv {
    keys: Vec<Vec<f16>>,
    values: Vec<Vec<f16>>,
    positions: Vec<u32>,
}

fn kv(depth: usize) -> Kv {
    Kv {
        keys: (0..KV_HEADS)
            .map(|h| halves(depth * HD, 10 + h as u32))
            .collect(),
        values: (0..KV_HEADS)
            .map(|h| halves(depth * HD, 20 + h as u32))
            .collect(),
        positions: (0..depth as u32).collect(),
    }
}

fn head(kv: &Kv, h: usize) -> HeadKv<'_> {
    HeadKv {
        cache: KvHead::F16 {
            keys: &kv.keys[h],
            values: &kv.values[h],
        },
        positions: &kv.positions,
    }
}

/// KV head 0 of `kv` written into a Q8_0 cache (one layer, one head).
fn q8_cache(kv: &Kv, depth: usize) -> KvCache {
    let shape = KvShape {
        n_layers: 1,
        n_kv_heads: 1,
        head_dim: HD,
        capacity: depth,
        ty: KvType::Q8_0,
    };
    let mut c = KvCache::new(shape, KvPolicy::Error).expect("a Q8_0 cache");
    let (mut k, mut v) = ([0.0f32; HD], [0.0f32; HD]);
    for s in 0..depth {
        for d in 0..HD {
            k[d] = kv.keys[0][attn::key_index(HD, s, d)].to_f32();
            v[d] = kv.values[0][s * HD + d].to_f32();
        }
        let slot = c.claim(s as u32).expect("a free slot");
        c.write(0, slot, &k, &v);
    }
    c
}

fn decode(c: &mut Criterion) {
    let isa = isa();
    let mut g = c.benchmark_group("attention_long");
    for depth in DEPTHS {
        let kv = kv(depth);
        let q = vals(GROUP * HD, 3, 2.0);
        let pos = [depth as u32 - 1];
        let qs = Queries {
            q: &q,
            pos: &pos,
            group: GROUP,
            hd: HD,
            scale: 0.125,
            window: u32::MAX,
            q8: None,
        };
        g.throughput(Throughput::Elements(depth as u64));
        let mut sc = vec![0.0f32; GROUP * depth];
        let mut out = vec![0.0f32; GROUP * HD];
        g.bench_function(BenchmarkId::new("decode_full_row", depth), |b| {
            b.iter(|| {
                attn::scores_f16(
                    isa,
                    &q,
                    GROUP,
                    HD,
                    &kv.keys[0],
                    depth,
                    0.125,
                    &mut sc,
                    depth,
                );
                for h in 0..GROUP {
                    let row = &mut sc[h * depth..(h + 1) * depth];
                    let mx = attn::max_f32(isa, row);
                    let s = attn::exp_shifted(isa, row, mx);
                    row.iter_mut().for_each(|x| *x /= s);
                }
                out.fill(0.0);
                attn::accum_f16(isa, &sc, depth, GROUP, HD, &kv.values[0], depth, &mut out);
                black_box(&out);
            })
        });
        let mut scratch = vec![0.0f32; attention::scratch_len(GROUP, HD)];
        let h0 = head(&kv, 0);
        g.bench_function(BenchmarkId::new("decode_blocked", depth), |b| {
            b.iter(|| {
                attention::attend(isa, &h0, &qs, 0, depth, &mut scratch, &mut out);
                black_box(&out);
            })
        });
        // The same row over a Q8_0 cache of the same values.
        let q8 = q8_cache(&kv, depth);
        let hq = HeadKv {
            cache: q8.head(0, 0),
            positions: &kv.positions,
        };
        // The queries quantized once, as the forward pass does per attention task.
        let mut qbuf = attn::QueryQ8Buf::with_capacity(q.len());
        let qs8 = Queries {
            q8: Some(qbuf.quantize(isa, &q)),
            ..qs
        };
        g.bench_function(BenchmarkId::new("decode_blocked_q8_0", depth), |b| {
            b.iter(|| {
                attention::attend(isa, &hq, &qs8, 0, depth, &mut scratch, &mut out);
                black_box(&out);
            })
        });
        // Prefill tile: rows depth-4 .. depth-1, twelve query heads.
        let tq = vals(4 * GROUP * HD, 4, 2.0);
        let tpos: Vec<u32> = (depth as u32 - 4..depth as u32).collect();
        let ts = Queries {
            q: &tq,
            pos: &tpos,
            group: GROUP,
            hd: HD,
            scale: 0.125,
            window: u32::MAX,
            q8: None,
        };
        let mut tscratch = vec![0.0f32; attention::scratch_len(4 * GROUP, HD)];
        let mut tout = vec![0.0f32; 4 * GROUP * HD];
        g.throughput(Throughput::Elements(4 * depth as u64));
        g.bench_function(BenchmarkId::new("prefill_tile", depth), |b| {
            b.iter(|| {
                let (lo, hi) = attention::visible(&h0, &ts, true);
                attention::attend(isa, &h0, &ts, lo, hi, &mut tscratch, &mut tout);
                black_box(&tout);
            })
        });
        // One row of Qwen2.5's group of query heads over the same KV head.
        let gq = vals(QWEN_GROUP * HD, 5, 2.0);
        let gs = Queries {
            q: &gq,
            group: QWEN_GROUP,
            ..qs
        };
        let mut gscratch = vec![0.0f32; attention::scratch_len(QWEN_GROUP, HD)];
        let mut gout = vec![0.0f32; QWEN_GROUP * HD];
        g.throughput(Throughput::Elements(depth as u64));
        g.bench_function(BenchmarkId::new("group7", depth), |b| {
            b.iter(|| {
                attention::attend(isa, &h0, &gs, 0, depth, &mut gscratch, &mut gout);
                black_box(&gout);
            })
        });
    }
    g.finish();
}

/// One decode step of a layer (three KV heads) over `pool`: (head, chunk) tasks, then the
/// merges in chunk order.
fn layer_step(
    isa: quant::Isa,
    pool: &ThreadPool,
    kv: &Kv,
    qs: &[Queries<'_>],
    work: &[Mutex<Vec<f32>>],
    parts: &[Mutex<Vec<f32>>],
    out: &mut [f32],
) {
    let depth = kv.positions.len();
    let cr = attention::chunks(0, depth);
    let nch = cr.len();
    let next = std::sync::atomic::AtomicUsize::new(0);
    pool.run_dynamic(|w, _| {
        let mut sc = work[w].lock().unwrap_or_else(|e| e.into_inner());
        loop {
            let t = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            if t >= KV_HEADS * nch {
                break;
            }
            let (h, k) = (t / nch, t % nch);
            let mut p = parts[t].lock().unwrap_or_else(|e| e.into_inner());
            let kvh = head(kv, h);
            attention::chunk_state(isa, &kvh, &qs[h], cr.start + k, 0, depth, &mut sc, &mut p);
        }
    });
    let sl = attention::state_len(GROUP, HD);
    let mut acc = vec![0.0f32; sl];
    for h in 0..KV_HEADS {
        acc[..GROUP].fill(f32::NEG_INFINITY);
        acc[GROUP..].fill(0.0);
        for k in 0..nch {
            let p = parts[h * nch + k].lock().unwrap_or_else(|e| e.into_inner());
            attention::merge(GROUP, HD, &mut acc, &p);
        }
        attention::finish(
            GROUP,
            HD,
            &acc,
            &mut out[h * GROUP * HD..(h + 1) * GROUP * HD],
        );
    }
}

fn decode_layer(c: &mut Criterion) {
    let isa = isa();
    let mut g = c.benchmark_group("attention_long");
    for threads in [1usize, 2] {
        let pool = ThreadPool::new(threads);
        for depth in DEPTHS {
            let kv = kv(depth);
            let q: Vec<Vec<f32>> = (0..KV_HEADS)
                .map(|h| vals(GROUP * HD, 30 + h as u32, 2.0))
                .collect();
            let pos = [depth as u32 - 1];
            let qs: Vec<Queries<'_>> = q
                .iter()
                .map(|q| Queries {
                    q,
                    pos: &pos,
                    group: GROUP,
                    hd: HD,
                    scale: 0.125,
                    window: u32::MAX,
                    q8: None,
                })
                .collect();
            let nch = attention::chunks(0, depth).len();
            let work: Vec<Mutex<Vec<f32>>> = (0..threads)
                .map(|_| Mutex::new(vec![0.0f32; GROUP * BLOCK]))
                .collect();
            let parts: Vec<Mutex<Vec<f32>>> = (0..KV_HEADS * nch)
                .map(|_| Mutex::new(vec![0.0f32; attention::state_len(GROUP, HD)]))
                .collect();
            let mut out = vec![0.0f32; KV_HEADS * GROUP * HD];
            g.throughput(Throughput::Elements((KV_HEADS * depth) as u64));
            g.bench_function(
                BenchmarkId::new(format!("decode_layer/{threads}t"), depth),
                |b| {
                    b.iter(|| {
                        layer_step(isa, &pool, &kv, &qs, &work, &parts, &mut out);
                        black_box(&out);
                    })
                },
            );
        }
    }
    g.finish();
}

criterion_group!(benches, decode, decode_layer);
criterion_main!(benches);
