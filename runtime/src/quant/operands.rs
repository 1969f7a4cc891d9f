//! The operands of the matrix products: weight matrices borrowed from the model mapping
//! ([`WeightMatrix`]) and the preallocated quantized activations ([`QuantizedActs`], written
//! a column range at a time through [`ActsWriter`]) in the layout the tier's kernels read
//! ([`ActLayout`]).

use half::f16;
use half::slice::HalfBitsSliceExt;

#[cfg(target_arch = "x86_64")]
use super::pack512;
use super::{
    ActKind, ActRow, BlockQ8_0, BlockQ8_1, BlockQ8K, Isa, QK, QK_K, Tier, dequantize_row, packed,
    quantize_q8k_tier, quantize_row_q8_0, quantize_row_q8_1, resolve,
};
use crate::{Error, GgmlType, Result};
use std::sync::Arc;

mod entries;
use entries::aux_offset;
pub use entries::{Q8_1Aux, Q8Aux};

/// A weight matrix in ggml layout: `rows` output features (ggml ne1), each a contiguous row
/// of `cols` input features (ggml ne0) in format `ty`. Borrowed from the model mapping.
#[derive(Clone, Copy, Debug)]
pub struct WeightMatrix<'a> {
    pub ty: GgmlType,
    pub rows: usize,
    pub cols: usize,
    pub data: &'a [u8],
    /// The same matrix rewritten once for the tier's kernels ([`Repacked`]), which they
    /// read instead of `data`; other tiers and the row accessors read `data`.
    repacked: Option<&'a Repacked>,
}

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
    rows: usize,
    row_bytes: usize,
    ggml_layout: bool,
}

