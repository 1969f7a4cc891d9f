//! The matrix products the forward pass calls: the output view ([`OutRows`]), the row-range
//! product pool workers share out ([`matmul_rows`], [`matmul_span`]) with the tile paths it
//! tries first (the AVX-512 K-quant prefill tile, the AVX2 eight-row decode), and the pooled
//! whole product ([`matmul`]).

use super::{ActLayout, Isa, QuantizedActs, WeightMatrix, dot_unchecked, dot4_unchecked, resolve};
#[cfg(target_arch = "x86_64")]
use super::{ActRow, BlockQ8K, QK_K, avx2, avx2_dec, avx2_k, avx2_kt, avx512_kgemm};
#[cfg(target_arch = "x86_64")]
use super::{QK, Tier, gemm512};
use crate::GgmlType;
use crate::pool::ThreadPool;

/// Where a matrix product writes: element (activation row `a`, weight row `r`) lives at
/// `ptr[a * stride + r]`; with `accumulate` the product is added to what is there.
#[derive(Clone, Copy, Debug)]
pub struct OutRows {
    ptr: *mut f32,
    stride: usize,
    rows: usize,
    cols: usize,
    accumulate: bool,
}

// SAFETY: an `OutRows` is a view that pool workers share to write disjoint elements (disjoint
// weight-row ranges); `matmul_rows`'s contract makes the disjointness the caller's duty.
unsafe impl Send for OutRows {}
// SAFETY: see above.
unsafe impl Sync for OutRows {}

impl OutRows {
    /// A view of `y` as `rows` activation rows of `cols` outputs, `stride` apart.
    ///
    /// # Panics
    /// If `y` is too short.
    pub fn new(y: &mut [f32], rows: usize, cols: usize, stride: usize, accumulate: bool) -> Self {
        assert!(
            stride >= cols && (rows == 0 || y.len() >= (rows - 1) * stride + cols),
            "output view {rows}x{cols} (stride {stride}) over {} values",
            y.len()
        );
        OutRows {
            ptr: y.as_mut_ptr(),
            stride,
            rows,
            cols,
            accumulate,
        }
    }

    /// A view of `len` floats at `ptr` as `rows` activation rows of `cols` outputs.
    ///
    /// # Safety
    /// `ptr` is valid for reads and writes of `len` floats for as long as the view is used,
    /// and writes through the view never overlap concurrent accesses by others.
    ///
    /// # Panics
    /// If the view does not fit in `len`.
    pub unsafe fn from_raw(
        ptr: *mut f32,
        len: usize,
        rows: usize,
        cols: usize,
        stride: usize,
        accumulate: bool,
    ) -> Self {
        assert!(
            stride >= cols && (rows == 0 || len >= (rows - 1) * stride + cols),
            "output view {rows}x{cols} (stride {stride}) over {len} values"
        );
        OutRows {
            ptr,
            stride,
            rows,
            cols,
            accumulate,
        }
    }

    /// The view of activation rows `a0..` of this one (row `a0` becomes row 0).
    ///
    /// # Safety
    /// `a0 <= rows`.
    #[cfg(target_arch = "x86_64")]
    pub(crate) unsafe fn skip(self, a0: usize) -> Self {
        debug_assert!(a0 <= self.rows);
        OutRows {
            // SAFETY: row a0 starts inside (or one past the end of) the viewed buffer.
            ptr: unsafe { self.ptr.add(a0 * self.stride) },
            rows: self.rows - a0,
            ..self
        }
    }

    /// # Safety
    /// `a < rows`, `r < cols`, and no other thread touches this element concurrently.
    #[inline(always)]
    pub(crate) unsafe fn put(self, a: usize, r: usize, v: f32) {
        debug_assert!(a < self.rows && r < self.cols);
        // SAFETY: in bounds by the caller's contract and the check in `new`.
        unsafe {
            let p = self.ptr.add(a * self.stride + r);
            if self.accumulate { *p += v } else { *p = v }
        }
    }
}

