//! The per-block entries a Q8_0 or Q8_1 activation row of [`super::QuantizedActs`] stores
//! after its blocks ([`Q8Aux`], [`Q8_1Aux`]), and where they start.

use crate::quant::{ActKind, BlockQ8_0, BlockQ8_1};

/// What the quantizer knows of each Q8_0 activation block and stores after the row's blocks
/// so that the kernels need not recompute it per weight row: the block's scale as f32 (the
/// f16 `d` widened, exact) and sixteen times the sum of its 32 quants. The kernels of
/// unsigned weight quants (Q4_0 and Q5_0 on AVX2) take their offset term `off · Σq` from
/// here: Q5_0's (offset 16) as stored, one broadcast and a subtraction per block, Q4_0's
/// (offset 8) halved.
#[derive(Clone, Copy, Debug, PartialEq, bytemuck::Pod, bytemuck::Zeroable)]
#[repr(C)]
pub struct Q8Aux {
    /// The block's `d`, widened.
    pub d: f32,
    /// `16 · Σ qs` (at most 16 · 32 · 127 in magnitude; even, so halving it is exact).
    pub off16: i32,
}

impl Q8Aux {
    /// The entry of block `b`.
    pub fn of(b: &BlockQ8_0) -> Self {
        Q8Aux {
            d: b.d.to_f32(),
            off16: 16 * b.qs.iter().map(|&q| i32::from(q)).sum::<i32>(),
        }
    }
}

/// What the quantizer stores after a Q8_1 activation row's blocks, one entry per block: its
/// `d` and `s` widened to f32 (exact), so that a kernel broadcasts them with one load each
/// instead of widening the f16 values per weight row (the AVX2 Q4_1 prefill tile).
#[derive(Clone, Copy, Debug, PartialEq, bytemuck::Pod, bytemuck::Zeroable)]
#[repr(C)]
pub struct Q8_1Aux {
    /// The block's `d`, widened.
    pub d: f32,
    /// The block's `s` (`d · Σ qs`, rounded to f16 by the quantizer), widened.
    pub s: f32,
}

impl Q8_1Aux {
    /// The entry of block `b`.
    pub fn of(b: &BlockQ8_1) -> Self {
        Q8_1Aux {
            d: b.d.to_f32(),
            s: b.s.to_f32(),
        }
    }
}

/// Where a Q8_0 or Q8_1 row of `cols` elements keeps its entries ([`Q8Aux`], [`Q8_1Aux`]):
/// after the blocks, on an 8-byte boundary.
pub(super) fn aux_offset(kind: ActKind, cols: usize) -> usize {
    kind.row_bytes(cols).next_multiple_of(8)
}
