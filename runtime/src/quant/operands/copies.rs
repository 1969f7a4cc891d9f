//! Copies of weight matrices made once at load in the layout a tier's kernels read fastest
//! ([`Repacked`], [`repack_all`]), all in one anonymous mapping hinted for huge pages.

use super::WeightMatrix;
use crate::quant::Isa;
#[cfg(target_arch = "x86_64")]
use crate::quant::{QK, Tier, resolve};
use crate::{Error, GgmlType, Result};
use std::sync::Arc;

/// A weight matrix rewritten once (before its first CPU use) into the layout a tier's kernels
/// read fastest, so that decode stops paying for the rearrangement on every token. Today: Q5_0
/// and Q4_1 on the AVX-512 VBMI tier, each group of four blocks in as many bytes as in ggml (88
/// and 80: quants already in the packed lane order, Q5_0's fifth bits as lane masks, then the
/// four scales and Q4_1's four mins; a Q4_1 row's last partial group stays as in the file; the
/// kernel module documents the layout), Q5_0 rows with units (`packed::has_units`) in units
/// of sixteen blocks in block lanes (352 bytes, as many as the file's; a last unit of `k`
/// groups in `72k + 64`: `gemm512::units`), and on the AVX2 tier Q5_0 (88 bytes per group of four
/// blocks, a partial last group padded with zero blocks; `avx2::q5r`) and Q4_1 (bands of eight
/// rows, each block of a band the eight rows' blocks in 160 bytes, rows past the last band as
/// in the file; `avx2::q41r`). The kernels compute the same integers, scales and mins from
/// it, so the results are bit-identical to those from the ggml rows. Q8_0 rows with units on
/// the AVX-512 VBMI tier go into block lanes too (136 bytes per group of four blocks, as many
/// as the file's for whole groups: `gemm512::units`); other Q8_0 matrices on both tiers are
/// copied as they are ([`Repacked::ggml_layout`]): the copy sits in the huge-page arena,
/// which the decode streams faster than the file's pages (docs/PERFORMANCE.md, "Q8_0 matrices
/// copied into huge pages").
pub struct Repacked {
    arena: Arc<memmap2::Mmap>,
    off: usize,
    pub(super) rows: usize,
    pub(super) row_bytes: usize,
    pub(super) ggml_layout: bool,
}

impl Repacked {
    /// Bytes of the repacked matrix.
    pub fn len(&self) -> usize {
        self.rows * self.row_bytes
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    pub(super) fn bytes(&self) -> &[u8] {
        &self.arena[self.off..self.off + self.len()]
    }

    /// Whether the copy holds the ggml rows byte for byte (Q8_0), so that every reader of the
    /// matrix, row lookups included, can read it in place of the file.
    pub fn ggml_layout(&self) -> bool {
        self.ggml_layout
    }
}

impl std::fmt::Debug for Repacked {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "Repacked({} rows of {} bytes)",
            self.rows, self.row_bytes
        )
    }
}

/// Bytes per repacked row of `w` on tier `isa`, where that tier repacks or copies it.
fn repacked_row_bytes(isa: Isa, w: &WeightMatrix<'_>) -> Option<usize> {
    #[cfg(target_arch = "x86_64")]
    if matches!(resolve(isa), Tier::Avx512 { vbmi: true, .. }) {
        match w.ty {
            GgmlType::Q5_0 => return Some(crate::quant::gemm512::q5_0r_row_bytes(w.cols / QK)),
            // Rows with units in block lanes (`gemm512::units`), the others copied as they are.
            GgmlType::Q8_0 if q8_0_units(isa, w) => {
                return Some(crate::quant::gemm512::q8_0u_row_bytes(w.cols / QK));
            }
            // Whole groups repacked, the last `nb % 4` blocks as in the file: no padding.
            GgmlType::Q4_1 => return Some(w.row_bytes()),
            _ if copy_keeps_ggml_layout(isa, w) => return Some(w.row_bytes()),
            _ => {}
        }
    }
    #[cfg(target_arch = "x86_64")]
    if resolve(isa) == Tier::Avx2 {
        let nb = w.cols / QK;
        match w.ty {
            GgmlType::Q5_0 if nb <= crate::quant::avx2::q5r::MAX_BLOCKS => {
                return Some(crate::quant::avx2::q5r::row_bytes(nb));
            }
            // Bands of eight rows in as many bytes, the last `rows % 8` as in the file.
            GgmlType::Q4_1 if nb <= crate::quant::avx2::q41r::MAX_BLOCKS => {
                return Some(w.row_bytes());
            }
            _ if copy_keeps_ggml_layout(isa, w) => return Some(w.row_bytes()),
            _ => {}
        }
    }
    let _ = (isa, w);
    None
}

