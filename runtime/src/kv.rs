//! Ring KV cache: one page-aligned anonymous mapping per session, allocated once.
//!
//! Layout ([`KvType::F16`], f16 elements): `[K | V]`, each `[layer][kv_head][slot…]` over the
//! capacity rounded up to 16 slots, so that the attention scan over the slots of one head
//! reads contiguous memory. Values are `[slot][head_dim]`; keys are in tiles of 16 slots
//! stored dimension-major (`[slot / 16][head_dim][slot % 16]`, see
//! [`crate::quant::attn::key_index`]), so that the scores of 16 slots take one load per
//! dimension. [`KvType::Q8_0`] (ggml's Q8_0 rule, 32 values per f16 scale:
//! [`crate::quant::attn::quantize_q8_0`]) stores the same positions as signed bytes,
//! `[Kq | Vq | K scales | V scales]`: keys in tiles of 16 slots by quads of 4 dimensions
//! (`[slot / 16][head_dim / 4][slot % 16][4]`, see [`crate::quant::attn::key_index_q8`]:
//! one 64-byte load feeds an integer dot product per slot), values by pairs of slots
//! (`[slot / 2][head_dim][slot % 2]`, [`crate::quant::attn::value_index_q8`]), key
//! scales `[layer][kv_head][slot / 16][head_dim / 32][slot % 16]`, value scales the same (so
//! that a tile's 16 scales of a group are one load) — 34 bytes per 32 values instead of 64.
//! Every slot remembers
//! the absolute position of the token stored in it; attention masks by position, so the
//! order of slots in memory does not matter and the write index may wrap.
//!
//! When the ring is full the policy decides: [`KvPolicy::Error`] (default) refuses the token,
//! [`KvPolicy::Sliding`] keeps the first `sinks` slots forever (attention sinks, as in
//! StreamingLLM) and overwrites the oldest of the others. Keys keep the rotary phase of the
//! position they were written at (no re-rotation). `truncate` rewinds the cache to a shorter
//! prefix so that a shared prompt prefix can be reused.
//!
//! Nothing here allocates after [`KvCache::new`].

use crate::error::{Error, Result};
use crate::quant::attn::{
    KEY_TILE, Q8_GROUP, key_index, key_index_q8, quantize_q8_0, scale_index, value_index_q8,
};
use half::f16;
use memmap2::MmapMut;

/// What happens when a token arrives and every slot is taken.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum KvPolicy {
    /// Refuse with [`Error::KvFull`].
    Error,
    /// Keep `sinks` first tokens, overwrite the oldest of the rest.
    Sliding { sinks: usize },
}

impl std::str::FromStr for KvPolicy {
    type Err = Error;
    /// `error`, `sliding` (4 sinks) or `sliding:N`.
    fn from_str(s: &str) -> Result<Self> {
        match s {
            "error" => Ok(KvPolicy::Error),
            "sliding" => Ok(KvPolicy::Sliding { sinks: 4 }),
            _ => {
                if let Some(n) = s.strip_prefix("sliding:") {
                    let sinks = n.parse::<usize>().map_err(|_| Error::InvalidArgument {
                        what: "kv-policy".into(),
                        reason: format!("`{s}`: sink count `{n}` is not a number"),
                    })?;
                    Ok(KvPolicy::Sliding { sinks })
                } else {
                    Err(Error::InvalidArgument {
                        what: "kv-policy".into(),
                        reason: format!("`{s}`: expected error, sliding or sliding:N"),
                    })
                }
            }
        }
    }
}

/// The spelling [`KvPolicy::from_str`] reads back: `error` or `sliding:N`.
impl std::fmt::Display for KvPolicy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            KvPolicy::Error => f.write_str("error"),
            KvPolicy::Sliding { sinks } => write!(f, "sliding:{sinks}"),
        }
    }
}

