//! Criterion benchmarks of the runtime's kernels, one group per kernel family so that a
//! regression shows where it happens:
//!
//! - `matvec/<type>/<rows>x<cols>`: one activation row against a weight matrix per format and
//!   per shape of the reference model (Q, K/V, FFN up/gate, FFN down, output head), one
//!   thread, throughput in weight bytes;
//!   `Q4_1r` rows run the Q4_1 matrices repacked as the model does at load on a tier that
//!   repacks them (`quant::repack`; absent where the tier reads the ggml rows);
//! - `matvec_dram/q4_1`: the same kernel streaming 128 MiB of weights (larger than the LLC)
//!   from memory, one and two threads; `matvec_dram/q5_0` the same for Q5_0 at Qwen2.5's FFN
//!   gate/up shape, `q4_k` and `q6_k` at its FFN down shape; `q4_1r` and `q5_0r` both
//!   repacked (throughput in ggml bytes);
//! - `gemm/q4_1/...`: batched-decode (8 activation rows) and prefill tiles (64 rows), and
//!   `gemm/q4_1r/...` the same repacked;
//! - `matvec_k/<type>/<rows>x<cols>` and `gemm_k/<type>/...`: the five-bit and K-quant
//!   formats at the shapes of the Qwen2.5-0.5B and Gemma 3 270M matrices that carry them
//!   (Q5_0: 4864x896, 896x896, 2048x640, 1024x640, and Qwen2.5's keys 128x896; K-quants:
//!   FFN down 896x4864 and 640x2048, Gemma's attention output 640x1024), one row, and prefill tiles of 64 rows (Q4_K and Q6_K
//!   at both FFN down shapes, Q5_0 at 4864x896 and 2048x640, the others at the first shape),
//!   and prompts of 512 rows at the first shape for Q4_K, Q6_K and Q5_0;
//!   `Q5_0r` rows run the same Q5_0 matrices repacked as the model does at load on a tier
//!   that repacks them (`quant::repack`; absent where the tier reads the ggml rows);
//! - `matvec_head/Q8_0/...`: the Q8_0 output heads of Qwen2.5 (151936x896) and Gemma 3
//!   (262144x640), one row streamed from memory; `Q8_0r` Qwen2.5's in block lanes, copied as
//!   the model copies it at load on a tier that does;
//! - `gemm_head/<Q8_0|Q8_0r>/<n>x16384x896`: a slice of Qwen2.5's head (15 MB) against one
//!   and eight activation rows, from the file's rows and from the block-lane copy;
//! - `attention/...`: scores, softmax and value sums of one KV head (3 query heads) at
//!   several context lengths;
//! - `rmsnorm_quantize/...`: RMSNorm fused with activation quantization of one row (Q8_1
//!   blocks, and Q8_K for the K-quants);
//! - `gelu_mul/<tier>/<n>`: Gemma 3's GeGLU gate over one FFN row (2048) and a 64-row prefill
//!   tile, on the scalar reference tier and on the selected tier (throughput in elements).
//!
//! Run with `cargo bench -p pocketperf-runtime --bench kernels` (`POCKETPERF_ISA` selects the
//! tier).

use criterion::measurement::WallTime;
use criterion::{
    BenchmarkGroup, BenchmarkId, Criterion, Throughput, criterion_group, criterion_main,
};
use half::f16;
use pocketperf_runtime::GgmlType;
use pocketperf_runtime::pool::ThreadPool;
use pocketperf_runtime::quant::{self, QuantizedActs, WeightMatrix, act, attn};
use std::hint::black_box;

fn isa() -> quant::Isa {
    quant::isa_from_env().unwrap_or_else(|_| quant::detect_best())
}

