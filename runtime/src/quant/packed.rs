//! The packed activation layout the AVX-512 matrix kernels read ("Q8x4"): the same integers
//! and scales as ggml's Q8_1 activation blocks, rearranged so that one 512-bit register holds
//! four blocks and every 32-bit lane belongs to one block.
//!
//! A row of `nb` blocks is stored as `ng = ceil(nb / 4)` groups (blocks past `nb` are zero):
//!
//! ```text
//! [ qs: ng × 128 bytes ][ d: ng × 4 f32 ][ s4: ng × 4 f32 ][ padding to 64 bytes ]
//! ```
//!
//! Within a group, `qs[64 v + 4 L + k]` (vector `v` in 0..2, lane `L` in 0..16, byte `k` in
//! 0..4) is element `16 v + 4 (L / 4) + k` of block `L % 4`. So the "low" register (`v = 0`)
//! holds elements 0..15 of each block — exactly the elements a Q4 weight byte stores in its
//! low nibble — and the "high" register elements 16..31. `d[b]` is the block's scale (the
//! f16 value, widened) and `s4[b]` a quarter of ggml's `s = f16(d · Σq)`: each block occupies
//! four lanes, so a lane-wise `m · s4` summed over the register adds `m · s` once.
//!
//! Rows whose groups fill whole units of four with at most a quarter of zero groups
//! ([`has_units`]: Qwen2.5's 896-wide rows, 7 groups) also carry the same blocks in *units*
//! after the groups, for the Q5_0 tiles that run in block lanes: unit `u` (groups
//! `4u..4u + 4`, zeros past `ng`) is [`UNIT_BYTES`] bytes,
//!
//! ```text
//! [ q: 8 × 64 bytes ][ d: 16 f32 ][ neg: 16 i32 ]
//! ```
//!
//! where 16-byte chunk `k` of register `4v + c` is chunk `c` of group `4u + k`'s register `v`
//! (so 32-bit lane `4k + b` of every register belongs to block `b` of that group: eight
//! registers hold the whole block), `d[4k + b]` is its scale and `neg[4k + b] = -16 · Σq`.
//!
//! The scalar functions here convert between this layout and ggml blocks; they define the
//! layout for the tests and for any tier that wants to read it.

use half::f16;

use super::blocks::{BlockQ8_1, QK};

/// Blocks per group.
pub const GROUP_BLOCKS: usize = 4;
/// Elements per group.
pub const GROUP_ELEMS: usize = GROUP_BLOCKS * QK;
/// Quant bytes per group.
pub const GROUP_QS: usize = 128;

/// Groups of a row of `cols` elements (`cols` a multiple of 32).
pub const fn groups(cols: usize) -> usize {
    (cols / QK).div_ceil(GROUP_BLOCKS)
}

/// Bytes of one unit (see the module docs).
pub const UNIT_BYTES: usize = 640;

/// Whether a row of `ng` groups carries units: the zero groups padding it to whole units of
/// four are at most a quarter of its groups. A function of the row width alone, so that every
/// tile shape of a matrix runs the same arithmetic.
pub const fn has_units(ng: usize) -> bool {
    ng > 0 && 4 * ng.div_ceil(4) - ng <= ng / 4
}

/// Units of a row of `cols` elements (0 without units).
pub const fn units(cols: usize) -> usize {
    let ng = groups(cols);
    if has_units(ng) { ng.div_ceil(4) } else { 0 }
}

/// Where a row's units start (a multiple of 64).
pub const fn units_offset(cols: usize) -> usize {
    (groups(cols) * (GROUP_QS + 32)).next_multiple_of(64)
}

/// Bytes of one packed row of `cols` elements (a multiple of 64).
pub const fn row_bytes(cols: usize) -> usize {
    units_offset(cols) + units(cols) * UNIT_BYTES
}

/// Byte offset of quant `e` of block `b` in the units of a row of `cols` elements (which
/// must have units).
pub const fn unit_qs_offset(cols: usize, b: usize, e: usize) -> usize {
    let g = b / GROUP_BLOCKS;
    let (u, k, bi) = (g / 4, g % 4, b % GROUP_BLOCKS);
    let (v, c) = (e / 16, (e % 16) / 4);
    units_offset(cols) + u * UNIT_BYTES + 64 * (4 * v + c) + 16 * k + 4 * bi + e % 4
}