/// How K and V are stored (the same type for both, as `-ctk`/`-ctv` set in llama.cpp).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum KvType {
    /// f16, rounded to nearest even.
    #[default]
    #[serde(rename = "f16")]
    F16,
    /// ggml's Q8_0: groups of 32 values as signed bytes times one f16 scale (head sizes a
    /// multiple of 32).
    #[serde(rename = "q8_0")]
    Q8_0,
}

impl KvType {
    /// Bytes that `values` cached values take (a multiple of 32 for Q8_0).
    pub fn bytes_for(self, values: usize) -> Option<usize> {
        match self {
            KvType::F16 => values.checked_mul(std::mem::size_of::<f16>()),
            // Quants, then one f16 scale per 32 values.
            KvType::Q8_0 => values.checked_add(values / Q8_GROUP * std::mem::size_of::<f16>()),
        }
    }
}

impl std::str::FromStr for KvType {
    type Err = Error;
    /// `f16` or `q8_0`.
    fn from_str(s: &str) -> Result<Self> {
        match s {
            "f16" => Ok(KvType::F16),
            "q8_0" => Ok(KvType::Q8_0),
            _ => Err(Error::InvalidArgument {
                what: "kv-type".into(),
                reason: format!("`{s}`: expected f16 or q8_0"),
            }),
        }
    }
}

impl std::fmt::Display for KvType {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            KvType::F16 => "f16",
            KvType::Q8_0 => "q8_0",
        })
    }
}

/// Geometry of a cache.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct KvShape {
    pub n_layers: usize,
    pub n_kv_heads: usize,
    pub head_dim: usize,
    /// Number of token slots (`max_seq_len`).
    pub capacity: usize,
    pub ty: KvType,
}

/// One KV head of a cache as stored (all slots of the capacity rounded up to 16; only the
/// used ones are valid).
#[derive(Clone, Copy, Debug)]
pub enum KvHead<'a> {
    /// Keys in key tiles ([`key_index`]), values `[slot][head_dim]`.
    F16 { keys: &'a [f16], values: &'a [f16] },
    /// The same positions as signed bytes (keys in [`key_index_q8`] tiles, values in
    /// [`value_index_q8`] pairs), with their scales (see the module layout).
    Q8_0 {
        keys: &'a [i8],
        key_scales: &'a [f16],
        values: &'a [i8],
        value_scales: &'a [f16],
    },
}

impl KvHead<'_> {
    /// Dimension `d` of the key in slot `s`, as attention reads it.
    pub fn key(&self, hd: usize, s: usize, d: usize) -> f32 {
        match *self {
            KvHead::F16 { keys, .. } => keys[key_index(hd, s, d)].to_f32(),
            KvHead::Q8_0 {
                keys, key_scales, ..
            } => crate::quant::attn::key_q8_0(keys, key_scales, hd, s, d),
        }
    }

    /// Dimension `d` of the value in slot `s`, as attention reads it.
    pub fn value(&self, hd: usize, s: usize, d: usize) -> f32 {
        match *self {
            KvHead::F16 { values, .. } => values[s * hd + d].to_f32(),
            KvHead::Q8_0 {
                values,
                value_scales,
                ..
            } => crate::quant::attn::value_q8_0(values, value_scales, hd, s, d),
        }
    }
}

impl KvShape {
    /// Slots stored per head: the capacity rounded up to a whole key tile.
    fn padded(&self) -> Option<usize> {
        self.capacity.checked_next_multiple_of(KEY_TILE)
    }

    /// Values of one of K or V.
    fn elems(&self) -> Option<usize> {
        self.n_layers
            .checked_mul(self.n_kv_heads)?
            .checked_mul(self.padded()?)?
            .checked_mul(self.head_dim)
    }

    /// Bytes of the whole mapping (K and V).
    pub fn bytes(&self) -> Option<usize> {
        self.ty.bytes_for(self.elems()?)?.checked_mul(2)
    }
}

pub struct KvCache {
    shape: KvShape,
    map: MmapMut,
    /// Absolute position of the token in each slot (valid for `slot < used`).
    positions: Vec<u32>,
    /// Slots holding a token (grows to `capacity`, then stays).
    used: usize,
    /// Next slot to write once the cache has wrapped (ring part only).
    next: usize,
    /// Total tokens ever written since the last reset/truncate point (logical length).
    logical_len: usize,
    wrapped: bool,
    policy: KvPolicy,
}