/// The activation layout that weights of type `ty` multiply with on tier `isa` (`None` for a
/// type without a kernel). Matrices whose layouts agree can share one quantized input.
pub fn act_layout(isa: Isa, ty: GgmlType) -> Option<ActLayout> {
    ActLayout::choose(resolve(isa), ty)
}

/// Weight rows `r0..r1` of `y = w · xᵀ` for the first `n` activation rows of `x`: writes
/// `out[a][r]` for `a < n`, `r0 <= r < r1`. Allocates nothing.
///
/// # Safety
/// No other thread writes `out` at these indices concurrently (pool workers take disjoint
/// row ranges), and `out` outlives the call.
///
/// # Panics
/// If `x` was not quantized for `w` on this tier, holds fewer than `n` rows, the range is out
/// of bounds, or `out` is too small.
pub unsafe fn matmul_rows(
    isa: Isa,
    w: &WeightMatrix<'_>,
    x: &QuantizedActs,
    n: usize,
    r0: usize,
    r1: usize,
    out: OutRows,
) {
    // SAFETY: forwarded contract.
    unsafe { matmul_span(isa, w, x, 0, n, r0, r1, out) }
}

/// [`matmul_rows`] for activation rows `a0..a1` only: writes `out[a][r]` for `a0 <= a < a1`,
/// `r0 <= r < r1`, with the same bits as the full call gives those elements (the arithmetic
/// of one (weight row, activation row) pair does not depend on which rows share its tile).
/// A caller that works on a block of activation rows at a time (the feed-forward gate)
/// keeps the block's outputs in cache for what it does next with them.
///
/// # Safety
/// As [`matmul_rows`].
///
/// # Panics
/// As [`matmul_rows`], with `a1` in place of `n`, and if `a0 > a1`.
#[allow(clippy::too_many_arguments)]
pub unsafe fn matmul_span(
    isa: Isa,
    w: &WeightMatrix<'_>,
    x: &QuantizedActs,
    a0: usize,
    a1: usize,
    r0: usize,
    r1: usize,
    out: OutRows,
) {
    let tier = resolve(isa);
    assert_eq!(
        ActLayout::choose(tier, w.ty),
        Some(x.layout()),
        "matmul: activations laid out as {:?} for {} weights",
        x.layout(),
        w.ty
    );
    assert_eq!(
        x.cols(),
        w.cols,
        "matmul: activation width vs weight columns"
    );
    assert!(a0 <= a1, "matmul: activation rows {a0}..{a1}");
    assert!(
        a1 <= x.n_rows(),
        "matmul: {a1} rows requested, {} quantized",
        x.n_rows()
    );
    assert!(
        r0 <= r1 && r1 <= w.rows,
        "matmul: rows {r0}..{r1} of {}",
        w.rows
    );
    assert!(
        a1 <= out.rows && r1 <= out.cols,
        "matmul: output {}x{} for {a1}x{r1}",
        out.rows,
        out.cols
    );
    assert!(
        w.data.len() >= w.rows * w.row_bytes(),
        "matmul: weight data too short"
    );
    if a0 == a1 || r0 == r1 {
        return;
    }
    if x.layout() == ActLayout::Packed {
        #[cfg(target_arch = "x86_64")]
        if let Tier::Avx512 { vnni, .. } = tier {
            let nb = w.cols / QK;
            let (a, stride) = x.rows_from(a0);
            // SAFETY: a0 <= a1 <= out.rows (checked above).
            let out = unsafe { out.skip(a0) };
            let n = a1 - a0;
            // The copy made at load for this tier's kernels, else the ggml rows.
            let (rows, rb, repacked) = match w.repacked() {
                Some((rp, rb)) => {
                    // `rp` is `rows × rb` bytes by construction (`Repacked`).
                    assert!(
                        matches!(w.ty, GgmlType::Q5_0 | GgmlType::Q4_1 | GgmlType::Q8_0),
                        "matmul: repacked {} matrix",
                        w.ty
                    );
                    (rp, rb, true)
                }
                None => (w.data, w.row_bytes(), false),
            };
            let gemm = if vnni {
                gemm512::vnni::gemm
            } else {
                gemm512::bw::gemm
            };
            // SAFETY: the tier has AVX-512 + VBMI (packed is chosen only then, and VNNI only
            // when detected); `rows` holds the matrix's `rows` rows of `nb` blocks, `rb` bytes
            // each (the ggml rows, or their copy `repack` made for this tier); `a` points at
            // `n` packed rows of `nb` blocks `stride` apart; output exclusivity is ours.
            unsafe {
                gemm(
                    w.ty,
                    repacked,
                    rows.as_ptr(),
                    rb,
                    nb,
                    r0,
                    r1,
                    a,
                    stride,
                    n,
                    out,
                )
            }
        }
        return;
    }
    #[cfg(target_arch = "x86_64")]
    let r0 = {
        let span = Span {
            tier,
            w,
            x,
            a0,
            a1,
            r1,
            out,
        };
        // SAFETY: forwarded contract (disjoint output elements); the checks above passed.
        let r0 = unsafe { repacked::avx2_q5r(&span, r0) };
        // SAFETY: as above.
        let r0 = unsafe { repacked::avx2_q41r(&span, r0) };
        // SAFETY: as above.
        let r0 = unsafe { k_tiles(&span, r0) };
        // SAFETY: as above.
        let r0 = unsafe { avx2_rows8(&span, r0) };
        // SAFETY: as above.
        let r0 = unsafe { avx2_k_rows8(&span, r0) };
        // SAFETY: as above.
        unsafe { avx2_decode(&span, r0) }
    };
    for r in r0..r1 {
        let wr = w.row(r);
        let mut a = a0;
        while a + 4 <= a1 {
            let v = dot4_unchecked(
                tier,
                w.ty,
                wr,
                [x.row(a), x.row(a + 1), x.row(a + 2), x.row(a + 3)],
            );
            for (k, vk) in v.into_iter().enumerate() {
                // SAFETY: in bounds (checked above); exclusivity is the caller's.
                unsafe { out.put(a + k, r, vk) };
            }
            a += 4;
        }
        while a < a1 {
            let v = dot_unchecked(tier, w.ty, wr, x.row(a));
            // SAFETY: as above.
            unsafe { out.put(a, r, v) };
            a += 1;
        }
    }
}