/// Bytes of the copy [`repack`] makes of `w` for tier `isa`, or `None` where that tier reads
/// `w` as it is.
pub fn repacked_len(isa: Isa, w: &WeightMatrix<'_>) -> Option<usize> {
    repacked_row_bytes(isa, w).map(|rb| rb * w.rows)
}

/// `w` rewritten (Q5_0, Q4_1, Q8_0 rows with units) or copied (other Q8_0) for tier `isa`'s kernels, or `None` where that
/// tier reads the ggml rows from the file (every other type; on the AVX2 tier every type but
/// Q5_0, Q4_1 and Q8_0, and Q5_0 and Q4_1 rows of more than 512 blocks; the scalar and NEON
/// tiers).
///
/// # Errors
/// As [`repack_all`].
pub fn repack(isa: Isa, w: &WeightMatrix<'_>) -> Result<Option<Repacked>> {
    Ok(repack_all(isa, std::slice::from_ref(w), |_, _| {})?
        .pop()
        .flatten())
}

/// Whether the copy [`repack`] makes of `w` for tier `isa` holds its ggml rows byte for byte
/// (Q8_0 copied only to sit in huge pages: every tier that copies it, except the AVX-512 VBMI
/// tier's rows with units, which it stores in block lanes), so that any reader can take it for
/// the file's bytes.
fn copy_keeps_ggml_layout(isa: Isa, w: &WeightMatrix<'_>) -> bool {
    w.ty == GgmlType::Q8_0 && !q8_0_units(isa, w)
}

/// Whether tier `isa` copies the Q8_0 matrix `w` into block lanes: the AVX-512 VBMI tier, rows
/// with units ([`crate::quant::packed::has_units`]).
fn q8_0_units(isa: Isa, w: &WeightMatrix<'_>) -> bool {
    #[cfg(target_arch = "x86_64")]
    if w.ty == GgmlType::Q8_0 && matches!(resolve(isa), Tier::Avx512 { vbmi: true, .. }) {
        return crate::quant::packed::has_units((w.cols / QK).div_ceil(4));
    }
    let _ = (isa, w);
    false
}

/// Source bytes per run of rows in [`repack_all`].
pub const COPY_CHUNK: usize = 4 << 20;