impl KvCache {
    /// Maps the whole cache at once. Pages are touched lazily by the kernel, so a large
    /// `capacity` costs address space, not resident memory, until used.
    pub fn new(shape: KvShape, policy: KvPolicy) -> Result<Self> {
        if shape.capacity == 0
            || shape.n_layers == 0
            || shape.n_kv_heads == 0
            || shape.head_dim == 0
        {
            return Err(Error::Kv(format!("empty cache geometry {shape:?}")));
        }
        if shape.ty == KvType::Q8_0 && !shape.head_dim.is_multiple_of(Q8_GROUP) {
            return Err(Error::InvalidArgument {
                what: "kv-type".into(),
                reason: format!(
                    "q8_0 stores groups of {Q8_GROUP} values; the model's head size {} is not a multiple of {Q8_GROUP}",
                    shape.head_dim
                ),
            });
        }
        if let KvPolicy::Sliding { sinks } = policy
            && sinks >= shape.capacity
        {
            return Err(Error::InvalidArgument {
                what: "kv-policy".into(),
                reason: format!(
                    "{sinks} attention sinks leave no sliding slots in a cache of {}",
                    shape.capacity
                ),
            });
        }
        let bytes = shape
            .bytes()
            .ok_or_else(|| Error::Kv(format!("cache size overflows: {shape:?}")))?;
        let map = MmapMut::map_anon(bytes).map_err(|e| Error::Io {
            path: "<anonymous KV mapping>".into(),
            source: e,
        })?;
        // The attention scan reads the whole used cache once per token (48 MiB at SmolLM2's
        // depth 4096 with a Q8_0 cache): 12,288 pages of 4 KiB to translate, far more than
        // the data TLB holds. Transparent huge pages (granted to hinted mappings where the
        // system's mode is `madvise`, the common default) make that 24 pages of 2 MiB;
        // docs/PERFORMANCE.md has the measurement. A hint: a kernel without them refuses it,
        // and the cache works the same.
        #[cfg(target_os = "linux")]
        let _ = map.advise(memmap2::Advice::HugePage);
        Ok(KvCache {
            shape,
            map,
            positions: vec![0; shape.capacity],
            used: 0,
            next: 0,
            logical_len: 0,
            wrapped: false,
            policy,
        })
    }

    pub fn shape(&self) -> KvShape {
        self.shape
    }

    pub fn policy(&self) -> KvPolicy {
        self.policy
    }

    /// Slots currently holding tokens.
    pub fn used(&self) -> usize {
        self.used
    }

    /// Whether the ring has overwritten a slot since the last reset (its prefix is gone).
    pub fn has_wrapped(&self) -> bool {
        self.wrapped
    }

    /// Tokens written since reset (may exceed capacity under the sliding policy).
    pub fn logical_len(&self) -> usize {
        self.logical_len
    }

    /// Bytes of the mapping.
    pub fn bytes(&self) -> usize {
        self.map.len()
    }

    /// Address of the mapping (page-aligned by construction).
    pub fn base_ptr(&self) -> *const u8 {
        self.map.as_ptr()
    }

    pub fn reset(&mut self) {
        self.used = 0;
        self.next = 0;
        self.logical_len = 0;
        self.wrapped = false;
    }

    /// Rewinds to the first `n` tokens. Only possible while the cache has not wrapped.
    pub fn truncate(&mut self, n: usize) -> Result<()> {
        if self.wrapped {
            return Err(Error::Kv(
                "cannot rewind a cache that has wrapped (its prefix was overwritten)".into(),
            ));
        }
        if n > self.used {
            return Err(Error::Kv(format!(
                "cannot rewind to {n} tokens: the cache holds {}",
                self.used
            )));
        }
        self.used = n;
        self.logical_len = n;
        Ok(())
    }