/// Pseudo-random weight bytes of `ty` with small finite scales.
fn weights(ty: GgmlType, rows: usize, cols: usize) -> Vec<u8> {
    let bytes = ty.row_bytes(cols as u64).unwrap_or(0) as usize * rows;
    // Offsets of the f16 scale fields in one block (ggml-common.h).
    let (bb, halves): (usize, &[usize]) = match ty {
        GgmlType::Q4_0 | GgmlType::Q5_0 | GgmlType::Q8_0 => (ty.block_bytes(), &[0]),
        GgmlType::Q4_1 | GgmlType::Q5_1 | GgmlType::Q4K | GgmlType::Q5K => {
            (ty.block_bytes(), &[0, 2])
        }
        GgmlType::Q2K => (84, &[80, 82]),
        GgmlType::Q3K => (110, &[108]),
        GgmlType::Q6K => (210, &[208]),
        _ => (0, &[]),
    };
    let mut x = 0x1234_5678u32;
    let mut v: Vec<u8> = (0..bytes)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 17;
            x ^= x << 5;
            x as u8
        })
        .collect();
    if bb > 0 {
        for b in v.chunks_exact_mut(bb) {
            for &o in halves {
                b[o..o + 2].copy_from_slice(&f16::from_f32(0.01).to_le_bytes());
            }
        }
    } else if ty == GgmlType::F16 {
        for b in v.chunks_exact_mut(2) {
            b.copy_from_slice(&f16::from_f32(0.01).to_le_bytes());
        }
    }
    v
}

fn acts(n: usize, cols: usize) -> Vec<f32> {
    (0..n * cols)
        .map(|i| ((i * 7919) % 1000) as f32 / 500.0 - 1.0)
        .collect()
}

/// `n` rows of [`acts`] quantized for `ty` weights on tier `isa`.
fn quantized(isa: quant::Isa, ty: GgmlType, n: usize, cols: usize) -> QuantizedActs {
    let mut qa = QuantizedActs::new(n, cols);
    qa.quantize_for(isa, ty, &acts(n, cols), n, cols);
    qa
}

/// Benches `w` against the `n` activation rows of `qa` as `<type>/<id>` and, where tier `isa`
/// copies it into a layout of its own at load (`quant::repack`; not a copy of the ggml rows,
/// which is not a kernel of its own), the copy as `<type>r/<id>`.
#[allow(clippy::too_many_arguments)]
fn bench_with_copy(
    g: &mut BenchmarkGroup<'_, WallTime>,
    pool: &ThreadPool,
    isa: quant::Isa,
    w: WeightMatrix<'_>,
    qa: &QuantizedActs,
    n: usize,
    id: &str,
    y: &mut [f32],
) {
    g.bench_function(BenchmarkId::new(w.ty.name(), id), |b| {
        b.iter(|| quant::matmul(pool, isa, &w, qa, n, black_box(&mut *y)))
    });
    if let Some(r) = quant::repack(isa, &w).unwrap().filter(|r| !r.ggml_layout()) {
        let w = w.with_repacked(&r);
        g.bench_function(BenchmarkId::new(format!("{}r", w.ty.name()), id), |b| {
            b.iter(|| quant::matmul(pool, isa, &w, qa, n, black_box(&mut *y)))
        });
    }
}

fn matvec(c: &mut Criterion) {
    let isa = isa();
    let pool = ThreadPool::new(1);
    let mut g = c.benchmark_group("matvec");
    let shapes = [
        (576, 576),
        (192, 576),
        (1536, 576),
        (576, 1536),
        (49152, 576),
    ];
    for ty in [
        GgmlType::Q4_1,
        GgmlType::Q4_0,
        GgmlType::Q8_0,
        GgmlType::F16,
    ] {
        for (rows, cols) in shapes {
            let wb = weights(ty, rows, cols);
            let w = WeightMatrix::new(ty, rows, cols, &wb).unwrap();
            let qa = quantized(isa, ty, 1, cols);
            let mut y = vec![0.0f32; rows];
            g.throughput(Throughput::Bytes(wb.len() as u64));
            // Q4_1 repacked as the engine repacks it on a tier that does.
            let id = format!("{rows}x{cols}");
            bench_with_copy(&mut g, &pool, isa, w, &qa, 1, &id, &mut y);
        }
    }
    g.finish();
}

fn matvec_dram(c: &mut Criterion) {
    let isa = isa();
    let mut g = c.benchmark_group("matvec_dram");
    g.sample_size(20);
    // SmolLM2's FFN gate/up shape, and Qwen2.5's: the decode streams these from memory.
    dram_rows(&mut g, isa, GgmlType::Q4_1, 1536, 576, "q4_1");
    dram_rows(&mut g, isa, GgmlType::Q5_0, 4864, 896, "q5_0");
    // The K-quant FFN down matrices of Qwen2.5's Q4_K_M file (Q4_K and Q6_K).
    dram_rows(&mut g, isa, GgmlType::Q4K, 896, 4864, "q4_k");
    dram_rows(&mut g, isa, GgmlType::Q6K, 896, 4864, "q6_k");
    g.finish();
}