impl Repacked {
    /// Bytes of the repacked matrix.
    pub fn len(&self) -> usize {
        self.rows * self.row_bytes
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    fn bytes(&self) -> &[u8] {
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
            GgmlType::Q5_0 => return Some(super::gemm512::q5_0r_row_bytes(w.cols / QK)),
            // Rows with units in block lanes (`gemm512::units`), the others copied as they are.
            GgmlType::Q8_0 if q8_0_units(isa, w) => {
                return Some(super::gemm512::q8_0u_row_bytes(w.cols / QK));
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
            GgmlType::Q5_0 if nb <= super::avx2::q5r::MAX_BLOCKS => {
                return Some(super::avx2::q5r::row_bytes(nb));
            }
            // Bands of eight rows in as many bytes, the last `rows % 8` as in the file.
            GgmlType::Q4_1 if nb <= super::avx2::q41r::MAX_BLOCKS => return Some(w.row_bytes()),
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
/// with units ([`super::packed::has_units`]).
fn q8_0_units(isa: Isa, w: &WeightMatrix<'_>) -> bool {
    #[cfg(target_arch = "x86_64")]
    if w.ty == GgmlType::Q8_0 && matches!(resolve(isa), Tier::Avx512 { vbmi: true, .. }) {
        return super::packed::has_units((w.cols / QK).div_ceil(4));
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
                    super::avx2::q41r::repack_rows(src, nb, r0, w.rows, out);
                } else {
                    for (s, row) in src.chunks_exact(src_rb).zip(out.chunks_exact_mut(rb)) {
                        // SAFETY: `repacked_row_bytes` gave a size only for the AVX-512
                        // VBMI tier and (Q5_0) the AVX2 tier, which `resolve` picks only
                        // where the CPU has their features.
                        unsafe {
                            if avx2 {
                                super::avx2::q5r::repack_row_simd(s, nb, row)
                            } else if w.ty == GgmlType::Q4_1 {
                                super::gemm512::repack_q4_1_row_simd(s, nb, row)
                            } else if w.ty == GgmlType::Q8_0 {
                                super::gemm512::repack_q8_0u_row_simd(s, nb, row)
                            } else {
                                super::gemm512::repack_q5_0r_row_simd(s, nb, row)
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

impl<'a> WeightMatrix<'a> {
    /// Checks that `ty` has a kernel, `cols` is a whole number of blocks and `data` holds
    /// exactly `rows` rows.
    pub fn new(ty: GgmlType, rows: usize, cols: usize, data: &'a [u8]) -> Result<Self> {
        if ActKind::for_weight(ty).is_none() {
            return Err(Error::Kernel(format!(
                "no matrix kernel for {ty} weights (supported: F32, F16, Q4_0, Q4_1, Q5_0, \
                 Q5_1, Q8_0, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K)"
            )));
        }
        let row = ty.row_bytes(cols as u64).ok_or_else(|| {
            Error::Kernel(format!(
                "{ty} matrix: {cols} columns is not a multiple of the block length {}",
                ty.block_len()
            ))
        })?;
        let need = row.checked_mul(rows as u64);
        if need != Some(data.len() as u64) {
            return Err(Error::Kernel(format!(
                "{ty} matrix {rows}x{cols}: {} bytes given, {} expected",
                data.len(),
                need.map_or_else(|| "overflow".to_string(), |n| n.to_string())
            )));
        }
        Ok(Self {
            ty,
            rows,
            cols,
            data,
            repacked: None,
        })
    }

    /// A view of a tensor the model loader has already validated (type, shape and length).
    pub(crate) fn from_parts(ty: GgmlType, rows: usize, cols: usize, data: &'a [u8]) -> Self {
        Self {
            ty,
            rows,
            cols,
            data,
            repacked: None,
        }
    }

    /// This matrix with its rows also read from `r` by the kernels `r` was made for
    /// ([`repack`] of this matrix).
    ///
    /// # Panics
    /// If `r` does not have this matrix's rows.
    pub fn with_repacked(self, r: &'a Repacked) -> Self {
        assert_eq!(r.rows, self.rows, "repacked matrix rows");
        if r.ggml_layout {
            // The same bytes: every reader takes the copy as the matrix's data.
            assert_eq!(r.len(), self.data.len(), "copied matrix bytes");
            return Self {
                data: r.bytes(),
                repacked: None,
                ..self
            };
        }
        Self {
            repacked: Some(r),
            ..self
        }
    }

    /// Bytes the kernels stream for this matrix: the repacked copy's where there is one.
    pub fn bytes_read(&self) -> usize {
        self.repacked.map_or(self.data.len(), Repacked::len)
    }

    /// The repacked rows, if any, and the bytes of one of them.
    #[cfg(target_arch = "x86_64")]
    pub(crate) fn repacked(&self) -> Option<(&'a [u8], usize)> {
        self.repacked.map(|r| (r.bytes(), r.row_bytes))
    }

    /// Bytes of one row.
    pub fn row_bytes(&self) -> usize {
        self.cols / self.ty.block_len() * self.ty.block_bytes()
    }

    /// Raw bytes of row `r`.
    pub fn row(&self, r: usize) -> &'a [u8] {
        let rb = self.row_bytes();
        &self.data[r * rb..(r + 1) * rb]
    }

    /// Dequantizes row `r` into `out[..cols]` (embedding lookup).
    ///
    /// # Panics
    /// If `r >= rows` or `out` is shorter than `cols` (callers validate token ids).
    pub fn row_dequant(&self, r: usize, out: &mut [f32]) {
        assert!(r < self.rows, "row {r} out of range ({} rows)", self.rows);
        // Sizes and type were validated by `new`.
        if let Err(e) = dequantize_row(self.ty, self.row(r), &mut out[..self.cols]) {
            unreachable!("validated matrix: {e}");
        }
    }
}

/// How a [`QuantizedActs`] currently stores its rows.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ActLayout {
    /// ggml blocks (or f16/f32 values) of the given kind, one row after another.
    Blocks(ActKind),
    /// The packed Q8x4 layout of [`packed`] (AVX-512 tier with VBMI; Q4_0/Q4_1/Q5_0/Q8_0
    /// weights).
    Packed,
}

impl ActLayout {
    /// The layout `tier` multiplies with weights of type `w_ty`; `None` when the type has no
    /// kernel.
    pub(super) fn choose(tier: Tier, w_ty: GgmlType) -> Option<Self> {
        let kind = ActKind::for_weight(w_ty)?;
        #[cfg(target_arch = "x86_64")]
        let packed = matches!(tier, Tier::Avx512 { vbmi: true, .. });
        #[cfg(not(target_arch = "x86_64"))]
        let packed = {
            let _ = tier;
            false
        };
        let packed_ty = matches!(
            w_ty,
            GgmlType::Q4_0 | GgmlType::Q4_1 | GgmlType::Q5_0 | GgmlType::Q8_0
        );
        Some(if packed && packed_ty {
            ActLayout::Packed
        } else {
            ActLayout::Blocks(kind)
        })
    }

    /// Bytes of one row of `cols` elements, rounded up to a multiple of 64: a Q8_0 row's
    /// blocks are followed by their [`Q8Aux`] entries, a Q8_1 row's by their [`Q8_1Aux`].
    fn row_bytes(self, cols: usize) -> usize {
        match self {
            ActLayout::Blocks(k @ (ActKind::Q8_0 | ActKind::Q8_1)) => {
                // Both entries are 8 bytes.
                (aux_offset(k, cols) + cols / QK * size_of::<Q8Aux>()).next_multiple_of(64)
            }
            ActLayout::Blocks(k) => k.row_bytes(cols).next_multiple_of(64),
            ActLayout::Packed => packed::row_bytes(cols),
        }
    }

    /// Column granularity at which parts of a row can be quantized independently.
    pub fn align(self) -> usize {
        match self {
            ActLayout::Blocks(ActKind::Q8_0 | ActKind::Q8_1) => QK,
            ActLayout::Blocks(ActKind::Q8K) => QK_K,
            ActLayout::Blocks(_) => 1,
            ActLayout::Packed => packed::GROUP_ELEMS,
        }
    }
}

#[derive(Clone, Copy, bytemuck::Pod, bytemuck::Zeroable)]
#[repr(C, align(64))]
struct Line([u8; 64]);

/// Preallocated quantized activations: up to `max_rows` rows of up to `max_cols` elements in
/// whichever layout the next weight matrix needs on the chosen tier. Quantizing allocates
/// nothing; rows start on 64-byte boundaries.
pub struct QuantizedActs {
    buf: Vec<Line>,
    max_rows: usize,
    max_cols: usize,
    layout: ActLayout,
    tier: Tier,
    n_rows: usize,
    cols: usize,
    stride: usize,
}

impl std::fmt::Debug for QuantizedActs {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("QuantizedActs")
            .field("layout", &self.layout)
            .field("n_rows", &self.n_rows)
            .field("cols", &self.cols)
            .finish()
    }
}

impl QuantizedActs {
    pub fn new(max_rows: usize, max_cols: usize) -> Self {
        // f32 is the widest layout: 4 bytes per element, plus row padding.
        let row = (4 * max_cols).next_multiple_of(64) + 64;
        Self {
            buf: vec![Line([0; 64]); (max_rows * row).div_ceil(64)],
            max_rows,
            max_cols,
            layout: ActLayout::Blocks(ActKind::F32),
            tier: Tier::Scalar,
            n_rows: 0,
            cols: 0,
            stride: 0,
        }
    }

    pub fn layout(&self) -> ActLayout {
        self.layout
    }
    pub fn n_rows(&self) -> usize {
        self.n_rows
    }
    pub fn cols(&self) -> usize {
        self.cols
    }

    /// The ggml activation kind (`Q8_1` for the packed layout, which carries its sums).
    pub fn kind(&self) -> ActKind {
        match self.layout {
            ActLayout::Blocks(k) => k,
            ActLayout::Packed => ActKind::Q8_1,
        }
    }

    /// Sets the shape and layout for `n_rows` rows of `cols` values multiplied with weights of
    /// type `w_ty` on tier `isa`, and returns a writer that fills rows (possibly from several
    /// threads). Rows not written keep stale contents.
    ///
    /// # Panics
    /// If `w_ty` has no kernel, the shape exceeds the capacity, or `cols` is not a multiple
    /// of 32 for a quantized format.
    pub fn prepare(
        &mut self,
        isa: Isa,
        w_ty: GgmlType,
        n_rows: usize,
        cols: usize,
    ) -> ActsWriter<'_> {
        let tier = resolve(isa);
        let layout = ActLayout::choose(tier, w_ty)
            .unwrap_or_else(|| panic!("quantize_for: no kernel for {w_ty} weights"));
        assert!(
            n_rows <= self.max_rows && cols <= self.max_cols,
            "quantize_for: {n_rows}x{cols} exceeds the capacity {}x{}",
            self.max_rows,
            self.max_cols
        );
        if !matches!(layout, ActLayout::Blocks(ActKind::F16 | ActKind::F32)) {
            let bl = w_ty.block_len();
            assert!(
                cols.is_multiple_of(bl),
                "quantize_for: {cols} columns is not a multiple of {bl}"
            );
        }
        self.layout = layout;
        self.tier = tier;
        self.n_rows = n_rows;
        self.cols = cols;
        self.stride = layout.row_bytes(cols);
        ActsWriter {
            base: self.buf.as_mut_ptr() as *mut u8,
            layout,
            tier,
            cols,
            stride: self.stride,
            n_rows,
            _borrow: std::marker::PhantomData,
        }
    }

    /// Quantizes `n_rows` rows of `cols` values (`x` row-major) for weights of type `w_ty`.
    ///
    /// # Panics
    /// As [`QuantizedActs::prepare`], or if `x` is shorter than `n_rows * cols`.
    pub fn quantize_for(
        &mut self,
        isa: Isa,
        w_ty: GgmlType,
        x: &[f32],
        n_rows: usize,
        cols: usize,
    ) {
        assert!(
            x.len() >= n_rows * cols,
            "quantize_for: x holds {} values, {n_rows}x{cols} needed",
            x.len()
        );
        let mut w = self.prepare(isa, w_ty, n_rows, cols);
        for r in 0..n_rows {
            w.row(r, &x[r * cols..(r + 1) * cols], None);
        }
    }

    /// Where row `a` starts (`a <= n_rows()`; one past the rows is the end), and the bytes
    /// from one row to the next: the packed product reads the rows from there.
    #[cfg(target_arch = "x86_64")]
    pub(super) fn rows_from(&self, a: usize) -> (*const u8, usize) {
        assert!(a <= self.n_rows, "activation row {a} of {}", self.n_rows);
        let bytes: &[u8] = bytemuck::cast_slice(&self.buf);
        (bytes[a * self.stride..].as_ptr(), self.stride)
    }

    fn row_bytes_of(&self, r: usize) -> &[u8] {
        assert!(r < self.n_rows, "activation row {r} of {}", self.n_rows);
        let bytes: &[u8] = bytemuck::cast_slice(&self.buf);
        &bytes[r * self.stride..(r + 1) * self.stride]
    }

    /// Row `r` of the last quantization in a ggml block layout.
    ///
    /// # Panics
    /// If `r >= n_rows()` or the layout is packed (see [`QuantizedActs::packed_row`]).
    pub fn row(&self, r: usize) -> ActRow<'_> {
        let ActLayout::Blocks(kind) = self.layout else {
            panic!("activation row {r}: packed layout (use packed_row)");
        };
        let b = &self.row_bytes_of(r)[..kind.row_bytes(self.cols)];
        // Rows start on 64-byte boundaries: every view is aligned for its element type, so
        // these casts cannot fail.
        match kind {
            ActKind::Q8_0 => ActRow::Q8_0(bytemuck::cast_slice(b)),
            ActKind::Q8_1 => ActRow::Q8_1(bytemuck::cast_slice(b)),
            ActKind::Q8K => ActRow::Q8K(bytemuck::cast_slice(b)),
            ActKind::F16 => {
                let bits: &[u16] = bytemuck::cast_slice(b);
                ActRow::F16(bits.reinterpret_cast())
            }
            ActKind::F32 => ActRow::F32(bytemuck::cast_slice(b)),
        }
    }

    /// The [`Q8Aux`] entries of Q8_0 row `r` of the last quantization, one per block.
    ///
    /// # Panics
    /// If `r >= n_rows()` or the layout is not Q8_0 blocks.
    pub fn q8_0_aux(&self, r: usize) -> &[Q8Aux] {
        self.entries(r, ActKind::Q8_0)
    }

    /// The [`Q8_1Aux`] entries of Q8_1 row `r` of the last quantization, one per block.
    ///
    /// # Panics
    /// If `r >= n_rows()` or the layout is not Q8_1 blocks.
    pub fn q8_1_aux(&self, r: usize) -> &[Q8_1Aux] {
        self.entries(r, ActKind::Q8_1)
    }

    /// The per-block entries (8 bytes each) stored after the blocks of row `r`, whose layout
    /// must be `kind`'s blocks.
    fn entries<T: bytemuck::Pod>(&self, r: usize, kind: ActKind) -> &[T] {
        assert_eq!(
            self.layout,
            ActLayout::Blocks(kind),
            "activation row {r}: not {kind:?} blocks"
        );
        let at = aux_offset(kind, self.cols);
        let b = &self.row_bytes_of(r)[at..at + self.cols / QK * size_of::<T>()];
        // Rows start on 64-byte boundaries and `at` is a multiple of 8: aligned.
        bytemuck::cast_slice(b)
    }

    /// Row `r` of the last quantization in the packed layout.
    ///
    /// # Panics
    /// If `r >= n_rows()` or the layout is not packed.
    pub fn packed_row(&self, r: usize) -> packed::PackedRow<'_> {
        assert_eq!(
            self.layout,
            ActLayout::Packed,
            "activation row {r}: not packed"
        );
        packed::PackedRow::new(self.row_bytes_of(r), self.cols / QK)
    }
}

/// Writes rows (or aligned column ranges of rows) of a [`QuantizedActs`]; shareable across
/// the workers of one pool job, each writing its own rows or ranges.
pub struct ActsWriter<'a> {
    base: *mut u8,
    layout: ActLayout,
    tier: Tier,
    cols: usize,
    stride: usize,
    n_rows: usize,
    _borrow: std::marker::PhantomData<&'a mut QuantizedActs>,
}

// SAFETY: shared use only reaches `write_cols`, whose `unsafe` contract excludes overlapping
// concurrent writes; `row` needs `&mut`. The buffer is borrowed mutably for 'a.
unsafe impl Send for ActsWriter<'_> {}
// SAFETY: see above.
unsafe impl Sync for ActsWriter<'_> {}

impl ActsWriter<'_> {
    pub fn layout(&self) -> ActLayout {
        self.layout
    }

    /// Quantizes a whole row `r` from `x[..cols]`; with `norm = Some((scale, g))` the values
    /// are `(x · scale) · g` (a fused RMSNorm).
    ///
    /// # Panics
    /// If `r` is out of range or `x` (or `g`) is shorter than the row.
    pub fn row(&mut self, r: usize, x: &[f32], norm: Option<(f32, &[f32])>) {
        // SAFETY: `&mut self` excludes every other write through this writer.
        unsafe { self.write_cols(r, 0, &x[..self.cols], norm) }
    }

    /// Quantizes columns `c0..c0 + x.len()` of row `r` (`c0` and the length multiples of
    /// [`ActLayout::align`], or the range ending at the row's end).
    ///
    /// # Safety
    /// No other thread writes the same row and column range concurrently, and nothing reads
    /// it until the writes are complete (the pool's join orders them).
    ///
    /// # Panics
    /// If the range is out of bounds or misaligned.
    pub unsafe fn write_cols(&self, r: usize, c0: usize, x: &[f32], norm: Option<(f32, &[f32])>) {
        let n = x.len();
        let al = self.layout.align();
        assert!(r < self.n_rows, "activation row {r} of {}", self.n_rows);
        assert!(
            c0 + n <= self.cols
                && c0.is_multiple_of(al)
                && (n.is_multiple_of(al) || c0 + n == self.cols)
                && n.is_multiple_of(if al > 1 { QK } else { 1 }),
            "activation columns {c0}..{} of {} (alignment {al})",
            c0 + n,
            self.cols
        );
        if let Some((_, g)) = norm {
            assert!(g.len() >= n, "norm weights: {} for {n} columns", g.len());
        }
        // SAFETY: row r lies inside the buffer (n_rows * stride <= capacity, checked in
        // `prepare`); the column range is inside the row; exclusivity is the caller's.
        let row = unsafe { self.base.add(r * self.stride) };
        match self.layout {
            ActLayout::Packed => {
                #[cfg(target_arch = "x86_64")]
                // SAFETY: the packed layout is only chosen on an AVX-512 + VBMI tier; the
                // groups written are c0/128.. inside the row's groups.
                unsafe {
                    pack512::quantize_packed(
                        x.as_ptr(),
                        n / QK,
                        norm.map(|(s, g)| (s, g.as_ptr())),
                        row,
                        packed::groups(self.cols),
                        c0 / packed::GROUP_ELEMS,
                    );
                }
            }
            ActLayout::Blocks(kind) => {
                let isa = match self.tier {
                    #[cfg(target_arch = "x86_64")]
                    Tier::Avx2 => Isa::Avx2,
                    #[cfg(target_arch = "x86_64")]
                    Tier::Avx512 { .. } => Isa::Avx512,
                    #[cfg(target_arch = "aarch64")]
                    Tier::Neon => Isa::Neon,
                    Tier::Scalar => Isa::Scalar,
                };
                let off = kind.row_bytes(c0);
                let len = kind.row_bytes(n);
                // SAFETY: bytes [off, off + len) of the row are inside it and owned by this
                // call (caller contract); the row start is 64-byte aligned and `off` is a
                // multiple of the element size, so the typed views below are aligned.
                let dst = unsafe { std::slice::from_raw_parts_mut(row.add(off), len) };
                match kind {
                    ActKind::Q8_0 | ActKind::Q8_1 => {
                        let mut tmp = [0.0f32; QK];
                        for (b, xb) in x.chunks_exact(QK).enumerate() {
                            let src = norm_scaled(xb, norm, b * QK, &mut tmp);
                            if kind == ActKind::Q8_0 {
                                let out: &mut [BlockQ8_0] =
                                    bytemuck::cast_slice_mut(&mut dst[b * 34..(b + 1) * 34]);
                                quantize_row_q8_0(isa, src, out);
                                let aux = Q8Aux::of(&out[0]);
                                let at = aux_offset(kind, self.cols)
                                    + (c0 / QK + b) * size_of::<Q8Aux>();
                                // SAFETY: entry c0/32 + b of the row's aux entries lies inside
                                // the row (`ActLayout::row_bytes`) and belongs to the blocks
                                // this call writes (caller contract); 8-byte aligned.
                                unsafe { (row.add(at) as *mut Q8Aux).write(aux) };
                            } else {
                                let out: &mut [BlockQ8_1] =
                                    bytemuck::cast_slice_mut(&mut dst[b * 36..(b + 1) * 36]);
                                quantize_row_q8_1(isa, src, out);
                                let aux = Q8_1Aux::of(&out[0]);
                                let at = aux_offset(kind, self.cols)
                                    + (c0 / QK + b) * size_of::<Q8_1Aux>();
                                // SAFETY: as for the Q8_0 entries above.
                                unsafe { (row.add(at) as *mut Q8_1Aux).write(aux) };
                            }
                        }
                    }
                    ActKind::Q8K => {
                        let mut tmp = [0.0f32; QK_K];
                        for (b, xb) in x.chunks_exact(QK_K).enumerate() {
                            let src = norm_scaled(xb, norm, b * QK_K, &mut tmp);
                            let out: &mut [BlockQ8K] =
                                bytemuck::cast_slice_mut(&mut dst[b * 292..(b + 1) * 292]);
                            quantize_q8k_tier(self.tier, src, out);
                        }
                    }
                    ActKind::F16 => {
                        let bits: &mut [u16] = bytemuck::cast_slice_mut(dst);
                        let out: &mut [f16] = bits.reinterpret_cast_mut();
                        for (i, (o, &v)) in out.iter_mut().zip(x).enumerate() {
                            let v = match norm {
                                Some((s, g)) => v * s * g[i],
                                None => v,
                            };
                            *o = f16::from_f32(v);
                        }
                    }
                    ActKind::F32 => {
                        let out: &mut [f32] = bytemuck::cast_slice_mut(dst);
                        for (i, (o, &v)) in out.iter_mut().zip(x).enumerate() {
                            *o = match norm {
                                Some((s, g)) => v * s * g[i],
                                None => v,
                            };
                        }
                    }
                }
            }
        }
    }
}

/// One block of activations as the quantizer reads it: `xb` itself, or, with an RMS norm
/// folded in, `xb[i] * scale * g[at + i]` written into `tmp` (at least `xb.len()` long).
fn norm_scaled<'t>(
    xb: &'t [f32],
    norm: Option<(f32, &[f32])>,
    at: usize,
    tmp: &'t mut [f32],
) -> &'t [f32] {
    match norm {
        Some((s, g)) => {
            let tmp = &mut tmp[..xb.len()];
            for ((t, &v), &w) in tmp.iter_mut().zip(xb).zip(&g[at..at + xb.len()]) {
                *t = v * s * w;
            }
            tmp
        }
        None => xb,
    }
}