    /// Claims a slot for the token at absolute position `pos` and returns its index.
    pub fn claim(&mut self, pos: u32) -> Result<usize> {
        let cap = self.shape.capacity;
        let slot = if self.used < cap {
            self.used += 1;
            self.used - 1
        } else {
            match self.policy {
                KvPolicy::Error => return Err(Error::KvFull { capacity: cap }),
                KvPolicy::Sliding { sinks } => {
                    if !self.wrapped {
                        self.wrapped = true;
                        self.next = sinks;
                    }
                    let s = self.next;
                    self.next += 1;
                    if self.next == cap {
                        self.next = sinks;
                    }
                    s
                }
            }
        };
        self.positions[slot] = pos;
        self.logical_len += 1;
        Ok(slot)
    }

    /// Whether `n` more tokens fit without hitting the `error` policy.
    pub fn can_take(&self, n: usize) -> bool {
        match self.policy {
            KvPolicy::Error => self.used + n <= self.shape.capacity,
            KvPolicy::Sliding { .. } => true,
        }
    }

    /// Positions of the occupied slots (index = slot).
    pub fn positions(&self) -> &[u32] {
        &self.positions[..self.used]
    }

    /// Slots stored per head (the capacity rounded up to 16).
    fn padded(&self) -> usize {
        self.shape.capacity.next_multiple_of(KEY_TILE)
    }

    fn head_offset(&self, layer: usize, kv_head: usize) -> usize {
        ((layer * self.shape.n_kv_heads + kv_head) * self.padded()) * self.shape.head_dim
    }

    fn elems(&self) -> usize {
        // Invariant: checked in `new`.
        self.shape.n_layers * self.shape.n_kv_heads * self.padded() * self.shape.head_dim
    }

    /// The mapping as `T`s from byte `off`, `n` of them.
    fn view<T: Copy>(&self, off: usize, n: usize) -> &[T] {
        assert!(
            off.is_multiple_of(std::mem::align_of::<T>())
                && off + n * size_of::<T>() <= self.map.len()
        );
        // SAFETY: in bounds and aligned (checked above; the mapping is page-aligned); T is
        // f16 or i8, for which every bit pattern is a value.
        unsafe { std::slice::from_raw_parts(self.map.as_ptr().add(off) as *const T, n) }
    }

    fn view_mut<T: Copy>(&mut self, off: usize, n: usize) -> &mut [T] {
        assert!(
            off.is_multiple_of(std::mem::align_of::<T>())
                && off + n * size_of::<T>() <= self.map.len()
        );
        // SAFETY: as in `view`, and `&mut self` gives exclusive access to the mapping.
        unsafe { std::slice::from_raw_parts_mut(self.map.as_mut_ptr().add(off) as *mut T, n) }
    }

    /// Byte offsets of one head's K values, V values, K scales and V scales (the scales
    /// only for Q8_0), and the values per head.
    fn offsets(&self, layer: usize, kv_head: usize) -> ([usize; 4], usize) {
        let (e, o) = (self.elems(), self.head_offset(layer, kv_head));
        let n = self.padded() * self.shape.head_dim;
        match self.shape.ty {
            KvType::F16 => ([2 * o, 2 * (e + o), 0, 0], n),
            KvType::Q8_0 => (
                [
                    o,
                    e + o,
                    2 * e + 2 * (o / Q8_GROUP),
                    2 * e + 2 * ((e + o) / Q8_GROUP),
                ],
                n,
            ),
        }
    }

