//! The AVX2 tier's products for matrices rewritten at load for it: Q5_0 ([`avx2::q5r`]) and
//! Q4_1 ([`avx2::q41r`]), each copy read by no other path.

use super::{ActLayout, ActRow, GgmlType, Span, Tier, avx2, dot_unchecked, unpacked};
use crate::quant::ActKind;

/// The copy of the span's matrix (its bytes and bytes per row) when the tier is AVX2, the
/// matrix a `ty` one rewritten for it, and the activations `acts` blocks.
fn copy_for<'w>(span: &Span<'_, 'w>, ty: GgmlType, acts: ActKind) -> Option<(&'w [u8], usize)> {
    let fits =
        span.tier == Tier::Avx2 && span.w.ty == ty && span.x.layout() == ActLayout::Blocks(acts);
    span.w.repacked().filter(|_| fits)
}

/// Every weight row from `r0` of [`super::matmul_span`] on the AVX2 tier for a Q5_0 matrix
/// repacked at load: four or more activation rows through [`unpacked::avx2_unpacked8`]; the
/// weight rows its groups of eight leave, and the activation rows its quads leave (all of them
/// in decode), one activation row at a time against the whole range ([`avx2::q5r::rows`]).
/// The scalar reference's bits either way. Returns `r0` when the matrix is not such a copy.
///
/// # Safety
/// As [`super::matmul_span`] (activation rows `a0..a1`), whose checks have passed.
pub(super) unsafe fn avx2_q5r(span: &Span<'_, '_>, r0: usize) -> usize {
    let (x, r1) = (span.x, span.r1);
    let Some((rp, rb)) = copy_for(span, GgmlType::Q5_0, ActKind::Q8_0) else {
        return r0;
    };
    let quads_end = span.a0 + (span.a1 - span.a0) / 4 * 4;
    // SAFETY: forwarded contract.
    let r8 = if quads_end > span.a0 {
        unsafe { unpacked::avx2_unpacked8(span, r0) }
    } else {
        r0
    };
    for a in span.a0..span.a1 {
        let rs = if a < quads_end { r8 } else { r0 };
        if let (true, ActRow::Q8_0(y)) = (rs < r1, x.row(a)) {
            // SAFETY: the AVX2 tier was resolved against this CPU; `rp` holds the matrix's
            // repacked rows of `rb` bytes; the outputs are in bounds and the caller's alone.
            unsafe {
                avx2::q5r::rows(rp, rb, rs, r1, y, x.q8_0_aux(a), |r, v| {
                    span.out.put(a, r, v)
                })
            };
        }
    }
    r1
}

/// Every weight row from `r0` of [`super::matmul_span`] on the AVX2 tier for a Q4_1 matrix
/// repacked at load in bands of eight rows: four or more activation rows through
/// [`unpacked::avx2_unpacked8`] for the whole bands of the range; the rows before its first
/// whole band and after its last, and the activation rows its quads leave (all of them in
/// decode), one activation row at a time ([`avx2::q41r::rows`]); the rows past the matrix's
/// last band, kept as in the file, by the tier's one-row kernel. The scalar reference's bits
/// either way. Returns `r0` when the matrix is not such a copy.
///
/// # Safety
/// As [`super::matmul_span`] (activation rows `a0..a1`), whose checks have passed.
pub(super) unsafe fn avx2_q41r(span: &Span<'_, '_>, r0: usize) -> usize {
    let (w, x, r1) = (span.w, span.x, span.r1);
    let Some((rp, rb)) = copy_for(span, GgmlType::Q4_1, ActKind::Q8_1) else {
        return r0;
    };
    let bands = avx2::q41r::band_rows(w.rows);
    // Rows r0..lead before the first whole band of the range, lead..r8 in whole bands
    // (unpacked, with four or more activation rows), then up to `end` in the bands.
    let end = r1.min(bands).max(r0);
    let lead = r0.next_multiple_of(avx2::ROWS8).min(end);
    let quads_end = span.a0 + (span.a1 - span.a0) / 4 * 4;
    let r8 = if quads_end > span.a0 && lead < end {
        let banded = Span { r1: end, ..*span };
        // SAFETY: forwarded contract; the weight rows from `lead` start whole bands.
        unsafe { unpacked::avx2_unpacked8(&banded, lead) }
    } else {
        lead
    };
    for a in span.a0..span.a1 {
        let ActRow::Q8_1(y) = x.row(a) else {
            continue;
        };
        let put = |r: usize, v: f32| {
            // SAFETY: in bounds (checked by the caller); exclusivity is the caller's.
            unsafe { span.out.put(a, r, v) }
        };
        let ranges = if a < quads_end {
            [(r0, lead), (r8, end)]
        } else {
            [(r0, end), (end, end)]
        };
        for (s, e) in ranges.into_iter().filter(|(s, e)| s < e) {
            // SAFETY: the AVX2 tier was resolved against this CPU; `rp` holds the matrix's
            // bands (of `rb`-byte rows) up to `bands`, and `s..e` lies below it.
            unsafe { avx2::q41r::rows(rp, rb, bands, s, e, y, put) };
        }
        for r in end..r1 {
            // The rows past the last band are the file's rows at the same offsets.
            let v = dot_unchecked(span.tier, w.ty, &rp[r * rb..(r + 1) * rb], x.row(a));
            put(r, v);
        }
    }
    r1
}
