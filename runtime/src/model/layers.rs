//! Operations shared by every family: pool jobs (chunked matrix products, fused RMSNorm and
//! activation quantization), scratch views for workers, softmax, and the scalar reference
//! forms of RMSNorm (Zhang & Sennrich 2019), RoPE (Su et al. 2021; adjacent-pair and NeoX
//! layouts) and SiLU; GELU (tanh form) is [`crate::quant::act`].

use super::config::{FfnAct, RopeLayout};
use crate::GgmlType;
use crate::pool::ThreadPool;
use crate::quant::{self, Isa, OutRows, QuantizedActs, WeightMatrix, act, attn};

use super::pass_io::Counters;

/// A raw view of a scratch vector that pool workers write in disjoint ranges.
#[derive(Clone, Copy)]
pub(super) struct Shared {
    ptr: *mut f32,
    len: usize,
}
// SAFETY: only used to hand disjoint ranges of a buffer to pool workers, which finish before
// `ThreadPool::run` returns; the buffer outlives the job.
unsafe impl Send for Shared {}
// SAFETY: see above.
unsafe impl Sync for Shared {}

impl Shared {
    pub(super) fn new(v: &mut [f32]) -> Self {
        Shared {
            ptr: v.as_mut_ptr(),
            len: v.len(),
        }
    }

    /// # Safety
    /// No other thread accesses `[off, off + len)` while the slice lives.
    #[allow(clippy::mut_from_ref)]
    pub(super) unsafe fn slice(&self, off: usize, len: usize) -> &mut [f32] {
        assert!(
            off + len <= self.len,
            "scratch range {off}+{len} of {}",
            self.len
        );
        // SAFETY: in bounds (checked); exclusivity is the caller's.
        unsafe { std::slice::from_raw_parts_mut(self.ptr.add(off), len) }
    }

    /// An output view of `rows × cols` with row stride `stride`.
    pub(super) fn out(&self, rows: usize, cols: usize, stride: usize, accumulate: bool) -> OutRows {
        // SAFETY: the view lies inside the buffer (checked by `from_raw`); workers write
        // disjoint weight-row ranges of it.
        unsafe { OutRows::from_raw(self.ptr, self.len, rows, cols, stride, accumulate) }
    }
}

fn gcd(a: usize, b: usize) -> usize {
    if b == 0 { a } else { gcd(b, a % b) }
}

pub(super) fn lcm(a: usize, b: usize) -> usize {
    a / gcd(a, b).max(1) * b
}

/// Runs `f(row)` for rows `0..n`: on the calling thread for a few rows, split over the pool
/// otherwise.
pub(super) fn par_rows(pool: &ThreadPool, n: usize, f: impl Fn(usize) + Sync) {
    if n < 8 || pool.n_threads() == 1 {
        (0..n).for_each(f);
        return;
    }
    pool.run_chunks(n, n.div_ceil(2 * pool.n_threads()), |lo, hi| {
        (lo..hi).for_each(&f)
    });
}

/// `y (+)= w · x` over the pool in row chunks (rows a multiple of `align`).
pub(super) fn matmul_job(
    pool: &ThreadPool,
    isa: Isa,
    w: &WeightMatrix<'_>,
    x: &QuantizedActs,
    n: usize,
    out: OutRows,
    counters: &mut Counters,
) {
    let chunk = quant::chunk_size(w.rows, pool.n_threads(), 4);
    pool.run_chunks(w.rows, chunk, |r0, r1| {
        // SAFETY: chunks are disjoint weight-row ranges, so workers write disjoint outputs.
        unsafe { quant::matmul_rows(isa, w, x, n, r0, r1, out) }
    });
    counters.matmuls += 1;
    counters.weight_bytes_read += w.bytes_read() as u64;
}

/// RMSNorm of rows `0..n` of `x` (each `width` wide) fused with their quantization for
/// weights of type `ty`.
#[allow(clippy::too_many_arguments)]
pub(super) fn norm_quantize(
    pool: &ThreadPool,
    isa: Isa,
    x: &[f32],
    n: usize,
    width: usize,
    g: &[f32],
    eps: f32,
    acts: &mut QuantizedActs,
    ty: GgmlType,
) {
    let w = acts.prepare(isa, ty, n, width);
    par_rows(pool, n, |a| {
        let xr = &x[a * width..(a + 1) * width];
        let s = quant::rms_scale(isa, xr, eps);
        // SAFETY: each row is written by exactly one call.
        unsafe { w.write_cols(a, 0, xr, Some((s, g))) };
    });
}

/// Quantizes rows `0..n` of `x` for weights of type `ty`.
pub(super) fn quantize_rows(
    pool: &ThreadPool,
    isa: Isa,
    x: &[f32],
    n: usize,
    width: usize,
    acts: &mut QuantizedActs,
    ty: GgmlType,
) {
    let w = acts.prepare(isa, ty, n, width);
    par_rows(pool, n, |a| {
        // SAFETY: each row is written by exactly one call.
        unsafe { w.write_cols(a, 0, &x[a * width..(a + 1) * width], None) };
    });
}