/// What the tile paths of [`matmul_span`] work on: activation rows `a0..a1` and weight rows
/// up to `r1` of `w · xᵀ` into `out`, on `tier`; each path takes the weight rows from a first
/// one it is given and returns the first it leaves to the next.
#[cfg(target_arch = "x86_64")]
#[derive(Clone, Copy)]
struct Span<'a, 'w> {
    tier: Tier,
    w: &'a WeightMatrix<'w>,
    x: &'a QuantizedActs,
    a0: usize,
    a1: usize,
    r1: usize,
    out: OutRows,
}

#[cfg(target_arch = "x86_64")]
impl Span<'_, '_> {
    /// The span cut into windows of `n` activation rows (the last one shorter).
    fn windows(&self, n: usize) -> impl Iterator<Item = Self> + '_ {
        (self.a0..self.a1).step_by(n).map(move |a0| Span {
            a0,
            a1: (a0 + n).min(self.a1),
            ..*self
        })
    }
}

/// Weight rows `r0..` of [`matmul_span`] eight at a time on the AVX2 tier for Q4_0, Q4_1 and
/// (with four or more activation rows) Q5_0 weights (this check alone decides which types):
/// activation rows four at a time ([`avx2::dot_rows8x4`], prefill: each weight block unpacked
/// once for the four; rows of up to [`avx2::UNPACKED_BLOCKS`] blocks unpacked once per group
/// of eight for every quad of a window of [`unpacked::UNPACKED_WINDOW`] activation rows,
/// [`avx2::Unpacked8`]), the rest one at a time ([`avx2::dot_rows8`]: decode, and for Q5_0 the
/// tier's one-row kernel per weight row); the same bits as one pair at a time. Returns
/// the first weight row left to the caller (`r0` when nothing was done).
///
/// # Safety
/// As [`matmul_span`] (activation rows `a0..a1`), whose checks have passed.
#[cfg(target_arch = "x86_64")]
unsafe fn avx2_rows8(span: &Span<'_, '_>, r0: usize) -> usize {
    use avx2::ROWS8;
    let (tier, w, x, out) = (span.tier, span.w, span.x, span.out);
    let (a0, a1, r1) = (span.a0, span.a1, span.r1);
    let four_bit = matches!(w.ty, GgmlType::Q4_0 | GgmlType::Q4_1);
    // Q5_0 decode keeps its one-row kernel (`dot_rows8` has none for it).
    let five_bit = w.ty == GgmlType::Q5_0 && a1 - a0 >= 4;
    if tier != Tier::Avx2 || !(four_bit || five_bit) {
        return r0;
    }
    if a1 - a0 >= 4 && avx2::Unpacked8::takes(w.ty) && w.cols / QK <= avx2::UNPACKED_BLOCKS {
        // SAFETY: forwarded contract.
        return unsafe { unpacked::avx2_unpacked8(span, r0) };
    }
    let mut r = r0;
    while r + ROWS8 <= r1 {
        let rows = rows8_prefetching(w, r, r1);
        let mut a = a0;
        while a + 4 <= a1 {
            let acts = [x.row(a), x.row(a + 1), x.row(a + 2), x.row(a + 3)];
            // Q4_0 and Q5_0 weights meet Q8_0 rows (checked against the layout by the
            // caller), whose stored entries give the offsets.
            let aux = if avx2::Unpacked8::covers(w.ty) {
                std::array::from_fn(|k| x.q8_0_aux(a + k))
            } else {
                [&[][..]; 4]
            };
            // SAFETY: the AVX2 tier was resolved against this CPU; every row holds the
            // activation rows' blocks (checked by the caller).
            let Some(v) = (unsafe { avx2::dot_rows8x4(w.ty, rows, acts, aux) }) else {
                break;
            };
            // SAFETY: in bounds (checked by the caller); exclusivity is the caller's.
            unsafe { put_rows8x4(out, a, r, v) };
            a += 4;
        }
        // SAFETY: as above.
        unsafe { rows8_one_by_one(span, rows, r, a) };
        r += ROWS8;
    }
    r
}

