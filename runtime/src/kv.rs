//! Ring KV cache: one page-aligned anonymous mapping per session, allocated once.
//!
//! Layout (f16 elements): `[K | V]`, each `[layer][kv_head][slot…]` over the capacity rounded
//! up to 16 slots, so that the attention scan over the slots of one head reads contiguous
//! memory. Values are `[slot][head_dim]`; keys are in tiles of 16 slots stored
//! dimension-major (`[slot / 16][head_dim][slot % 16]`, see [`crate::quant::attn::key_index`]),
//! so that the scores of 16 slots take one load per dimension. Every slot remembers
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
use crate::quant::attn::{KEY_TILE, key_index};
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

/// Geometry of a cache.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct KvShape {
    pub n_layers: usize,
    pub n_kv_heads: usize,
    pub head_dim: usize,
    /// Number of token slots (`max_seq_len`).
    pub capacity: usize,
}

impl KvShape {
    /// Slots stored per head: the capacity rounded up to a whole key tile.
    fn padded(&self) -> Option<usize> {
        self.capacity.checked_next_multiple_of(KEY_TILE)
    }

    /// f16 elements of one of K or V.
    fn elems(&self) -> Option<usize> {
        self.n_layers
            .checked_mul(self.n_kv_heads)?
            .checked_mul(self.padded()?)?
            .checked_mul(self.head_dim)
    }

    /// Bytes of the whole mapping (K and V).
    pub fn bytes(&self) -> Option<usize> {
        self.elems()?.checked_mul(2 * std::mem::size_of::<f16>())
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

    fn all(&self) -> &[f16] {
        // SAFETY: the mapping is page-aligned (so 2-byte aligned), its length is exactly
        // 2 * elems() * size_of::<f16>() bytes, and f16 has no invalid bit patterns.
        unsafe { std::slice::from_raw_parts(self.map.as_ptr() as *const f16, 2 * self.elems()) }
    }

    fn all_mut(&mut self) -> &mut [f16] {
        let n = 2 * self.elems();
        // SAFETY: as in `all`, and `&mut self` gives exclusive access to the mapping.
        unsafe { std::slice::from_raw_parts_mut(self.map.as_mut_ptr() as *mut f16, n) }
    }

    /// All slots' keys of one head in key tiles (`capacity` rounded up to 16, times
    /// `head_dim`; only `used()` slots are valid): dimension `d` of slot `s` at
    /// [`key_index`]`(head_dim, s, d)`.
    pub fn keys(&self, layer: usize, kv_head: usize) -> &[f16] {
        let o = self.head_offset(layer, kv_head);
        let n = self.padded() * self.shape.head_dim;
        &self.all()[o..o + n]
    }

    /// All slots' values of one head, `[slot][head_dim]` (`capacity` rounded up to 16 rows).
    pub fn values(&self, layer: usize, kv_head: usize) -> &[f16] {
        let o = self.elems() + self.head_offset(layer, kv_head);
        let n = self.padded() * self.shape.head_dim;
        &self.all()[o..o + n]
    }

    /// Dimension `d` of the key stored in `slot` of a head.
    pub fn key(&self, layer: usize, kv_head: usize, slot: usize, d: usize) -> f16 {
        self.keys(layer, kv_head)[key_index(self.shape.head_dim, slot, d)]
    }

    /// Stores one token's K and V rows (`n_kv_heads × head_dim` each, f32) for a layer,
    /// rounded to f16 (nearest even; the same bits on every kernel tier).
    pub fn write(&mut self, layer: usize, slot: usize, k: &[f32], v: &[f32]) {
        let hd = self.shape.head_dim;
        let elems = self.elems();
        let isa = crate::quant::active_isa();
        for h in 0..self.shape.n_kv_heads {
            let base = self.head_offset(layer, h);
            let o = base + slot * hd;
            let all = self.all_mut();
            for (d, &x) in k[h * hd..(h + 1) * hd].iter().enumerate() {
                all[base + key_index(hd, slot, d)] = f16::from_f32(x);
            }
            crate::quant::attn::f32_to_f16(
                isa,
                &v[h * hd..(h + 1) * hd],
                &mut all[elems + o..elems + o + hd],
            );
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
        }
    }

    #[test]
    fn mapping_is_page_aligned_and_sized() {
        let kv = KvCache::new(shape(8), KvPolicy::Error).unwrap();
        assert_eq!(kv.base_ptr() as usize % 4096, 0);
        // 8 slots are stored as one tile of 16.
        assert_eq!(kv.bytes(), 2 * 2 * 3 * 16 * 4 * 2);
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
            let vs = &kv.values(1, h)[s * 4..s * 4 + 4];
            for d in 0..4 {
                assert_eq!(kv.key(1, h, s, d), f16::from_f32(k[h * 4 + d]));
                assert_eq!(vs[d].to_f32(), v[h * 4 + d]);
            }
        }
        // layer 0 untouched (anonymous mapping is zeroed)
        assert!(kv.keys(0, 0).iter().all(|x| x.to_f32() == 0.0));
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
            let keys = kv.keys(1, h);
            assert_eq!(keys.len(), 32 * 4);
            for d in 0..4 {
                assert_eq!(keys[64 + d * 16 + 1].to_f32(), k[h * 4 + d]);
            }
            assert_eq!(kv.values(1, h)[17 * 4..18 * 4][3].to_f32(), k[h * 4 + 3]);
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
}
