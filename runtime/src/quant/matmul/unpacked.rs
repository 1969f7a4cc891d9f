//! The AVX2 tier's prefill of Q4_0, Q4_1 and Q5_0 matrices (ggml rows, or Q5_0 and Q4_1
//! rows repacked at load): windows of activation rows through groups of eight weight rows unpacked
//! once per run ([`avx2::Unpacked8`]).

use super::{
    ActLayout, ActRow, GgmlType, QK, Span, avx2, put_rows8x4, rows8_one_by_one, rows8_prefetching,
};

/// Activation rows per pass of [`avx2_unpacked8`]: every group of eight weight rows is
/// unpacked once per window, and the window's Q8_0 rows with their entries (Q8_1 rows for Q4_1
/// weights; at most 128 · 2,688 bytes, 336 KiB, for 64-block rows) stay in a core's L2 while
/// the groups go by, where the whole span's rows (512 prompt rows of 896 columns: 608 KiB)
/// would be read again from L3 for every group.
pub(super) const UNPACKED_WINDOW: usize = 128;

/// The Q4_0, Q4_1 and Q5_0 prefill of [`super::avx2_rows8`] (four or more activation rows,
/// rows of at most [`avx2::UNPACKED_BLOCKS`] blocks) and of [`super::repacked::avx2_q5r`] and
/// [`super::repacked::avx2_q41r`] (Q5_0 and Q4_1 rows repacked for this tier, any length; a
/// Q4_1 span starting at a whole band): the span's activation rows in windows of
/// [`UNPACKED_WINDOW`] (multiples of four but the last), each window through every group of
/// eight weight rows, each group unpacked a run of blocks at a time ([`avx2::Unpacked8`]: once
/// per window for rows of one run) for every quad of the window's rows; for the ggml rows, the
/// window's last rows (fewer than four) one at a time with [`avx2::dot_rows8`] (for the
/// repacked rows the caller does them). Each product is computed as in one pass over all rows,
/// so the bits are the same. The window's rows and entries are looked up once, not once per
/// group. Not inlined: its 30 KiB of unpacked blocks, sums and row lists stay off the frames
/// of the other paths. Returns the first weight row left to the caller (`r0` when the
/// activations are not the type's blocks: Q8_1 for Q4_1, Q8_0 for the others).
///
/// # Safety
/// As [`super::avx2_rows8`] or the routes of [`super::repacked`], whose checks have passed
/// (the tier is AVX2, the type Q4_0, Q4_1 or Q5_0).
#[inline(never)]
pub(super) unsafe fn avx2_unpacked8(span: &Span<'_, '_>, r0: usize) -> usize {
    use crate::quant::{ActKind, BlockQ8_0, BlockQ8_1, Q8_1Aux, Q8Aux};
    use avx2::{ROWS8, UNPACKED_BLOCKS};
    let (w, x, out) = (span.w, span.x, span.out);
    // Q4_1 has mins, not an offset: its rows meet Q8_1 rows and need no entries.
    let mins = w.ty == GgmlType::Q4_1;
    let acts = if mins { ActKind::Q8_1 } else { ActKind::Q8_0 };
    if x.layout() != ActLayout::Blocks(acts) {
        // The layout was checked against the type; anything else is left to the caller's
        // kernels.
        return r0;
    }
    // A Q5_0 or Q4_1 copy is in this tier's layout (the AVX2 tier repacks no other type); a
    // Q4_1 copy is entered at a whole band (`super::repacked::avx2_q41r`).
    let repacked = w
        .repacked()
        .filter(|_| matches!(w.ty, GgmlType::Q5_0 | GgmlType::Q4_1));
    let nb = w.cols / QK;
    let mut un = avx2::Unpacked8::new();
    let mut blocks: [&[BlockQ8_0]; UNPACKED_WINDOW] = [&[]; UNPACKED_WINDOW];
    let mut blocks1: [&[BlockQ8_1]; UNPACKED_WINDOW] = [&[]; UNPACKED_WINDOW];
    let mut entries: [&[Q8Aux]; UNPACKED_WINDOW] = [&[]; UNPACKED_WINDOW];
    let mut entries1: [&[Q8_1Aux]; UNPACKED_WINDOW] = [&[]; UNPACKED_WINDOW];
    let mut r = r0;
    for window in span.windows(UNPACKED_WINDOW) {
        let (w0, quads) = (window.a0, (window.a1 - window.a0) / 4);
        for (k, a) in (w0..w0 + 4 * quads).enumerate() {
            match x.row(a) {
                ActRow::Q8_0(b) => {
                    blocks[k] = b;
                    entries[k] = x.q8_0_aux(a);
                }
                ActRow::Q8_1(b) => {
                    blocks1[k] = b;
                    entries1[k] = x.q8_1_aux(a);
                }
                _ => {}
            }
        }
        r = r0;
        while r + ROWS8 <= span.r1 {
            let rows = match repacked {
                Some((rp, rb)) => {
                    crate::quant::prefetch(
                        &rp[(r + ROWS8) * rb..(r + 2 * ROWS8).min(span.r1) * rb],
                    );
                    std::array::from_fn(|k| &rp[(r + k) * rb..(r + k + 1) * rb])
                }
                None => rows8_prefetching(w, r, span.r1),
            };
            // SAFETY: the AVX2 tier was resolved against this CPU.
            let mut sums =
                [[unsafe { std::arch::x86_64::_mm256_setzero_ps() }; 4]; UNPACKED_WINDOW / 4];
            for i0 in (0..nb).step_by(UNPACKED_BLOCKS) {
                let n = (nb - i0).min(UNPACKED_BLOCKS);
                // SAFETY: as above; every row holds `nb` blocks of its type, or their groups
                // (checked by the caller).
                unsafe {
                    if let (Some((rp, rb)), true) = (repacked, mins) {
                        un.unpack_q41r(&rp[r * rb..(r + ROWS8) * rb], i0, n)
                    } else if repacked.is_some() {
                        un.unpack_q5r(&rows, i0, n)
                    } else {
                        un.unpack(w.ty, &rows, i0, n)
                    }
                };
                for (q, sq) in sums[..quads].iter_mut().enumerate() {
                    if mins {
                        let b = std::array::from_fn(|k| blocks1[4 * q + k]);
                        let e = std::array::from_fn(|k| &entries1[4 * q + k][i0..i0 + n]);
                        // SAFETY: as above.
                        unsafe { un.accumulate_q4_1(b, e, sq) };
                    } else {
                        let b = std::array::from_fn(|k| blocks[4 * q + k]);
                        let e = std::array::from_fn(|k| &entries[4 * q + k][i0..i0 + n]);
                        // SAFETY: as above.
                        unsafe { un.accumulate(b, e, sq) };
                    }
                }
            }
            for (q, sq) in sums[..quads].iter().enumerate() {
                // SAFETY: as above; in bounds (checked by the caller), exclusivity is the
                // caller's.
                unsafe { put_rows8x4(out, w0 + 4 * q, r, avx2::rows8x4(*sq)) };
            }
            if repacked.is_none() {
                // SAFETY: as above.
                unsafe { rows8_one_by_one(&window, rows, r, w0 + 4 * quads) };
            }
            r += ROWS8;
        }
    }
    r
}