/// Byte offset of quant byte `k` of element `e` of block `b` within a row.
#[inline]
pub const fn qs_offset(b: usize, e: usize) -> usize {
    let g = b / GROUP_BLOCKS;
    let bi = b % GROUP_BLOCKS;
    let v = e / 16;
    let lane = 4 * ((e % 16) / 4) + bi;
    g * GROUP_QS + 64 * v + 4 * lane + e % 4
}

/// A borrowed packed row.
#[derive(Clone, Copy, Debug)]
pub struct PackedRow<'a> {
    bytes: &'a [u8],
    nb: usize,
}

impl<'a> PackedRow<'a> {
    /// `bytes` must hold [`row_bytes`]`(nb * 32)` bytes, 4-byte aligned.
    ///
    /// # Panics
    /// If `bytes` is too short or misaligned.
    pub fn new(bytes: &'a [u8], nb: usize) -> Self {
        assert!(
            bytes.len() >= row_bytes(nb * QK),
            "packed row: {} bytes for {nb} blocks",
            bytes.len()
        );
        assert_eq!(bytes.as_ptr() as usize % 4, 0, "packed row: misaligned");
        Self { bytes, nb }
    }

    /// Blocks in the row.
    pub fn n_blocks(&self) -> usize {
        self.nb
    }

    /// Elements in the row.
    pub fn len(&self) -> usize {
        self.nb * QK
    }

    pub fn is_empty(&self) -> bool {
        self.nb == 0
    }

    pub fn groups(&self) -> usize {
        self.nb.div_ceil(GROUP_BLOCKS)
    }

    fn f32_at(&self, off: usize) -> f32 {
        let b = &self.bytes[off..off + 4];
        f32::from_le_bytes([b[0], b[1], b[2], b[3]])
    }

    /// Scale of block `b`.
    pub fn d(&self, b: usize) -> f32 {
        self.f32_at(self.groups() * GROUP_QS + 4 * b)
    }

    /// `s / 4` of block `b`.
    pub fn s4(&self, b: usize) -> f32 {
        self.f32_at(self.groups() * (GROUP_QS + 16) + 4 * b)
    }

    /// Quant `e` of block `b`.
    pub fn q(&self, b: usize, e: usize) -> i8 {
        self.bytes[qs_offset(b, e)] as i8
    }

    /// The row's bytes, units included ([`row_bytes`]).
    pub fn as_bytes(&self) -> &'a [u8] {
        &self.bytes[..row_bytes(self.nb * QK)]
    }

    /// The row as ggml Q8_1 blocks (`d` and `s` rounded back to f16, which is exact).
    pub fn to_blocks(&self) -> Vec<BlockQ8_1> {
        (0..self.nb)
            .map(|b| {
                let mut qs = [0i8; QK];
                for (e, q) in qs.iter_mut().enumerate() {
                    *q = self.q(b, e);
                }
                BlockQ8_1 {
                    d: f16::from_f32(self.d(b)),
                    s: f16::from_f32(self.s4(b) * 4.0),
                    qs,
                }
            })
            .collect()
    }
}

