//! Small non-cryptographic hashing for the hot path.

use std::hash::{BuildHasher, Hasher};

/// A fast multiplicative hasher (FxHash family) for interning and ID maps. Not DoS resistant;
/// keys are mixed with a per-process random seed, so crafted IDs cannot be precomputed.
#[derive(Clone, Copy)]
pub struct FastHasher(u64);

const K: u64 = 0xf135_7aea_2e62_a9c5;

impl Hasher for FastHasher {
    #[inline]
    fn write(&mut self, bytes: &[u8]) {
        let mut chunks = bytes.chunks_exact(8);
        for c in &mut chunks {
            self.write_u64(u64::from_le_bytes(c.try_into().expect("8 bytes")));
        }
        let rest = chunks.remainder();
        if !rest.is_empty() {
            let mut b = [0u8; 8];
            b[..rest.len()].copy_from_slice(rest);
            self.write_u64(u64::from_le_bytes(b) ^ ((rest.len() as u64) << 59));
        }
    }

    #[inline]
    fn write_u64(&mut self, v: u64) {
        self.0 = (self.0.rotate_left(26) ^ v).wrapping_mul(K);
    }

    #[inline]
    fn finish(&self) -> u64 {
        // Final avalanche so the top bits hashbrown uses depend on every input bit.
        let mut x = self.0;
        x ^= x >> 32;
        x = x.wrapping_mul(0x9e37_79b9_7f4a_7c15);
        x ^ (x >> 29)
    }
}

/// A random seed chosen once per process, shared by every hasher of the hot path.
pub fn process_seed() -> u64 {
    FastBuild::default().0
}

/// Builds [`FastHasher`]s with a seed chosen once per process.
#[derive(Clone, Copy)]
pub struct FastBuild(u64);

impl Default for FastBuild {
    fn default() -> Self {
        use std::sync::OnceLock;
        static SEED: OnceLock<u64> = OnceLock::new();
        FastBuild(*SEED.get_or_init(|| {
            let s = std::collections::hash_map::RandomState::new();
            s.hash_one(0x5eed_u64)
        }))
    }
}

impl BuildHasher for FastBuild {
    type Hasher = FastHasher;
    #[inline]
    fn build_hasher(&self) -> FastHasher {
        FastHasher(self.0)
    }
}

pub type FastMap<K, V> = std::collections::HashMap<K, V, FastBuild>;

/// Two independent 64-bit hashes of a trace ID, for the bloom filter. Stable across processes
/// and versions: the index on disk depends on it.
#[inline]
pub fn trace_id_hashes(id: &[u8; 16]) -> (u64, u64) {
    let a = u64::from_le_bytes(id[..8].try_into().expect("8 bytes"));
    let b = u64::from_le_bytes(id[8..].try_into().expect("8 bytes"));
    let h1 = mix64(a ^ mix64(b));
    let h2 = mix64(b.wrapping_add(0x9e37_79b9_7f4a_7c15) ^ a.rotate_left(17));
    (h1, h2 | 1)
}

/// MurmurHash3's 64-bit finalizer: every output bit depends on every input bit. Stable: the
/// bloom filters on disk depend on it.
#[inline]
pub fn mix64(mut x: u64) -> u64 {
    x ^= x >> 33;
    x = x.wrapping_mul(0xff51_afd7_ed55_8ccd);
    x ^= x >> 33;
    x = x.wrapping_mul(0xc4ce_b9fe_1a85_ec53);
    x ^ (x >> 33)
}