    /// All slots of one head (`capacity` rounded up to 16; only `used()` slots are valid).
    pub fn head(&self, layer: usize, kv_head: usize) -> KvHead<'_> {
        let ([k, v, kd, vd], n) = self.offsets(layer, kv_head);
        match self.shape.ty {
            KvType::F16 => KvHead::F16 {
                keys: self.view(k, n),
                values: self.view(v, n),
            },
            KvType::Q8_0 => KvHead::Q8_0 {
                keys: self.view(k, n),
                key_scales: self.view(kd, n / Q8_GROUP),
                values: self.view(v, n),
                value_scales: self.view(vd, n / Q8_GROUP),
            },
        }
    }

    /// Stores one token's K and V rows (`n_kv_heads × head_dim` each, f32) for a layer:
    /// rounded to f16 (nearest even; the same bits on every kernel tier), or quantized to
    /// Q8_0 ([`quantize_q8_0`], scalar code on every tier).
    pub fn write(&mut self, layer: usize, slot: usize, k: &[f32], v: &[f32]) {
        let hd = self.shape.head_dim;
        let isa = crate::quant::active_isa();
        for h in 0..self.shape.n_kv_heads {
            let ([ko, vo, kdo, vdo], n) = self.offsets(layer, h);
            let (kh, vh) = (&k[h * hd..(h + 1) * hd], &v[h * hd..(h + 1) * hd]);
            match self.shape.ty {
                KvType::F16 => {
                    let keys = self.view_mut::<f16>(ko, n);
                    for (d, &x) in kh.iter().enumerate() {
                        keys[key_index(hd, slot, d)] = f16::from_f32(x);
                    }
                    let values = self.view_mut::<f16>(vo, n);
                    crate::quant::attn::f32_to_f16(
                        isa,
                        vh,
                        &mut values[slot * hd..(slot + 1) * hd],
                    );
                }
                KvType::Q8_0 => {
                    for g in (0..hd).step_by(Q8_GROUP) {
                        let (mut q, mut d) = ([0i8; Q8_GROUP], [f16::ZERO]);
                        quantize_q8_0(&kh[g..g + Q8_GROUP], &mut q, &mut d);
                        let keys = self.view_mut::<i8>(ko, n);
                        for (i, &x) in q.iter().enumerate() {
                            keys[key_index_q8(hd, slot, g + i)] = x;
                        }
                        self.view_mut::<f16>(kdo, n / Q8_GROUP)[scale_index(hd, slot, g)] = d[0];
                        quantize_q8_0(&vh[g..g + Q8_GROUP], &mut q, &mut d);
                        let values = self.view_mut::<i8>(vo, n);
                        for (i, &x) in q.iter().enumerate() {
                            values[value_index_q8(hd, slot, g + i)] = x;
                        }
                        self.view_mut::<f16>(vdo, n / Q8_GROUP)[scale_index(hd, slot, g)] = d[0];
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_policy_reads_back_what_it_prints() {
        for p in [
            KvPolicy::Error,
            KvPolicy::Sliding { sinks: 0 },
            KvPolicy::Sliding { sinks: 4 },
        ] {
            assert_eq!(p.to_string().parse::<KvPolicy>().unwrap(), p);
        }
    }

    fn shape(cap: usize) -> KvShape {
        KvShape {
            n_layers: 2,
            n_kv_heads: 3,
            head_dim: 4,
            capacity: cap,
            ty: KvType::F16,
        }
    }

    #[test]
    fn mapping_is_page_aligned_and_sized() {
        let kv = KvCache::new(shape(8), KvPolicy::Error).unwrap();
        assert_eq!(kv.base_ptr() as usize % 4096, 0);
        // 8 slots are stored as one tile of 16.
        assert_eq!(kv.bytes(), 2 * 2 * 3 * 16 * 4 * 2);
    }

    /// The kernel's own account of the mapping (`VmFlags` in `/proc/self/smaps`, `hg` for
    /// `MADV_HUGEPAGE`) shows the huge-page hint.
    #[cfg(target_os = "linux")]
    #[test]
    fn mapping_asks_for_huge_pages() {
        let kv = KvCache::new(
            KvShape {
                capacity: 4096,
                ..shape(4096)
            },
            KvPolicy::Error,
        )
        .unwrap();
        let base = kv.base_ptr() as usize;
        let smaps = std::fs::read_to_string("/proc/self/smaps").unwrap();
        let mut inside = false;
        let mut flags = None;
        for line in smaps.lines() {
            let range = line
                .split_whitespace()
                .next()
                .and_then(|r| r.split_once('-'));
            if let Some((a, b)) = range
                && let (Ok(a), Ok(b)) = (usize::from_str_radix(a, 16), usize::from_str_radix(b, 16))
            {
                inside = (a..b).contains(&base);
            } else if inside && let Some(f) = line.strip_prefix("VmFlags:") {
                flags = Some(f.split_whitespace().map(str::to_owned).collect::<Vec<_>>());
            }
        }
        let flags = flags.expect("the cache's mapping is listed in /proc/self/smaps");
        assert!(flags.iter().any(|f| f == "hg"), "VmFlags {flags:?}");
    }

    #[test]
    fn error_policy_refuses_when_full() {
        let mut kv = KvCache::new(shape(3), KvPolicy::Error).unwrap();
        for p in 0..3 {
            assert_eq!(kv.claim(p).unwrap(), p as usize);
        }
        assert!(matches!(kv.claim(3), Err(Error::KvFull { capacity: 3 })));
    }

    #[test]
    fn sliding_policy_keeps_sinks_and_overwrites_oldest() {
        let mut kv = KvCache::new(shape(4), KvPolicy::Sliding { sinks: 1 }).unwrap();
        let slots: Vec<usize> = (0..9).map(|p| kv.claim(p).unwrap()).collect();
        // slots 0..3 fill, then the ring part 1..3 cycles; slot 0 (the sink) is never reused
        assert_eq!(slots, vec![0, 1, 2, 3, 1, 2, 3, 1, 2]);
        let mut pos = kv.positions().to_vec();
        pos.sort();
        // the sink (position 0) and the three most recent positions survive
        assert_eq!(pos, vec![0, 6, 7, 8]);
        assert!(kv.truncate(1).is_err());
    }

    #[test]
    fn write_and_read_back_rounds_to_f16() {
        let mut kv = KvCache::new(shape(5), KvPolicy::Error).unwrap();
        let k: Vec<f32> = (0..12).map(|i| i as f32 * 0.1).collect();
        let v: Vec<f32> = (0..12).map(|i| -(i as f32)).collect();
        let s = kv.claim(0).unwrap();
        kv.write(1, s, &k, &v);
        for h in 0..3 {
            let head = kv.head(1, h);
            for d in 0..4 {
                assert_eq!(head.key(4, s, d), f16::from_f32(k[h * 4 + d]).to_f32());
                assert_eq!(head.value(4, s, d), v[h * 4 + d]);
            }
        }
        // layer 0 untouched (anonymous mapping is zeroed)
        let KvHead::F16 { keys, .. } = kv.head(0, 0) else {
            panic!("an f16 cache")
        };
        assert!(keys.iter().all(|x| x.to_f32() == 0.0));
    }

    #[test]
    fn keys_are_tiled_by_sixteen_slots() {
        let mut kv = KvCache::new(shape(20), KvPolicy::Error).unwrap();
        let k: Vec<f32> = (0..12).map(|i| i as f32 + 0.5).collect();
        for p in 0..18 {
            kv.claim(p).unwrap();
        }
        kv.write(1, 17, &k, &k);
        for h in 0..3 {
            // Slot 17 is lane 1 of the second tile; a tile is 4 dimensions × 16 lanes.
            let KvHead::F16 { keys, values } = kv.head(1, h) else {
                panic!("an f16 cache")
            };
            assert_eq!(keys.len(), 32 * 4);
            for d in 0..4 {
                assert_eq!(keys[64 + d * 16 + 1].to_f32(), k[h * 4 + d]);
            }
            assert_eq!(values[17 * 4..18 * 4][3].to_f32(), k[h * 4 + 3]);
        }
    }

    #[test]
    fn truncate_rewinds_a_prefix() {
        let mut kv = KvCache::new(shape(6), KvPolicy::Error).unwrap();
        for p in 0..5 {
            kv.claim(p).unwrap();
        }
        kv.truncate(2).unwrap();
        assert_eq!(kv.used(), 2);
        assert_eq!(kv.claim(2).unwrap(), 2);
        assert!(kv.truncate(4).is_err());
    }

    #[test]
    fn policy_parses() {
        assert_eq!("error".parse::<KvPolicy>().unwrap(), KvPolicy::Error);
        assert_eq!(
            "sliding:8".parse::<KvPolicy>().unwrap(),
            KvPolicy::Sliding { sinks: 8 }
        );
        assert!("slide".parse::<KvPolicy>().is_err());
    }

    fn q8_shape(cap: usize, hd: usize) -> KvShape {
        KvShape {
            n_layers: 2,
            n_kv_heads: 3,
            head_dim: hd,
            capacity: cap,
            ty: KvType::Q8_0,
        }
    }

    #[test]
    fn q8_0_cache_is_sized_and_refuses_odd_heads() {
        // 2 layers × 3 heads × 32 slots (20 rounded up) × 64 values, K and V: one byte each
        // and an f16 scale per 32.
        let kv = KvCache::new(q8_shape(20, 64), KvPolicy::Error).unwrap();
        let e = 2 * 3 * 32 * 64;
        assert_eq!(kv.bytes(), 2 * e + 2 * 2 * e / 32);
        let err = KvCache::new(q8_shape(20, 48), KvPolicy::Error)
            .err()
            .unwrap();
        assert!(err.to_string().contains("head size 48"), "{err}");
        assert_eq!("q8_0".parse::<KvType>().unwrap(), KvType::Q8_0);
        assert_eq!(
            KvType::Q8_0.to_string().parse::<KvType>().unwrap(),
            KvType::Q8_0
        );
        assert!("q4_0".parse::<KvType>().is_err());
    }

    /// Every slot, layer and head reads back its own token's values within half a
    /// quantization step (d = max|x| / 127 per group of 32) and exactly as the quantizer
    /// gave them; neighbouring slots and the other layer are untouched.
    #[test]
    fn q8_0_write_reads_back_each_slot_within_half_a_step() {
        for hd in [64, 256] {
            let mut kv = KvCache::new(q8_shape(40, hd), KvPolicy::Error).unwrap();
            let row = |slot: usize, sign: f32| -> Vec<f32> {
                (0..3 * hd)
                    .map(|i| sign * ((i * 7 + slot * 13) % 29) as f32 * 0.37 - 3.0)
                    .collect()
            };
            for slot in 0..37 {
                assert_eq!(kv.claim(slot as u32).unwrap(), slot);
                kv.write(1, slot, &row(slot, 1.0), &row(slot, -1.0));
            }
            for slot in 0..37 {
                let (k, v) = (row(slot, 1.0), row(slot, -1.0));
                for h in 0..3 {
                    let head = kv.head(1, h);
                    for g in 0..hd / Q8_GROUP {
                        for (x, is_key) in [(&k, true), (&v, false)] {
                            let xs = &x[h * hd + g * 32..h * hd + g * 32 + 32];
                            let (mut q, mut d) = ([0i8; 32], [f16::ZERO]);
                            quantize_q8_0(xs, &mut q, &mut d);
                            let step = xs.iter().fold(0f32, |m, a| m.max(a.abs())) / 127.0;
                            for i in 0..32 {
                                let dim = g * 32 + i;
                                let got = if is_key {
                                    head.key(hd, slot, dim)
                                } else {
                                    head.value(hd, slot, dim)
                                };
                                assert_eq!(got, d[0].to_f32() * f32::from(q[i]));
                                assert!(
                                    (got - xs[i]).abs() <= 0.5 * step + 127.0 * step * 1e-3,
                                    "hd {hd} slot {slot} head {h} dim {dim}: {got} vs {}",
                                    xs[i]
                                );
                            }
                        }
                    }
                }
                assert_eq!(kv.head(0, 2).key(hd, slot, hd - 1), 0.0);
                assert_eq!(kv.head(0, 0).value(hd, slot, 0), 0.0);
            }
        }
    }
}
