//! ggml block formats: the `#[repr(C)]` layouts of the quantized blocks this runtime executes,
//! byte-for-byte as ggml stores them (ggml-common.h: `block_q4_0`, `block_q4_1`, `block_q5_0`,
//! `block_q5_1`, `block_q8_0`, `block_q8_1`, and the 256-element "K" super-blocks
//! `block_q2_K` … `block_q6_K`, `block_q8_K`), plus unaligned block readers over raw tensor
//! bytes.
//!
//! Nibble layout (ggml): byte `j` of a 4-bit block holds element `j` in its low nibble and
//! element `j + 16` in its high nibble. Scales are IEEE binary16, little-endian (Q8_K: f32).

use bytemuck::{Pod, Zeroable};
use half::f16;

/// Elements per block of every format here (ggml `QK4_0 = QK4_1 = QK8_0 = QK8_1 = 32`).
pub const QK: usize = 32;

/// ggml `block_q4_0`: `x = d * (q - 8)`, q in 0..=15.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct BlockQ4_0 {
    pub d: f16,
    pub qs: [u8; QK / 2],
}

/// ggml `block_q4_1`: `x = d * q + m`, q in 0..=15.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct BlockQ4_1 {
    pub d: f16,
    pub m: f16,
    pub qs: [u8; QK / 2],
}

/// ggml `block_q8_0`: `x = d * q`, q in -127..=127.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct BlockQ8_0 {
    pub d: f16,
    pub qs: [i8; QK],
}

/// ggml `block_q8_1`: `x = d * q`, with `s = d * sum(q)` stored for the Q4_1 min term.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct BlockQ8_1 {
    pub d: f16,
    pub s: f16,
    pub qs: [i8; QK],
}

/// ggml `block_q5_0`: `x = d * (q - 16)`, q in 0..=31; bit `i` of `qh` (little-endian u32)
/// is bit 4 of element `i`.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct BlockQ5_0 {
    pub d: f16,
    pub qh: [u8; 4],
    pub qs: [u8; QK / 2],
}

/// ggml `block_q5_1`: `x = d * q + m`, q in 0..=31 (high bits as [`BlockQ5_0`]).
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct BlockQ5_1 {
    pub d: f16,
    pub m: f16,
    pub qh: [u8; 4],
    pub qs: [u8; QK / 2],
}

/// Elements per K-quant super-block (ggml `QK_K`).
pub const QK_K: usize = 256;

/// ggml `block_q2_K`: 16 groups of 16; `x = d * (sc & 15) * q - dmin * (sc >> 4)`, q in 0..=3.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct BlockQ2K {
    pub scales: [u8; QK_K / 16],
    pub qs: [u8; QK_K / 4],
    pub d: f16,
    pub dmin: f16,
}

/// ggml `block_q3_K`: 16 groups of 16 with 6-bit scales packed in 12 bytes;
/// `x = d * (sc - 32) * (q - 4 * !hbit)`, low bits q in 0..=3.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct BlockQ3K {
    pub hmask: [u8; QK_K / 8],
    pub qs: [u8; QK_K / 4],
    pub scales: [u8; 12],
    pub d: f16,
}

/// ggml `block_q4_K`: 8 groups of 32 with 6-bit scales and mins packed in 12 bytes;
/// `x = d * sc * q - dmin * m`, q in 0..=15.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct BlockQ4K {
    pub d: f16,
    pub dmin: f16,
    pub scales: [u8; 12],
    pub qs: [u8; QK_K / 2],
}

/// ggml `block_q5_K`: as [`BlockQ4K`] with a fifth bit per element in `qh`; q in 0..=31.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct BlockQ5K {
    pub d: f16,
    pub dmin: f16,
    pub scales: [u8; 12],
    pub qh: [u8; QK_K / 8],
    pub qs: [u8; QK_K / 2],
}

/// ggml `block_q6_K`: 16 groups of 16 with signed 8-bit scales; `x = d * sc * (q - 32)`,
/// q in 0..=63 (low 4 bits in `ql`, high 2 in `qh`).
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct BlockQ6K {
    pub ql: [u8; QK_K / 2],
    pub qh: [u8; QK_K / 4],
    pub scales: [i8; QK_K / 16],
    pub d: f16,
}

/// ggml `block_q8_K` (activations of every K-quant product): `x = d * q`, `d` in f32, and
/// `bsums[g]` the sum of the 16 quants of group `g`.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct BlockQ8K {
    pub d: f32,
    pub qs: [i8; QK_K],
    pub bsums: [i16; QK_K / 16],
}