/// Writes ggml Q8_1 blocks into a packed row (`out` holds [`row_bytes`] bytes; padding blocks
/// are zeroed). The reference for what the SIMD quantizers produce.
///
/// # Panics
/// If `out` is too short.
pub fn pack_blocks(blocks: &[BlockQ8_1], out: &mut [u8]) {
    let nb = blocks.len();
    let ng = nb.div_ceil(GROUP_BLOCKS);
    assert!(
        out.len() >= row_bytes(nb * QK),
        "pack_blocks: output too short"
    );
    out[..row_bytes(nb * QK)].fill(0);
    for (b, blk) in blocks.iter().enumerate() {
        for (e, &q) in blk.qs.iter().enumerate() {
            out[qs_offset(b, e)] = q as u8;
        }
        let d = blk.d.to_f32().to_le_bytes();
        let s4 = (blk.s.to_f32() * 0.25).to_le_bytes();
        let od = ng * GROUP_QS + 4 * b;
        let os = ng * (GROUP_QS + 16) + 4 * b;
        out[od..od + 4].copy_from_slice(&d);
        out[os..os + 4].copy_from_slice(&s4);
        if units(nb * QK) > 0 {
            let cols = nb * QK;
            for (e, &q) in blk.qs.iter().enumerate() {
                out[unit_qs_offset(cols, b, e)] = q as u8;
            }
            let g = b / GROUP_BLOCKS;
            let lane = 4 * (g % 4) + b % GROUP_BLOCKS;
            let base = units_offset(cols) + g / 4 * UNIT_BYTES;
            let sum: i32 = blk.qs.iter().map(|&q| i32::from(q)).sum();
            out[base + 512 + 4 * lane..][..4].copy_from_slice(&d);
            out[base + 576 + 4 * lane..][..4].copy_from_slice(&(-16 * sum).to_le_bytes());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn offsets_cover_each_group_byte_once() {
        let mut seen = [false; GROUP_QS];
        for b in 0..GROUP_BLOCKS {
            for e in 0..QK {
                let o = qs_offset(b, e);
                assert!(!seen[o], "byte {o} twice");
                seen[o] = true;
            }
        }
        assert!(seen.iter().all(|&s| s));
        // lane 5 of the low register is bytes 4..8 of block 1
        assert_eq!(qs_offset(1, 4), 20);
        assert_eq!(qs_offset(1, 20), 64 + 20);
        assert_eq!(qs_offset(4, 0), 128);
    }

    /// The units of a row hold each quant byte of its blocks once, in their own bytes, and
    /// the registers' lanes follow the blocks: 28 blocks (7 groups) in two units.
    #[test]
    fn unit_offsets_cover_each_quant_once() {
        let cols = 28 * QK;
        assert_eq!(units(cols), 2);
        assert_eq!(units(20 * QK), 0, "5 groups: three of padding");
        assert_eq!(units(16 * QK), 1);
        let base = units_offset(cols);
        assert_eq!(base, (7 * 160usize).next_multiple_of(64));
        let mut seen = vec![false; 2 * UNIT_BYTES];
        for b in 0..28 {
            for e in 0..QK {
                let o = unit_qs_offset(cols, b, e) - base;
                assert!(
                    o % UNIT_BYTES < 512,
                    "block {b} element {e} outside the registers"
                );
                assert!(!seen[o], "byte {o} twice");
                seen[o] = true;
                // lane (o % 64) / 4 of its register is lane 4k + b of the block's group
                let g = b / 4;
                assert_eq!(o / UNIT_BYTES, g / 4);
                assert_eq!((o % 64) / 4, 4 * (g % 4) + b % 4, "block {b} element {e}");
            }
        }
        // every register byte of the two units' first seven groups used, the eighth's none
        let used = seen.iter().filter(|&&s| s).count();
        assert_eq!(used, 28 * QK);
    }

    #[test]
    fn pack_round_trips() {
        let blocks: Vec<BlockQ8_1> = (0..6)
            .map(|b| {
                let mut qs = [0i8; QK];
                for (e, q) in qs.iter_mut().enumerate() {
                    *q = ((b * 37 + e * 11) % 255) as i8;
                }
                BlockQ8_1 {
                    d: f16::from_f32(0.01 * (b as f32 + 1.0)),
                    s: f16::from_f32(-3.5 * b as f32),
                    qs,
                }
            })
            .collect();
        let mut buf = vec![0u32; row_bytes(6 * QK) / 4];
        let bytes: &mut [u8] = bytemuck::cast_slice_mut(&mut buf);
        pack_blocks(&blocks, bytes);
        let row = PackedRow::new(bytemuck::cast_slice(&buf), 6);
        assert_eq!(row.to_blocks(), blocks);
        assert_eq!(row.groups(), 2);
        // padding blocks of the last group are zero
        assert_eq!(row.d(7), 0.0);
        assert_eq!(row.q(7, 31), 0);
    }
}