/// [`repack`] of each matrix of `ws`, all copies in one anonymous mapping aligned to 2 MiB and
/// hinted for transparent huge pages before the first write (the decode streams every copy
/// once per token: huge pages spare it a page walk per 4 KiB). Rows are copied in runs of
/// about [`COPY_CHUNK`] source bytes; after each run `copied(i, bytes)` names matrix `i`'s
/// source bytes just copied, so that the caller can drop their pages from the resident set
/// while the copies grow (peak memory about the model's, not the model's plus its copies).
///
/// # Errors
/// [`Error::Io`] if the mapping cannot be made (out of memory).
pub fn repack_all(
    isa: Isa,
    ws: &[WeightMatrix<'_>],
    mut copied: impl FnMut(usize, std::ops::Range<usize>),
) -> Result<Vec<Option<Repacked>>> {
    const HUGE: usize = 2 << 20;
    let rbs: Vec<Option<usize>> = ws.iter().map(|w| repacked_row_bytes(isa, w)).collect();
    let mut offs = Vec::with_capacity(ws.len());
    let mut total = 0usize;
    for (w, rb) in ws.iter().zip(&rbs) {
        offs.push(total);
        if let Some(rb) = rb {
            total += (rb * w.rows).next_multiple_of(64);
        }
    }
    if total == 0 {
        return Ok(ws.iter().map(|_| None).collect());
    }
    // Written only by the x86 repacking below (the copies exist on that architecture).
    #[cfg_attr(not(target_arch = "x86_64"), allow(unused_mut))]
    let mut map = memmap2::MmapMut::map_anon(total + HUGE).map_err(|e| Error::Io {
        path: format!("<anonymous mapping of {total} bytes for repacked weights>").into(),
        source: e,
    })?;
    let base = (map.as_ptr() as usize).next_multiple_of(HUGE) - map.as_ptr() as usize;
    // A hint: a kernel without transparent huge pages refuses it, and the copies work the
    // same.
    #[cfg(target_os = "linux")]
    let _ = map.advise_range(
        memmap2::Advice::HugePage,
        base,
        total.next_multiple_of(HUGE),
    );
    for (i, ((w, rb), &off)) in ws.iter().zip(&rbs).zip(&offs).enumerate() {
        #[cfg(target_arch = "x86_64")]
        if let Some(rb) = *rb {
            let dst = &mut map[base + off..base + off + rb * w.rows];
            let src_rb = w.row_bytes();
            // Whole bands of eight rows per run (AVX2 Q4_1).
            let step = (COPY_CHUNK / src_rb / 8 * 8).max(8);
            let mut r0 = 0;
            while r0 < w.rows {
                let r1 = (r0 + step).min(w.rows);
                let out = &mut dst[r0 * rb..r1 * rb];
                let (src, nb) = (&w.data[r0 * src_rb..r1 * src_rb], w.cols / QK);
                let avx2 = resolve(isa) == Tier::Avx2;
                if copy_keeps_ggml_layout(isa, w) {
                    // The same row bytes (`rb` is the ggml row size).
                    out.copy_from_slice(src);
                } else if avx2 && w.ty == GgmlType::Q4_1 {
                    crate::quant::avx2::q41r::repack_rows(src, nb, r0, w.rows, out);
                } else {
                    for (s, row) in src.chunks_exact(src_rb).zip(out.chunks_exact_mut(rb)) {
                        // SAFETY: `repacked_row_bytes` gave a size only for the AVX-512
                        // VBMI tier and (Q5_0) the AVX2 tier, which `resolve` picks only
                        // where the CPU has their features.
                        unsafe {
                            if avx2 {
                                crate::quant::avx2::q5r::repack_row_simd(s, nb, row)
                            } else if w.ty == GgmlType::Q4_1 {
                                crate::quant::gemm512::repack_q4_1_row_simd(s, nb, row)
                            } else if w.ty == GgmlType::Q8_0 {
                                crate::quant::gemm512::repack_q8_0u_row_simd(s, nb, row)
                            } else {
                                crate::quant::gemm512::repack_q5_0r_row_simd(s, nb, row)
                            }
                        };
                    }
                }
                copied(i, r0 * src_rb..r1 * src_rb);
                r0 = r1;
            }
        }
        let _ = (i, w, rb, off);
    }
    // Without the x86 kernels nothing is copied and the callback is never called.
    let _ = &mut copied;
    let arena = Arc::new(map.make_read_only().map_err(|e| Error::Io {
        path: "<repacked weights mapping>".into(),
        source: e,
    })?);
    Ok(ws
        .iter()
        .zip(&rbs)
        .zip(&offs)
        .map(|((w, rb), &off)| {
            rb.map(|rb| Repacked {
                arena: arena.clone(),
                off: base + off,
                rows: w.rows,
                row_bytes: rb,
                ggml_layout: copy_keeps_ggml_layout(isa, w),
            })
        })
        .collect())
}
