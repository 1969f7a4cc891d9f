use half::f16;
use pocketperf_runtime::GgmlType;
use pocketperf_runtime::pool::ThreadPool;
use pocketperf_runtime::quant::{self, QuantizedActs, WeightMatrix};

fn cpu_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

fn main() {
    let isa = quant::detect_best();
    let pool = ThreadPool::new(1);
    for (ty, bb) in [(GgmlType::Q4_1, 20usize), (GgmlType::Q8_0, 34)] {
        for (rows, cols, n) in [
            (576usize, 576usize, 1usize),
            (1536, 576, 1),
            (576, 1536, 1),
            (1536, 576, 64),
            (576, 1536, 64),
        ] {
            let nb = cols / 32;
            let mut w = vec![0u8; rows * nb * bb];
            let mut x = 1u32;
            for b in w.iter_mut() {
                x ^= x << 13;
                x ^= x >> 17;
                x ^= x << 5;
                *b = x as u8;
            }
            for blk in w.chunks_exact_mut(bb) {
                blk[0..2].copy_from_slice(&f16::from_f32(0.01).to_le_bytes());
                if bb == 20 {
                    blk[2..4].copy_from_slice(&f16::from_f32(0.01).to_le_bytes());
                }
            }
            let m = WeightMatrix::new(ty, rows, cols, &w).unwrap();
            let a: Vec<f32> = (0..n * cols).map(|i| (i % 17) as f32 - 8.0).collect();
            let mut qa = QuantizedActs::new(n, cols);
            qa.quantize_for(isa, ty, &a, n, cols);
            let mut y = vec![0.0f32; n * rows];
            for _ in 0..50 {
                quant::matmul(&pool, isa, &m, &qa, n, &mut y);
            }
            let iters = (20_000_000 / (rows * cols * n)).max(20);
            let t0 = cpu_ns();
            for _ in 0..iters {
                quant::matmul(&pool, isa, &m, &qa, n, std::hint::black_box(&mut y));
            }
            let ns = (cpu_ns() - t0) as f64 / iters as f64;
            let groups = (rows * nb.div_ceil(4) * n) as f64;
            println!(
                "{ty} {rows}x{cols} n={n}: {:.1} us cpu, {:.2} ns per (row,act,group) = {:.1} cycles@2GHz, {:.2} GB/s weights",
                ns / 1e3,
                ns / groups,
                2.0 * ns / groups,
                w.len() as f64 / ns
            );
        }
    }
}