/// Weight rows `r..r + 8` of `w`, the next group's bytes (up to row `r1`) asked for now: the
/// eight rows are read a block of each at a time, eight short strided streams the hardware
/// prefetchers do not follow.
#[cfg(target_arch = "x86_64")]
fn rows8_prefetching<'w>(w: &WeightMatrix<'w>, r: usize, r1: usize) -> [&'w [u8]; avx2::ROWS8] {
    let rows = std::array::from_fn(|k| w.row(r + k));
    let rb = w.row_bytes();
    let next = (r + avx2::ROWS8) * rb..((r + 2 * avx2::ROWS8).min(r1)) * rb;
    super::prefetch(&w.data[next]);
    rows
}

/// Writes an eight-by-four result (`v[k][j]`: activation row `a + k`, weight row `r + j`).
///
/// # Safety
/// The elements lie inside `out` and are this caller's alone.
#[cfg(target_arch = "x86_64")]
unsafe fn put_rows8x4(out: OutRows, a: usize, r: usize, v: [[f32; avx2::ROWS8]; 4]) {
    for (k, vk) in v.into_iter().enumerate() {
        for (j, vj) in vk.into_iter().enumerate() {
            // SAFETY: caller contract.
            unsafe { out.put(a + k, r + j, vj) };
        }
    }
}

/// Activation rows `a..a1` against the eight weight rows `rows` (from weight row `r`) one at a
/// time ([`avx2::dot_rows8`]): the rows a quad does not fill.
///
/// # Safety
/// As [`avx2_rows8`]; every row holds the activation rows' blocks.
#[cfg(target_arch = "x86_64")]
unsafe fn rows8_one_by_one(span: &Span<'_, '_>, rows: [&[u8]; avx2::ROWS8], r: usize, a: usize) {
    for a in a..span.a1 {
        // SAFETY: the AVX2 tier was resolved against this CPU; every row holds the activation
        // row's blocks (caller contract).
        let v = unsafe { avx2::dot_rows8(span.w.ty, rows, span.x.row(a)) };
        for (k, vk) in v.into_iter().enumerate() {
            // SAFETY: in bounds (checked by `matmul_span`); exclusivity is its caller's.
            unsafe { span.out.put(a, r + k, vk) };
        }
    }
}