/// `ty` streamed from memory, one and two threads: enough distinct `rows × cols` matrices to
/// exceed any last-level cache (128 MiB), as the ggml rows (`name`) and, on a tier that
/// repacks `ty`, as the copies the engine makes (`quant::repack_all`: one mapping on huge
/// pages, in the order they are read; `name` + `r`). Throughput in ggml bytes.
fn dram_rows(
    g: &mut criterion::BenchmarkGroup<'_, criterion::measurement::WallTime>,
    isa: quant::Isa,
    ty: GgmlType,
    rows: usize,
    cols: usize,
    name: &str,
) {
    let one = weights(ty, rows, cols);
    let copies = (128usize << 20).div_ceil(one.len());
    let all: Vec<u8> = (0..copies).flat_map(|_| one.iter().copied()).collect();
    let mats: Vec<WeightMatrix<'_>> = all
        .chunks_exact(one.len())
        .map(|m| WeightMatrix::new(ty, rows, cols, m).unwrap())
        .collect();
    let repacked: Vec<quant::Repacked> = quant::repack_all(isa, &mats, |_, _| {})
        .unwrap()
        .into_iter()
        .flatten()
        .collect();
    let qa = quantized(isa, ty, 1, cols);
    let mut y = vec![0.0f32; rows];
    g.throughput(Throughput::Bytes(all.len() as u64));
    for threads in [1, 2] {
        let pool = ThreadPool::new(threads);
        g.bench_function(BenchmarkId::new(name, format!("{threads}t")), |b| {
            b.iter(|| {
                for w in &mats {
                    quant::matmul(&pool, isa, w, &qa, 1, black_box(&mut y));
                }
            })
        });
        if repacked.len() == mats.len() {
            let name = format!("{name}r");
            g.bench_function(BenchmarkId::new(name, format!("{threads}t")), |b| {
                b.iter(|| {
                    for (w, r) in mats.iter().zip(&repacked) {
                        let w = w.with_repacked(r);
                        quant::matmul(&pool, isa, &w, &qa, 1, black_box(&mut y));
                    }
                })
            });
        }
    }
}

fn gemm(c: &mut Criterion) {
    let isa = isa();
    let pool = ThreadPool::new(1);
    let mut g = c.benchmark_group("gemm");
    // 8 rows: an Offline batched-decode pass; 64: a prefill chunk.
    for (n, rows, cols) in [
        (8, 1536, 576),
        (8, 576, 1536),
        (64, 1536, 576),
        (64, 576, 1536),
    ] {
        let ty = GgmlType::Q4_1;
        let wb = weights(ty, rows, cols);
        let w = WeightMatrix::new(ty, rows, cols, &wb).unwrap();
        let qa = quantized(isa, ty, n, cols);
        let mut y = vec![0.0f32; n * rows];
        g.throughput(Throughput::Elements((n * rows * cols) as u64));
        g.bench_function(
            BenchmarkId::new("q4_1", format!("{n}x{rows}x{cols}")),
            |b| b.iter(|| quant::matmul(&pool, isa, &w, &qa, n, black_box(&mut y))),
        );
        if let Some(r) = quant::repack(isa, &w).unwrap() {
            let w = w.with_repacked(&r);
            g.bench_function(
                BenchmarkId::new("q4_1r", format!("{n}x{rows}x{cols}")),
                |b| b.iter(|| quant::matmul(&pool, isa, &w, &qa, n, black_box(&mut y))),
            );
        }
    }
    g.finish();
}

