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

mod copies;
mod entries;
pub use copies::{COPY_CHUNK, Repacked, repack, repack_all, repacked_len};
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