/// Activation rows per window of [`avx2_k_rows8`]: the decoded runs are reused by this many
/// rows' quads, whose sums wait in a 2 KiB array.
#[cfg(target_arch = "x86_64")]
const K_WINDOW: usize = 64;

/// Weight rows `r0..` of [`matmul_span`] eight at a time on the AVX2 tier for Q4_K, Q5_K and
/// Q6_K weights and four or more activation rows (prefill): for each window of
/// [`K_WINDOW`] activation rows, each run of super-blocks of the eight rows is decoded once
/// ([`avx2_kt::UnpackedK8`]) for all the window's quads; the last activation rows (fewer
/// than four) one at a time. The same bits as one pair at a time. Returns the first weight
/// row left to the caller (`r0` when nothing was done).
///
/// # Safety
/// As [`matmul_span`] (activation rows `a0..a1`), whose checks have passed.
#[cfg(target_arch = "x86_64")]
unsafe fn avx2_k_rows8(span: &Span<'_, '_>, r0: usize) -> usize {
    use avx2_k::{K4, K5, K6};
    if span.tier != Tier::Avx2 || span.a1 - span.a0 < 4 {
        return r0;
    }
    // SAFETY: forwarded contract; the tier is AVX2 and the type decides `T`.
    unsafe {
        match avx2_k::k_code(span.w.ty) {
            Some(K4) => avx2_k_rows8_t::<K4>(span, r0),
            Some(K5) => avx2_k_rows8_t::<K5>(span, r0),
            Some(K6) => avx2_k_rows8_t::<K6>(span, r0),
            _ => r0,
        }
    }
}

/// [`avx2_k_rows8`] for K type `T`: the span's activation rows in windows of [`K_WINDOW`]
/// (looked up once per window), each window through every group of eight weight rows, so a
/// window's Q8_K rows stay in L2 while the groups go by (FFN down rows of 4,864 columns: 5.5
/// KiB each, 2.8 MiB for 512 rows) and the weights are read again once per window instead.
/// Not inlined: its 23 KiB of decoded blocks stay off the frames of the other paths. Returns
/// the first weight row left to the caller (`r0` when the activations are not Q8_K blocks).
///
/// # Safety
/// As [`avx2_k_rows8`]; the weights are of type `T`.
#[cfg(target_arch = "x86_64")]
#[inline(never)]
unsafe fn avx2_k_rows8_t<const T: u8>(span: &Span<'_, '_>, r0: usize) -> usize {
    use super::ActKind;
    use avx2::ROWS8;
    use avx2_kt::{KRUN, UnpackedK8};
    let (w, x, out) = (span.w, span.x, span.out);
    if x.layout() != ActLayout::Blocks(ActKind::Q8K) {
        // The layout was checked against the type; anything else is left to the caller's
        // kernels.
        return r0;
    }
    let nb = w.cols / QK_K;
    let mut un = UnpackedK8::<T>::new();
    let mut r = r0;
    for window in span.windows(K_WINDOW) {
        let (w0, quads) = (window.a0, (window.a1 - window.a0) / 4);
        let mut acts = [[&[] as &[BlockQ8K]; 4]; K_WINDOW / 4];
        for (q, aq) in acts[..quads].iter_mut().enumerate() {
            for (k, ak) in aq.iter_mut().enumerate() {
                if let ActRow::Q8K(b) = x.row(w0 + 4 * q + k) {
                    *ak = b;
                }
            }
        }
        r = r0;
        while r + ROWS8 <= span.r1 {
            let rows = rows8_prefetching(w, r, span.r1);
            // SAFETY: the AVX2 tier was resolved against this CPU.
            let mut sums = [[unsafe { std::arch::x86_64::_mm256_setzero_ps() }; 4]; K_WINDOW / 4];
            for i0 in (0..nb).step_by(KRUN) {
                // SAFETY: every row holds `nb` blocks of type `T` (checked by the caller).
                unsafe { un.unpack(&rows, i0, nb - i0) };
                for (aq, sq) in acts[..quads].iter().zip(sums.iter_mut()) {
                    // SAFETY: as above.
                    unsafe { un.accumulate(*aq, sq) };
                }
            }
            for (q, sq) in sums[..quads].iter().enumerate() {
                // SAFETY: as above.
                let v = unsafe { avx2::rows8x4(*sq) };
                // SAFETY: in bounds (checked by the caller); exclusivity is the caller's.
                unsafe { put_rows8x4(out, w0 + 4 * q, r, v) };
            }
            // SAFETY: as above.
            unsafe { rows8_one_by_one(&window, rows, r, w0 + 4 * quads) };
            r += ROWS8;
        }
    }
    r
}