/// The five-bit and K-quant formats, with the matrix shapes (rows x cols) that carry them in
/// the reference models.
fn new_formats() -> Vec<(GgmlType, Vec<(usize, usize)>)> {
    let q5 = vec![(4864, 896), (896, 896), (2048, 640), (1024, 640)];
    let k = vec![(896, 4864), (640, 2048), (640, 1024)];
    // Qwen2.5's attention keys too: a small matrix, where a kernel's per-call work shows.
    let q5_0 = [q5.clone(), vec![(128, 896)]].concat();
    vec![
        (GgmlType::Q5_0, q5_0),
        (GgmlType::Q5_1, q5),
        (GgmlType::Q4K, k.clone()),
        (GgmlType::Q6K, k.clone()),
        (GgmlType::Q2K, k.clone()),
        (GgmlType::Q3K, k.clone()),
        (GgmlType::Q5K, k),
    ]
}

fn matvec_k(c: &mut Criterion) {
    let isa = isa();
    let pool = ThreadPool::new(1);
    let mut g = c.benchmark_group("matvec_k");
    for (ty, shapes) in new_formats() {
        for (rows, cols) in shapes {
            let wb = weights(ty, rows, cols);
            let w = WeightMatrix::new(ty, rows, cols, &wb).unwrap();
            let qa = quantized(isa, ty, 1, cols);
            let mut y = vec![0.0f32; rows];
            g.throughput(Throughput::Bytes(wb.len() as u64));
            let id = format!("{rows}x{cols}");
            bench_with_copy(&mut g, &pool, isa, w, &qa, 1, &id, &mut y);
        }
    }
    g.finish();
}

/// The output heads of the Q4_K_M catalog models (Q8_0; Qwen2.5's 151936 x 896 and Gemma 3's
/// tied 262144 x 640 embedding), one activation row, one thread: 136 and 178 MB of weights,
/// beyond the last-level cache of a phone, so this measures the streaming rate of the kernel.
fn matvec_head(c: &mut Criterion) {
    let isa = isa();
    let pool = ThreadPool::new(1);
    let mut g = c.benchmark_group("matvec_head");
    g.sample_size(10);
    let ty = GgmlType::Q8_0;
    for (rows, cols) in [(151936usize, 896usize), (262144, 640)] {
        let wb = weights(ty, rows, cols);
        let w = WeightMatrix::new(ty, rows, cols, &wb).unwrap();
        let qa = quantized(isa, ty, 1, cols);
        let mut y = vec![0.0f32; rows];
        g.throughput(Throughput::Bytes(wb.len() as u64));
        // Qwen2.5's head in block lanes, as the engine copies it on a tier that does.
        let id = format!("{rows}x{cols}");
        bench_with_copy(&mut g, &pool, isa, w, &qa, 1, &id, &mut y);
    }
    g.finish();
}

/// Q8_0 at Qwen2.5's head width (a 16,384-row slice of its 151,936 rows, 15 MB) against one
/// and eight activation rows (a decode step, an Offline batched-decode pass), from the file's
/// rows and, where the tier makes one, from the block-lane copy: the head's compute.
fn gemm_head(c: &mut Criterion) {
    let isa = isa();
    let pool = ThreadPool::new(1);
    let mut g = c.benchmark_group("gemm_head");
    g.sample_size(20);
    let (ty, rows, cols) = (GgmlType::Q8_0, 16384usize, 896usize);
    let wb = weights(ty, rows, cols);
    let w = WeightMatrix::new(ty, rows, cols, &wb).unwrap();
    for n in [1usize, 8] {
        let qa = quantized(isa, ty, n, cols);
        let mut y = vec![0.0f32; n * rows];
        g.throughput(Throughput::Elements((n * rows * cols) as u64));
        let id = format!("{n}x{rows}x{cols}");
        bench_with_copy(&mut g, &pool, isa, w, &qa, n, &id, &mut y);
    }
    g.finish();
}

fn gemm_k(c: &mut Criterion) {
    let isa = isa();
    let pool = ThreadPool::new(1);
    let mut g = c.benchmark_group("gemm_k");
    for (ty, shapes) in new_formats() {
        // The Q4_K_M FFN down types at both models' shapes, Q5_0 at Qwen2.5's FFN shape and
        // Gemma 3's (FFN gate/up, 640 wide), the others at the first; a 512-row prompt too at
        // Qwen2.5's shape for Q4_K, Q6_K and Q5_0 (activations larger than a core's L2).
        let pick: &[(usize, usize)] = match ty {
            GgmlType::Q4K | GgmlType::Q6K => &[(0, 64), (0, 512), (1, 64)],
            GgmlType::Q5_0 => &[(0, 64), (0, 512), (2, 64)],
            _ => &[(0, 64)],
        };
        for &(i, n) in pick {
            let (rows, cols) = shapes[i];
            let wb = weights(ty, rows, cols);
            let w = WeightMatrix::new(ty, rows, cols, &wb).unwrap();
            let qa = quantized(isa, ty, n, cols);
            let mut y = vec![0.0f32; n * rows];
            g.throughput(Throughput::Elements((n * rows * cols) as u64));
            let id = format!("{n}x{rows}x{cols}");
            bench_with_copy(&mut g, &pool, isa, w, &qa, n, &id, &mut y);
        }
    }
    g.finish();
}