/// RMSNorm of each `width`-long row of `x`, times `w`, into `out`. Sum of squares in f64.
pub fn rms_norm(x: &[f32], w: &[f32], eps: f32, out: &mut [f32], width: usize) {
    for (row, o) in x.chunks_exact(width).zip(out.chunks_exact_mut(width)) {
        let ss: f64 = row.iter().map(|&v| (v as f64) * (v as f64)).sum();
        let scale = 1.0 / ((ss / width as f64) as f32 + eps).sqrt();
        for ((d, &v), &g) in o.iter_mut().zip(row).zip(w) {
            *d = v * scale * g;
        }
    }
}

/// SiLU, x·σ(x) (with [`crate::quant::attn::exp`], as the scalar SwiGLU kernel).
pub fn silu(x: f32) -> f32 {
    x / (1.0 + crate::quant::attn::exp(-x))
}

/// Rotates one head vector in place with precomputed cos/sin of each frequency.
pub fn rope(x: &mut [f32], cos: &[f32], sin: &[f32], layout: RopeLayout) {
    let half = cos.len();
    match layout {
        RopeLayout::Normal => {
            for j in 0..half {
                let (a, b) = (x[2 * j], x[2 * j + 1]);
                x[2 * j] = a * cos[j] - b * sin[j];
                x[2 * j + 1] = a * sin[j] + b * cos[j];
            }
        }
        RopeLayout::Neox => {
            for j in 0..half {
                let (a, b) = (x[j], x[j + half]);
                x[j] = a * cos[j] - b * sin[j];
                x[j + half] = a * sin[j] + b * cos[j];
            }
        }
    }
}

/// `g = act(g) · u`, elementwise.
pub(super) fn gated_act(isa: Isa, act: FfnAct, g: &mut [f32], u: &[f32]) {
    match act {
        FfnAct::Silu => attn::silu_mul(isa, g, u),
        FfnAct::GeluTanh => act::gelu_mul(isa, g, u),
    }
}

/// In-place RMSNorm of one vector with gains `w` (sum of squares in f64, as ggml).
pub(super) fn rms_norm_inplace(x: &mut [f32], w: &[f32], eps: f32) {
    let ss: f64 = x.iter().map(|&v| (v as f64) * (v as f64)).sum();
    let scale = 1.0 / ((ss / x.len() as f64) as f32 + eps).sqrt();
    for (v, &g) in x.iter_mut().zip(w) {
        *v = *v * scale * g;
    }
}

/// `x[row] += rmsnorm(y[row]) · w` for rows `0..n` of width `width` (a post-norm residual).
#[allow(clippy::too_many_arguments)]
pub(super) fn norm_add(
    pool: &ThreadPool,
    x: &mut [f32],
    y: &mut [f32],
    n: usize,
    width: usize,
    w: &[f32],
    eps: f32,
) {
    let (xs, ys) = (Shared::new(x), Shared::new(y));
    par_rows(pool, n, |a| {
        // SAFETY: each row of x and y belongs to exactly one call.
        let (xr, yr) = unsafe { (xs.slice(a * width, width), ys.slice(a * width, width)) };
        rms_norm_inplace(yr, w, eps);
        for (d, s) in xr.iter_mut().zip(yr.iter()) {
            *d += s;
        }
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rms_norm_matches_closed_form() {
        let x = [3.0f32, 4.0];
        let w = [1.0f32, 2.0];
        let mut o = [0.0f32; 2];
        rms_norm(&x, &w, 0.0, &mut o, 2);
        let r = (12.5f32).sqrt();
        assert!((o[0] - 3.0 / r).abs() < 1e-6);
        assert!((o[1] - 8.0 / r).abs() < 1e-6);
    }

    #[test]
    fn rope_rotates_pairs_by_angle() {
        let th = 0.3f32;
        let mut x = [1.0f32, 0.0, 0.0, 2.0];
        rope(
            &mut x,
            &[th.cos(), 1.0],
            &[th.sin(), 0.0],
            RopeLayout::Normal,
        );
        assert!((x[0] - th.cos()).abs() < 1e-6 && (x[1] - th.sin()).abs() < 1e-6);
        assert_eq!(&x[2..], &[0.0, 2.0]);
        let mut y = [1.0f32, 0.0, 0.0, 2.0];
        rope(&mut y, &[th.cos(), 1.0], &[th.sin(), 0.0], RopeLayout::Neox);
        // pairs (0,2) and (1,3)
        assert!((y[0] - th.cos()).abs() < 1e-6 && (y[2] - th.sin()).abs() < 1e-6);
        assert_eq!((y[1], y[3]), (0.0, 2.0));
    }

    #[test]
    fn silu_values() {
        assert_eq!(silu(0.0), 0.0);
        assert!((silu(1.0) - 1.0 / (1.0 + (-1.0f32).exp())).abs() < 1e-7);
    }
}