/// Weight rows `r0..` of [`matmul_span`] on the AVX2 tier for Q5_0 and Q8_0 weights and
/// fewer than four activation rows (decode): each activation row against the whole range in
/// one call of [`avx2_dec::rows`], which prepares what depends on the activation row once
/// for all the weight rows; the same bits as one pair at a time. Returns the first weight row
/// left to the caller (`r0` when nothing was done).
///
/// # Safety
/// As [`matmul_span`] (activation rows `a0..a1`), whose checks have passed.
#[cfg(target_arch = "x86_64")]
unsafe fn avx2_decode(span: &Span<'_, '_>, r0: usize) -> usize {
    let (w, x, out) = (span.w, span.x, span.out);
    let (a0, a1, r1) = (span.a0, span.a1, span.r1);
    if span.tier != Tier::Avx2 || a1 - a0 >= 4 || r0 == r1 {
        return r0;
    }
    for a in a0..a1 {
        let ActRow::Q8_0(y) = x.row(a) else {
            return r0;
        };
        let put = |r: usize, v: f32| {
            // SAFETY: in bounds (checked by the caller); exclusivity is the caller's.
            unsafe { out.put(a, r, v) }
        };
        // SAFETY: the AVX2 tier was resolved against this CPU; `w.data` holds the matrix's
        // rows of `row_bytes` bytes, each as many blocks as the activation row (checked by
        // the caller).
        let done = unsafe { avx2_dec::rows(w.ty, w.data, w.row_bytes(), r0, r1, y, put) };
        // The kernel declines by type and row length alone, the same for every activation
        // row: the first decides for all.
        if !done {
            return r0;
        }
    }
    r1
}

/// Activation rows per pass over a range of weight rows in [`k_tiles`]: their Q8_K blocks
/// (at most 64 × 292 bytes per 256 columns) stay in the L2 cache while the weight rows stream.
#[cfg(target_arch = "x86_64")]
const K_TILE_ACTS: usize = 64;