fn attention(c: &mut Criterion) {
    let isa = isa();
    let (hd, nq) = (64, 3);
    let mut g = c.benchmark_group("attention");
    for ctx in [128usize, 512, 2048] {
        let ld = ctx.next_multiple_of(16);
        let q = acts(nq, hd);
        let k: Vec<f16> = acts(ctx, hd).iter().map(|&v| f16::from_f32(v)).collect();
        let v: Vec<f16> = acts(ctx, hd)
            .iter()
            .map(|&v| f16::from_f32(v * 0.5))
            .collect();
        let mut sc = vec![0.0f32; nq * ld];
        let mut out = vec![0.0f32; nq * hd];
        g.throughput(Throughput::Elements((ctx * nq) as u64));
        g.bench_function(BenchmarkId::new("head3", ctx), |b| {
            b.iter(|| {
                attn::scores_f16(isa, &q, nq, hd, &k, ctx, 0.125, &mut sc, ld);
                for h in 0..nq {
                    let row = &mut sc[h * ld..h * ld + ctx];
                    let mx = row.iter().copied().fold(f32::NEG_INFINITY, f32::max);
                    let s = attn::exp_shifted(isa, row, mx);
                    row.iter_mut().for_each(|x| *x /= s);
                }
                out.fill(0.0);
                attn::accum_f16(isa, &sc, ld, nq, hd, &v, ctx, black_box(&mut out));
            })
        });
    }
    g.finish();
}

fn rmsnorm_quantize(c: &mut Criterion) {
    let isa = isa();
    let mut g = c.benchmark_group("rmsnorm_quantize");
    for (ty, cols) in [
        (GgmlType::Q4_1, 576usize),
        (GgmlType::Q4_1, 1536),
        (GgmlType::Q4K, 2048),
        (GgmlType::Q4K, 4864),
    ] {
        let x = acts(1, cols);
        let w: Vec<f32> = (0..cols).map(|i| 1.0 + (i % 5) as f32 * 0.1).collect();
        let mut qa = QuantizedActs::new(1, cols);
        g.throughput(Throughput::Elements(cols as u64));
        let name = if ty == GgmlType::Q4K { "q8_k" } else { "q4_1" };
        g.bench_function(BenchmarkId::new(name, cols), |b| {
            b.iter(|| {
                let s = quant::rms_scale(isa, &x, 1e-5);
                let mut wr = qa.prepare(isa, ty, 1, cols);
                wr.row(0, black_box(&x), Some((s, &w)));
            })
        });
    }
    g.finish();
}

fn gelu_mul(c: &mut Criterion) {
    let mut g = c.benchmark_group("gelu_mul");
    for isa in [quant::Isa::Scalar, isa()] {
        for n in [2048usize, 64 * 2048] {
            // Gate values of a model's range (about ±4) and an up row.
            let x: Vec<f32> = acts(1, n).iter().map(|v| v * 8.0).collect();
            let u = acts(1, n);
            let mut y = x.clone();
            g.throughput(Throughput::Elements(n as u64));
            g.bench_function(BenchmarkId::new(isa.to_string(), n), |b| {
                b.iter(|| {
                    y.copy_from_slice(&x);
                    act::gelu_mul(isa, black_box(&mut y), &u);
                })
            });
        }
    }
    g.finish();
}

criterion_group!(
    benches,
    matvec,
    matvec_dram,
    gemm,
    matvec_k,
    matvec_head,
    gemm_head,
    gemm_k,
    attention,
    rmsnorm_quantize,
    gelu_mul
);
criterion_main!(benches);
