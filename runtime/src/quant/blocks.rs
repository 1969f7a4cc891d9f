//! ggml block formats: the `#[repr(C)]` layouts of the quantized blocks this runtime executes,
//! byte-for-byte as ggml stores them (ggml-common.h: `block_q4_0`, `block_q4_1`, `block_q8_0`,
//! `block_q8_1`), plus unaligned block readers over raw tensor bytes.
//!
//! Nibble layout (ggml): byte `j` of a 4-bit block holds element `j` in its low nibble and
//! element `j + 16` in its high nibble. Scales are IEEE binary16, little-endian.

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

const _: () = assert!(std::mem::size_of::<BlockQ4_0>() == 18);
const _: () = assert!(std::mem::size_of::<BlockQ4_1>() == 20);
const _: () = assert!(std::mem::size_of::<BlockQ8_0>() == 34);
const _: () = assert!(std::mem::size_of::<BlockQ8_1>() == 36);
const _: () = assert!(std::mem::align_of::<BlockQ8_1>() == 2);

// SAFETY: each struct is `repr(C)`, made only of `f16` (a `repr(transparent)` u16, every bit
// pattern valid) and byte arrays; the size asserts above equal the sum of the field sizes, so
// there is no padding. Zero bits are a valid value.
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