const _: () = assert!(std::mem::size_of::<BlockQ4_0>() == 18);
const _: () = assert!(std::mem::size_of::<BlockQ4_1>() == 20);
const _: () = assert!(std::mem::size_of::<BlockQ8_0>() == 34);
const _: () = assert!(std::mem::size_of::<BlockQ8_1>() == 36);
const _: () = assert!(std::mem::align_of::<BlockQ8_1>() == 2);
const _: () = assert!(std::mem::size_of::<BlockQ5_0>() == 22);
const _: () = assert!(std::mem::size_of::<BlockQ5_1>() == 24);
const _: () = assert!(std::mem::size_of::<BlockQ2K>() == 84);
const _: () = assert!(std::mem::size_of::<BlockQ3K>() == 110);
const _: () = assert!(std::mem::size_of::<BlockQ4K>() == 144);
const _: () = assert!(std::mem::size_of::<BlockQ5K>() == 176);
const _: () = assert!(std::mem::size_of::<BlockQ6K>() == 210);
const _: () = assert!(std::mem::size_of::<BlockQ8K>() == 292);
const _: () = assert!(std::mem::align_of::<BlockQ8K>() == 4);

// SAFETY: each struct is `repr(C)`, made only of `f16` (a `repr(transparent)` u16, every bit
// pattern valid), f32, i16 and byte arrays; the size asserts above equal the sum of the field
// sizes, so there is no padding. Zero bits are a valid value.
unsafe impl Zeroable for BlockQ4_0 {}
// SAFETY: see above.
unsafe impl Pod for BlockQ4_0 {}
// SAFETY: see above.
unsafe impl Zeroable for BlockQ4_1 {}
// SAFETY: see above.
unsafe impl Pod for BlockQ4_1 {}
// SAFETY: see above.
unsafe impl Zeroable for BlockQ8_0 {}
// SAFETY: see above.
unsafe impl Pod for BlockQ8_0 {}
// SAFETY: see above.
unsafe impl Zeroable for BlockQ8_1 {}
// SAFETY: see above.
unsafe impl Pod for BlockQ8_1 {}

// SAFETY: see above.
unsafe impl Zeroable for BlockQ5_0 {}
// SAFETY: see above.
unsafe impl Pod for BlockQ5_0 {}
// SAFETY: see above.
unsafe impl Zeroable for BlockQ5_1 {}
// SAFETY: see above.
unsafe impl Pod for BlockQ5_1 {}
// SAFETY: see above.
unsafe impl Zeroable for BlockQ2K {}
// SAFETY: see above.
unsafe impl Pod for BlockQ2K {}
// SAFETY: see above.
unsafe impl Zeroable for BlockQ3K {}
// SAFETY: see above.
unsafe impl Pod for BlockQ3K {}
// SAFETY: see above.
unsafe impl Zeroable for BlockQ4K {}
// SAFETY: see above.
unsafe impl Pod for BlockQ4K {}
// SAFETY: see above.
unsafe impl Zeroable for BlockQ5K {}
// SAFETY: see above.
unsafe impl Pod for BlockQ5K {}
// SAFETY: see above.
unsafe impl Zeroable for BlockQ6K {}
// SAFETY: see above.
unsafe impl Pod for BlockQ6K {}
// SAFETY: see above.
unsafe impl Zeroable for BlockQ8K {}
// SAFETY: see above.
unsafe impl Pod for BlockQ8K {}

impl Default for BlockQ8K {
    fn default() -> Self {
        Self::zeroed()
    }
}

impl Default for BlockQ8_0 {
    fn default() -> Self {
        Self::zeroed()
    }
}

impl Default for BlockQ8_1 {
    fn default() -> Self {
        Self::zeroed()
    }
}

/// Reads block `i` of type `T` from raw bytes at any alignment. Callers have checked that
/// `bytes` holds at least `i + 1` blocks.
#[inline(always)]
pub fn read_block<T: Pod>(bytes: &[u8], i: usize) -> T {
    let sz = std::mem::size_of::<T>();
    bytemuck::pod_read_unaligned(&bytes[i * sz..(i + 1) * sz])
}

/// Reads a little-endian f16 at byte offset `off` and widens it to f32.
#[inline(always)]
pub fn f16_at(bytes: &[u8], off: usize) -> f32 {
    f16::from_bits(u16::from_le_bytes([bytes[off], bytes[off + 1]])).to_f32()
}

/// Views blocks as their raw bytes (the layout GGUF stores).
pub fn as_bytes<T: Pod>(blocks: &[T]) -> &[u8] {
    bytemuck::cast_slice(blocks)
}
