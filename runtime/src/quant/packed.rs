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

/// Bytes of one packed row of `cols` elements (a multiple of 64).
pub const fn row_bytes(cols: usize) -> usize {
    (groups(cols) * (GROUP_QS + 32)).next_multiple_of(64)
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