/// Weight rows `r0..` of [`matmul_span`] in four-row tiles of the AVX-512 K-quant prefill
/// kernel ([`avx512_kgemm`]) when the tier and type have one and there are at least four
/// activation rows: each decoded weight block serves up to 16 quads of four activation rows
/// (activation rows in passes of [`K_TILE_ACTS`]), the remaining activation rows one at a
/// time. Returns the first weight row left to the caller (`r0` when nothing was done).
///
/// # Safety
/// As [`matmul_span`] (activation rows `a0..a1`), whose checks have passed.
#[cfg(target_arch = "x86_64")]
unsafe fn k_tiles(span: &Span<'_, '_>, r0: usize) -> usize {
    use avx512_kgemm::{ACTS, QUADS, ROWS};
    let (tier, w, x, out) = (span.tier, span.w, span.x, span.out);
    let (a0, a1, r1) = (span.a0, span.a1, span.r1);
    let Tier::Avx512 { vnni, .. } = tier else {
        return r0;
    };
    if !matches!(w.ty, GgmlType::Q4K | GgmlType::Q6K) || a1 - a0 < ACTS {
        return r0;
    }
    let q8k = |a: usize| match x.row(a) {
        ActRow::Q8K(b) => b,
        _ => &[],
    };
    // The layout was checked against the type; a mismatch would leave the rows to the caller.
    if q8k(a0).len() * QK_K != w.cols {
        return r0;
    }
    let n_tiled = a1 - (a1 - a0) % ACTS;
    let r_end = r0 + (r1 - r0) / ROWS * ROWS;
    let mut p0 = a0;
    while p0 < n_tiled {
        let p1 = (p0 + K_TILE_ACTS).min(n_tiled);
        let mut r = r0;
        while r < r_end {
            let wr = [w.row(r), w.row(r + 1), w.row(r + 2), w.row(r + 3)];
            let mut a = p0;
            while a < p1 {
                let nq = ((p1 - a) / ACTS).min(QUADS);
                let quad = |q: usize| std::array::from_fn(|t| q8k(a + ACTS * q + t));
                let ar: [[&[BlockQ8K]; ACTS]; QUADS] =
                    std::array::from_fn(|q| if q < nq { quad(q) } else { quad(0) });
                let mut v = [[0.0f32; 16]; QUADS];
                // SAFETY: the tier was resolved against this CPU; every row holds `cols`
                // columns of its type (checked by the caller).
                let done = unsafe { avx512_kgemm::tile(vnni, w.ty, wr, &ar[..nq], &mut v[..nq]) };
                for (q, vq) in v[..nq].iter_mut().enumerate() {
                    for (k, o) in vq.iter_mut().enumerate() {
                        let (at, rk) = (a + ACTS * q + k / ROWS, r + k % ROWS);
                        if !done {
                            *o = dot_unchecked(tier, w.ty, wr[k % ROWS], x.row(at));
                        }
                        // SAFETY: in bounds (checked by the caller); exclusivity is the
                        // caller's.
                        unsafe { out.put(at, rk, *o) };
                    }
                }
                a += ACTS * nq;
            }
            r += ROWS;
        }
        p0 = p1;
    }
    for r in r0..r_end {
        let wr = w.row(r);
        for a in n_tiled..a1 {
            let v = dot_unchecked(tier, w.ty, wr, x.row(a));
            // SAFETY: as above.
            unsafe { out.put(a, r, v) };
        }
    }
    r_end
}

/// Splits `0..total` into chunks of about `total / (4 · threads)` items, rounded up to a
/// multiple of `align`: the unit of dynamic scheduling in pool jobs.
pub fn chunk_size(total: usize, threads: usize, align: usize) -> usize {
    let align = align.max(1);
    let want = total.div_ceil(4 * threads.max(1)).max(1);
    want.next_multiple_of(align)
}

/// `y[a][r] = dot(w.row(r), x.row(a))` for `a < n_rows`, `r < w.rows`: `y` is
/// `n_rows × w.rows` row-major. Rows of `w` are shared out to the pool in chunks. Allocates
/// nothing.
///
/// # Panics
/// If `x` was not quantized for `w.ty` with `w.cols` columns on this tier, holds fewer than
/// `n_rows` rows, or `y` is shorter than `n_rows * w.rows`.
pub fn matmul(
    pool: &ThreadPool,
    isa: Isa,
    w: &WeightMatrix<'_>,
    x: &QuantizedActs,
    n_rows: usize,
    y: &mut [f32],
) {
    if n_rows == 0 || w.rows == 0 {
        return;
    }
    let out = OutRows::new(y, n_rows, w.rows, w.rows, false);
    pool.run_chunks(w.rows, chunk_size(w.rows, pool.n_threads(), 4), |r0, r1| {
        // SAFETY: chunks are disjoint row ranges; `y` outlives the pool run.
        unsafe { matmul_rows(isa, w, x, n_rows, r0, r1, out) };
    });
}

#[cfg(target_arch = "x86_64")]
mod repacked;
#[cfg(target_arch = "x86_64")]
mod unpacked;
