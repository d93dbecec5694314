//! `index.bin`: finds a trace's row groups without reading the data file.
//!
//! Layout (little-endian; version 1 ends after the trace-ID bloom, version 2 after the value
//! blooms, version 3 after the key lists; all four are read):
//! ```text
//! magic b"WEFTIDX1" | version u32 | row_groups u32
//! row_groups × { min_trace_id [16] | max_trace_id [16] | first_row u64 | rows u32 }
//! bloom_k u32 | bloom_words u32 | bloom_words × u64
//! value_blooms u32 (0 or row_groups)                                         (version 2)
//! value_blooms × { k u32 | words u32 | words × u64 }                        (version 2)
//! keys u32 | keys × { scope u8 | len u16 | key [len] }                      (version 3)
//! row_groups × ceil(keys / 64) × u64                                        (version 3)
//! row_groups × { k u32 | words u32 | words × u64                            (version 4)
//!                | min_trace_start u64 | max_trace_start u64 }
//! crc32c u32 (of everything before it)
//! ```
//! In version 4, `keys` is `0xFFFF_FFFF` (and no bitsets follow) when the block has no key
//! lists.
//!
//! The writer writes the lowest version that holds the index: version 4 for the time-sliced
//! row groups of block format 3 (below), version 3 for key lists, else 2.
//!
//! **Row groups.** In blocks of format 1 and 2, rows are sorted by trace ID, so the row
//! groups' ID ranges are sorted and disjoint except at shared boundary IDs, and a trace is
//! found by binary search over them. In format 3 the row groups are *time slices*
//! ([`crate::columns::SpanColumns::time_sliced_order`]): each holds the traces that start in
//! one stretch of the block's time, sorted by ID, so the ranges overlap. Version 4 gives each
//! row group a *trace bloom* of its trace IDs (at least 16 bits and 10 probes per trace: about
//! 0.05% false positives, so a lookup reads a row group that does not hold the trace about
//! once in 2,000 row groups), and the earliest and latest start of the traces in it (a trace's
//! start in a row group: its earliest span there), which bound where a newest-first search
//! can stop.
//!
//! A row group's *value bloom* holds every string attribute value of its spans (span, resource,
//! scope, event and link attributes, array elements included), so a search for a rare value of
//! any attribute, dedicated column or not, skips the row groups that cannot hold it.
//!
//! The *key lists* ([`KeyLists`]) name every attribute key of the block once, with its scope,
//! and give each row group a bitset of the keys its spans carry (span attributes moved to
//! dedicated columns included). `/api/v2/search/tags` answers a row group from them without
//! reading its attribute columns. A block with more than [`MAX_LISTED_KEYS`] distinct keys (or
//! a key longer than 64 KiB) has none.
//!
//! Compaction writes value blooms and key lists; blocks cut from the head skip both to keep
//! ingest cheap.
//!
//! The block's bloom filter covers every trace ID in it (about 1% false positives at 10 bits
//! per trace); a lookup that it rules out reads nothing else.

use crate::hash::trace_id_hashes;

const MAGIC: &[u8; 8] = b"WEFTIDX1";
pub const INDEX_VERSION: u32 = 4;
/// `keys` in a version 4 index without key lists.
const NO_KEYS: u32 = u32::MAX;

/// The number of distinct keys in `keys`, estimated by linear counting: each key sets one bit of
/// a bitmap of at least twice as many bits as there are keys, and `n ≈ -m ln(zeros / m)`. At a
/// load of at most one half the estimate is within about 1% (standard error) of the truth; it
/// is rounded up by a tenth so that a filter sized from it is not short of bits, and never
/// exceeds the number of keys.
pub fn distinct_estimate(keys: &[[u8; 16]]) -> usize {
    if keys.len() < 64 {
        return keys.len();
    }
    let m = (keys.len() * 2).next_power_of_two();
    let mut bits = vec![0u64; m / 64];
    for key in keys {
        let (h, _) = trace_id_hashes(key);
        let b = (h as usize) & (m - 1);
        bits[b / 64] |= 1 << (b % 64);
    }
    let zeros = m - bits.iter().map(|w| w.count_ones() as usize).sum::<usize>();
    let m = m as f64;
    let n = -m * (zeros.max(1) as f64 / m).ln();
    ((n * 1.1).ceil() as usize).min(keys.len())
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RowGroupRange {
    pub min: [u8; 16],
    pub max: [u8; 16],
    pub first_row: u64,
    pub rows: u32,
}

/// A split-free classic bloom filter with `k` probes by double hashing.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Bloom {
    k: u32,
    words: Vec<u64>,
    /// Each double-hashing probe is mixed before it is cut to the filter's size (a row
    /// group's trace bloom). Without the mix, two keys whose two hashes agree in the low bits
    /// probe the same bits, which a small filter (hundreds of bits) cannot make rare: 0.04% of
    /// lookups in a 512-bit filter of 15 keys passed, where its fill predicts 0.0001%.
    mixed: bool,
}

impl Bloom {
    /// Sizes a filter for `n` keys at about 10 bits per key.
    pub fn with_capacity(n: usize) -> Self {
        let bits = (n.max(64) * 10).next_power_of_two();
        Bloom {
            k: 7,
            words: vec![0; bits / 64],
            mixed: false,
        }
    }

    /// Sizes a row group's trace bloom (index version 4) for `n` traces: at least 16 bits
    /// and 10 mixed probes each, about 0.05% false positives at most.
    pub fn for_row_group(n: usize) -> Self {
        let bits = (n.max(32) * 16).next_power_of_two();
        Bloom {
            k: 10,
            words: vec![0; bits / 64],
            mixed: true,
        }
    }

    /// The bits `id` sets in a filter of `k` probes over `words` words (mixed or not). Borrows
    /// nothing of the filter, so that inserting needs no buffer of the probes.
    fn probes(k: u32, words: usize, mixed: bool, id: &[u8; 16]) -> impl Iterator<Item = usize> {
        Self::probes_of(k, words, mixed, trace_id_hashes(id))
    }

    /// [`Self::probes`] of an ID whose [`trace_id_hashes`] are `(h1, h2)`.
    fn probes_of(k: u32, words: usize, mixed: bool, (h1, h2): (u64, u64)) -> impl Iterator<Item = usize> {
        let mask = (words * 64 - 1) as u64;
        (0..u64::from(k)).map(move |i| {
            let h = h1.wrapping_add(i.wrapping_mul(h2));
            ((if mixed { crate::hash::mix64(h) } else { h }) & mask) as usize
        })
    }

    pub fn insert(&mut self, id: &[u8; 16]) {
        for b in Self::probes(self.k, self.words.len(), self.mixed, id) {
            self.words[b / 64] |= 1 << (b % 64);
        }
    }

    pub fn may_contain(&self, id: &[u8; 16]) -> bool {
        self.may_contain_hashed(trace_id_hashes(id))
    }

    /// [`Self::may_contain`] of an ID whose [`trace_id_hashes`] are `hashes`: every filter
    /// probes from the same two hashes, so an ID asked of many filters is hashed once.
    pub fn may_contain_hashed(&self, hashes: (u64, u64)) -> bool {
        Self::probes_of(self.k, self.words.len(), self.mixed, hashes).all(|b| self.words[b / 64] & (1 << (b % 64)) != 0)
    }

    /// The 16-byte key a byte string is stored under (xxh3-128, stable across versions).
    pub fn key_of(value: &[u8]) -> [u8; 16] {
        xxhash_rust::xxh3::xxh3_128(value).to_le_bytes()
    }

    pub fn insert_bytes(&mut self, value: &[u8]) {
        self.insert(&Self::key_of(value));
    }

    pub fn may_contain_bytes(&self, value: &[u8]) -> bool {
        self.may_contain(&Self::key_of(value))
    }

    /// A filter for `keys` (repeats allowed), sized for twice the distinct ones among them
    /// (at least 20 bits each, about 0.02% false positives at most) but never more than for
    /// all of them. Sized by the count with repeats, the value bloom of a row group of spans
    /// whose attribute sets do not repeat (each URL and user ID its own, but the same method,
    /// route and region on every span) took 130 bits per span: a sixth of such a block.
    pub fn of_keys(keys: &[[u8; 16]]) -> Self {
        let mut bloom = Self::with_capacity((2 * distinct_estimate(keys)).min(keys.len()));
        for key in keys {
            bloom.insert(key);
        }
        bloom
    }

    pub fn size_bytes(&self) -> usize {
        self.words.len() * 8
    }

    /// Appends the filter as the index stores it: `k u32 | words u32 | words × u64`.
    fn write_to(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(&self.k.to_le_bytes());
        out.extend_from_slice(&(self.words.len() as u32).to_le_bytes());
        for w in &self.words {
            out.extend_from_slice(&w.to_le_bytes());
        }
    }

    /// The filter as bytes: `k` (u32 LE), then the words (u64 LE each).
    pub fn to_bytes(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(4 + self.size_bytes());
        out.extend_from_slice(&self.k.to_le_bytes());
        for w in &self.words {
            out.extend_from_slice(&w.to_le_bytes());
        }
        out
    }

    /// A filter from [`Bloom::to_bytes`]; `None` unless `k` is 1 to 32 and the words are a
    /// power of two in number.
    pub fn from_bytes(b: &[u8]) -> Option<Bloom> {
        let (k, rest) = b.split_first_chunk::<4>()?;
        let k = u32::from_le_bytes(*k);
        if !(1..=32).contains(&k) || rest.len() % 8 != 0 || !(rest.len() / 8).is_power_of_two() {
            return None;
        }
        let words = rest
            .chunks_exact(8)
            .map(|c| u64::from_le_bytes(c.try_into().expect("8 bytes")))
            .collect();
        Some(Bloom { k, words, mixed: false })
    }
}

/// Which attributes a listed key belongs to: the scopes of Tempo's tag names.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum KeyScope {
    Resource = 0,
    /// Instrumentation scope attributes.
    Scope = 1,
    Span = 2,
    Event = 3,
    Link = 4,
}

impl KeyScope {
    pub const ALL: [KeyScope; 5] = [
        KeyScope::Resource,
        KeyScope::Scope,
        KeyScope::Span,
        KeyScope::Event,
        KeyScope::Link,
    ];

    fn from_u8(b: u8) -> Option<KeyScope> {
        KeyScope::ALL.get(usize::from(b)).copied()
    }
}

/// Most distinct (scope, key) pairs a block's key lists hold; a block with more has none
/// (keys that embed IDs would make the lists as large as the data they summarize).
pub const MAX_LISTED_KEYS: usize = 4096;

/// The attribute keys of a block, and which of them each row group's spans carry.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct KeyLists {
    /// Every (scope, key) of the block, each once.
    pub keys: Vec<(KeyScope, Box<[u8]>)>,
    /// Per row group, a bitset over `keys` (bit `i % 64` of word `i / 64`).
    pub row_groups: Vec<Vec<u64>>,
}

impl KeyLists {
    /// The keys of row group `rg`, in the order of [`KeyLists::keys`].
    pub fn of_row_group(&self, rg: usize) -> impl Iterator<Item = (KeyScope, &[u8])> + '_ {
        let bits = self.row_groups.get(rg).map_or(&[][..], |b| &b[..]);
        self.keys
            .iter()
            .enumerate()
            .filter(move |(i, _)| bits.get(i / 64).is_some_and(|w| w & (1 << (i % 64)) != 0))
            .map(|(_, (scope, key))| (*scope, &key[..]))
    }
}

/// The decoded index of one block.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TraceIndex {
    pub row_groups: Vec<RowGroupRange>,
    pub bloom: Bloom,
    /// Per row group, the bloom filter of its string attribute values; empty when the block
    /// has none (version 1, or a block cut from the head).
    pub value_blooms: Vec<Bloom>,
    /// The attribute keys per row group; `None` when the block has none (versions 1 and 2, a
    /// block cut from the head, or too many keys).
    pub keys: Option<KeyLists>,
    /// Per row group, the bloom filter of its trace IDs (version 4: time-sliced row groups);
    /// empty when the row groups are sorted by trace ID.
    pub trace_blooms: Vec<Bloom>,
    /// Per row group, the earliest and latest start of its traces (a trace's start in a row
    /// group: its earliest span there); empty with `trace_blooms`.
    pub trace_starts: Vec<(u64, u64)>,
}

#[derive(Debug, thiserror::Error)]
pub enum IndexError {
    #[error("index is truncated")]
    Truncated,
    #[error("index has bad magic")]
    BadMagic,
    #[error("index version {0} is not supported by this build")]
    Version(u32),
    #[error("index checksum mismatch")]
    Checksum,
}

impl TraceIndex {
    /// Row groups whose ID range contains `id`, if the bloom filter does not rule it out (nor,
    /// for time-sliced row groups, the row group's trace bloom).
    pub fn candidates(&self, id: &[u8; 16]) -> Vec<usize> {
        if !self.bloom.may_contain(id) {
            return Vec::new();
        }
        if !self.trace_blooms.is_empty() {
            return (0..self.row_groups.len())
                .filter(|&i| {
                    let rg = &self.row_groups[i];
                    rg.min <= *id && *id <= rg.max && self.trace_blooms[i].may_contain(id)
                })
                .collect();
        }
        // Sorted by trace ID: first row group whose max >= id, then every following one whose min <= id.
        let start = self.row_groups.partition_point(|rg| rg.max < *id);
        (start..self.row_groups.len())
            .take_while(|&i| self.row_groups[i].min <= *id)
            .collect()
    }

    /// Whether [`Self::candidates`] is not empty, without listing them.
    pub fn may_hold(&self, id: &[u8; 16]) -> bool {
        self.may_hold_hashed(id, trace_id_hashes(id))
    }

    /// [`Self::may_hold`] with `id`'s [`trace_id_hashes`] computed by the caller, once for
    /// all the blocks it asks.
    pub fn may_hold_hashed(&self, id: &[u8; 16], hashes: (u64, u64)) -> bool {
        if !self.bloom.may_contain_hashed(hashes) {
            return false;
        }
        if !self.trace_blooms.is_empty() {
            return (self.row_groups.iter().zip(&self.trace_blooms))
                .any(|(rg, bloom)| rg.min <= *id && *id <= rg.max && bloom.may_contain_hashed(hashes));
        }
        let start = self.row_groups.partition_point(|rg| rg.max < *id);
        self.row_groups.get(start).is_some_and(|rg| rg.min <= *id)
    }

    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(24 + self.row_groups.len() * 44 + self.bloom.size_bytes());
        let keys = self.keys.as_ref().filter(|k| {
            k.row_groups.len() == self.row_groups.len()
                && k.keys.len() <= MAX_LISTED_KEYS
                && k.keys.iter().all(|(_, key)| key.len() <= usize::from(u16::MAX))
        });
        let sliced = !self.trace_blooms.is_empty()
            && self.trace_blooms.len() == self.row_groups.len()
            && self.trace_starts.len() == self.row_groups.len();
        let version: u32 = match (sliced, keys.is_some()) {
            (true, _) => 4,
            (false, true) => 3,
            (false, false) => 2,
        };
        out.extend_from_slice(MAGIC);
        out.extend_from_slice(&version.to_le_bytes());
        out.extend_from_slice(&(self.row_groups.len() as u32).to_le_bytes());
        for rg in &self.row_groups {
            out.extend_from_slice(&rg.min);
            out.extend_from_slice(&rg.max);
            out.extend_from_slice(&rg.first_row.to_le_bytes());
            out.extend_from_slice(&rg.rows.to_le_bytes());
        }
        self.bloom.write_to(&mut out);
        out.extend_from_slice(&(self.value_blooms.len() as u32).to_le_bytes());
        for b in &self.value_blooms {
            b.write_to(&mut out);
        }
        if sliced && keys.is_none() {
            out.extend_from_slice(&NO_KEYS.to_le_bytes());
        }
        if let Some(k) = keys {
            out.extend_from_slice(&(k.keys.len() as u32).to_le_bytes());
            for (scope, key) in &k.keys {
                out.push(*scope as u8);
                out.extend_from_slice(&(key.len() as u16).to_le_bytes());
                out.extend_from_slice(key);
            }
            let words = k.keys.len().div_ceil(64);
            for bits in &k.row_groups {
                for i in 0..words {
                    out.extend_from_slice(&bits.get(i).copied().unwrap_or(0).to_le_bytes());
                }
            }
        }
        if sliced {
            for (b, (lo, hi)) in self.trace_blooms.iter().zip(&self.trace_starts) {
                b.write_to(&mut out);
                out.extend_from_slice(&lo.to_le_bytes());
                out.extend_from_slice(&hi.to_le_bytes());
            }
        }
        let crc = crc32c::crc32c(&out);
        out.extend_from_slice(&crc.to_le_bytes());
        out
    }

    pub fn decode(buf: &[u8]) -> Result<Self, IndexError> {
        if buf.len() < 20 {
            return Err(IndexError::Truncated);
        }
        let (body, crc) = buf.split_at(buf.len() - 4);
        if &body[..8] != MAGIC {
            return Err(IndexError::BadMagic);
        }
        if crc32c::crc32c(body) != u32::from_le_bytes(crc.try_into().expect("4 bytes")) {
            return Err(IndexError::Checksum);
        }
        let mut p = 8;
        let mut take = |n: usize| -> Result<&[u8], IndexError> {
            let s = body.get(p..p + n).ok_or(IndexError::Truncated)?;
            p += n;
            Ok(s)
        };
        let u32_ = |b: &[u8]| u32::from_le_bytes(b.try_into().expect("4 bytes"));
        let version = u32_(take(4)?);
        if !(1..=INDEX_VERSION).contains(&version) {
            return Err(IndexError::Version(version));
        }
        let n = u32_(take(4)?) as usize;
        let mut row_groups = Vec::with_capacity(n.min(1 << 20));
        for _ in 0..n {
            let min = take(16)?.try_into().expect("16 bytes");
            let max = take(16)?.try_into().expect("16 bytes");
            let first_row = u64::from_le_bytes(take(8)?.try_into().expect("8 bytes"));
            let rows = u32_(take(4)?);
            row_groups.push(RowGroupRange {
                min,
                max,
                first_row,
                rows,
            });
        }
        let main = read_bloom(&mut take)?;
        let mut value_blooms = Vec::new();
        if version >= 2 {
            let nb = u32_(take(4)?) as usize;
            if nb != 0 && nb != n {
                return Err(IndexError::Truncated);
            }
            for _ in 0..nb {
                value_blooms.push(read_bloom(&mut take)?);
            }
        }
        let mut keys = None;
        let nk = if version >= 3 { u32_(take(4)?) } else { NO_KEYS };
        if nk != NO_KEYS || version == 3 {
            let nk = nk as usize;
            if nk > MAX_LISTED_KEYS {
                return Err(IndexError::Truncated);
            }
            let mut list = KeyLists {
                keys: Vec::with_capacity(nk),
                row_groups: Vec::with_capacity(n),
            };
            for _ in 0..nk {
                let scope = KeyScope::from_u8(take(1)?[0]).ok_or(IndexError::Truncated)?;
                let len = u16::from_le_bytes(take(2)?.try_into().expect("2 bytes"));
                list.keys.push((scope, take(usize::from(len))?.into()));
            }
            let words = nk.div_ceil(64);
            for _ in 0..n {
                let bits = take(words * 8)?
                    .chunks_exact(8)
                    .map(|c| u64::from_le_bytes(c.try_into().expect("8 bytes")))
                    .collect();
                list.row_groups.push(bits);
            }
            keys = Some(list);
        }
        let (mut trace_blooms, mut trace_starts) = (Vec::new(), Vec::new());
        if version >= 4 {
            let u64_ = |b: &[u8]| u64::from_le_bytes(b.try_into().expect("8 bytes"));
            for _ in 0..n {
                trace_blooms.push(Bloom {
                    mixed: true,
                    ..read_bloom(&mut take)?
                });
                let lo = u64_(take(8)?);
                trace_starts.push((lo, u64_(take(8)?)));
            }
        }
        if p != body.len() {
            return Err(IndexError::Truncated);
        }
        Ok(TraceIndex {
            row_groups,
            bloom: main,
            value_blooms,
            keys,
            trace_blooms,
            trace_starts,
        })
    }
}

fn read_bloom<'a>(take: &mut impl FnMut(usize) -> Result<&'a [u8], IndexError>) -> Result<Bloom, IndexError> {
    let u32_ = |b: &[u8]| u32::from_le_bytes(b.try_into().expect("4 bytes"));
    let k = u32_(take(4)?);
    let nw = u32_(take(4)?) as usize;
    if nw == 0 || !nw.is_power_of_two() || k == 0 || k > 32 {
        return Err(IndexError::Truncated);
    }
    let words = take(nw * 8)?
        .chunks_exact(8)
        .map(|c| u64::from_le_bytes(c.try_into().expect("8 bytes")))
        .collect();
    Ok(Bloom { k, words, mixed: false })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_filter_of_repeated_keys_is_sized_for_the_distinct_ones() {
        let key = |i: u64| Bloom::key_of(&i.to_le_bytes());
        // 20,000 keys, 2,000 of them distinct (each ten times).
        let keys: Vec<[u8; 16]> = (0..20_000u64).map(|i| key(i % 2_000)).collect();
        let n = distinct_estimate(&keys);
        assert!((2_000..=2_300).contains(&n), "estimate {n} for 2,000 distinct keys");
        let bloom = Bloom::of_keys(&keys);
        assert_eq!(bloom.size_bytes(), Bloom::with_capacity(4_000).size_bytes());
        assert!((0..2_000).all(|i| bloom.may_contain(&key(i))));
        let fp = (2_000..102_000).filter(|&i| bloom.may_contain(&key(i))).count();
        assert!(fp < 100, "{fp} false positives in 100,000");
        // All distinct: the estimate is capped at the count, and the size is as before.
        let keys: Vec<[u8; 16]> = (0..50_000u64).map(key).collect();
        assert!((49_000..=50_000).contains(&distinct_estimate(&keys)));
        assert_eq!(
            Bloom::of_keys(&keys).size_bytes(),
            Bloom::with_capacity(50_000).size_bytes()
        );
        assert_eq!(distinct_estimate(&keys[..10]), 10);
    }

    #[test]
    fn bloom_has_no_false_negatives_and_few_false_positives() {
        let ids: Vec<[u8; 16]> = (0..10_000u64)
            .map(|i| {
                let mut a = [0u8; 16];
                a[8..].copy_from_slice(&i.to_be_bytes());
                a
            })
            .collect();
        let mut b = Bloom::with_capacity(ids.len());
        for id in &ids {
            b.insert(id);
        }
        assert!(ids.iter().all(|id| b.may_contain(id)));
        let fp = (10_000..110_000u64)
            .filter(|i| {
                let mut a = [0u8; 16];
                a[8..].copy_from_slice(&i.to_be_bytes());
                b.may_contain(&a)
            })
            .count();
        assert!(fp < 3_000, "false positive rate too high: {fp} / 100000");
        let back = Bloom::from_bytes(&b.to_bytes()).unwrap();
        assert_eq!(back, b);
        assert!(Bloom::from_bytes(&[7, 0, 0, 0, 1, 2, 3]).is_none(), "a partial word");
        assert!(Bloom::from_bytes(&[0; 12]).is_none(), "no probes");
        assert!(Bloom::from_bytes(&[7, 0, 0, 0]).is_none(), "no words");
    }

    #[test]
    fn index_round_trips_and_detects_corruption() {
        let mut bloom = Bloom::with_capacity(10);
        bloom.insert(&[1; 16]);
        let idx = TraceIndex {
            row_groups: vec![
                RowGroupRange {
                    min: [1; 16],
                    max: [2; 16],
                    first_row: 0,
                    rows: 5,
                },
                RowGroupRange {
                    min: [3; 16],
                    max: [9; 16],
                    first_row: 5,
                    rows: 7,
                },
            ],
            bloom,
            value_blooms: Vec::new(),
            keys: None,
            trace_blooms: Vec::new(),
            trace_starts: Vec::new(),
        };
        let enc = idx.encode();
        assert_eq!(TraceIndex::decode(&enc).unwrap(), idx);
        assert_eq!(idx.candidates(&[1; 16]), vec![0]);
        for id in [[0; 16], [1; 16], [2; 16], [5; 16], [10; 16]] {
            assert_eq!(idx.may_hold(&id), !idx.candidates(&id).is_empty(), "{id:?}");
        }
        let mut bad = enc.clone();
        bad[30] ^= 1;
        assert!(matches!(TraceIndex::decode(&bad), Err(IndexError::Checksum)));
        assert!(TraceIndex::decode(&enc[..10]).is_err());

        let mut v = Bloom::with_capacity(4);
        v.insert_bytes(b"needle");
        let with_values = TraceIndex {
            value_blooms: vec![v.clone(), Bloom::with_capacity(4)],
            ..idx
        };
        let dec = TraceIndex::decode(&with_values.encode()).unwrap();
        assert_eq!(dec, with_values);
        assert!(dec.value_blooms[0].may_contain_bytes(b"needle"));
        assert!(!dec.value_blooms[1].may_contain_bytes(b"needle"));

        // Key lists: 70 keys, so the bitsets take two words.
        let keys: Vec<(KeyScope, Box<[u8]>)> = (0..70)
            .map(|i| (KeyScope::ALL[i % 5], format!("key.{i}").into_bytes().into()))
            .collect();
        let mut first = vec![0u64; 2];
        let mut second = vec![0u64; 2];
        for i in [0usize, 3, 64, 69] {
            first[i / 64] |= 1 << (i % 64);
        }
        second[0] |= 1 << 5;
        let with_keys = TraceIndex {
            keys: Some(KeyLists {
                keys,
                row_groups: vec![first, second],
            }),
            ..with_values.clone()
        };
        let enc = with_keys.encode();
        let dec = TraceIndex::decode(&enc).unwrap();
        assert_eq!(dec, with_keys);
        let listed = |rg| {
            dec.keys
                .as_ref()
                .unwrap()
                .of_row_group(rg)
                .map(|(scope, k)| (scope, String::from_utf8(k.to_vec()).unwrap()))
                .collect::<Vec<_>>()
        };
        assert_eq!(
            listed(0),
            [
                (KeyScope::Resource, "key.0".to_string()),
                (KeyScope::Event, "key.3".into()),
                (KeyScope::Link, "key.64".into()),
                (KeyScope::Link, "key.69".into()),
            ]
        );
        assert_eq!(listed(1), [(KeyScope::Resource, "key.5".to_string())]);
        // Every truncation is an error, never a shorter index.
        for cut in 1..enc.len() - 4 {
            let mut short = enc[..enc.len() - cut - 4].to_vec();
            short.extend_from_slice(&crc32c::crc32c(&short).to_le_bytes());
            assert!(TraceIndex::decode(&short).is_err(), "cut {cut}");
        }
    }

    #[test]
    fn an_index_without_key_lists_is_version_2() {
        let mut v = Bloom::with_capacity(4);
        v.insert_bytes(b"x");
        let idx = TraceIndex {
            row_groups: vec![RowGroupRange {
                min: [1; 16],
                max: [2; 16],
                first_row: 0,
                rows: 5,
            }],
            bloom: Bloom::with_capacity(4),
            value_blooms: vec![v],
            keys: None,
            trace_blooms: Vec::new(),
            trace_starts: Vec::new(),
        };
        // Without key lists the writer writes version 2, which a reader of version 2 reads.
        let enc = idx.encode();
        assert_eq!(enc[8..12], 2u32.to_le_bytes());
        assert_eq!(TraceIndex::decode(&enc).unwrap(), idx);
        let with_keys = TraceIndex {
            keys: Some(KeyLists {
                keys: vec![(KeyScope::Span, b"k".to_vec().into())],
                row_groups: vec![vec![1]],
            }),
            ..idx
        };
        assert_eq!(with_keys.encode()[8..12], 3u32.to_le_bytes());
    }

    /// Time-sliced row groups (version 4): the ranges overlap, and each row group's trace bloom
    /// says which of them may hold a trace; with or without key lists, every truncation fails.
    #[test]
    fn time_sliced_row_groups_are_found_by_their_trace_blooms() {
        let id = |i: u8| [i; 16];
        let groups = [[1u8, 5, 9], [2, 6, 8], [3, 4, 7]];
        let mut bloom = Bloom::with_capacity(9);
        let mut trace_blooms = Vec::new();
        let mut row_groups = Vec::new();
        for (k, g) in groups.iter().enumerate() {
            let mut b = Bloom::for_row_group(g.len());
            for &i in g {
                b.insert(&id(i));
                bloom.insert(&id(i));
            }
            trace_blooms.push(b);
            row_groups.push(RowGroupRange {
                min: id(g[0]),
                max: id(g[2]),
                first_row: k as u64 * 3,
                rows: 3,
            });
        }
        let idx = TraceIndex {
            row_groups,
            bloom,
            value_blooms: Vec::new(),
            keys: None,
            trace_blooms,
            trace_starts: vec![(10, 19), (20, 29), (30, 39)],
        };
        for (k, g) in groups.iter().enumerate() {
            for &i in g {
                assert_eq!(idx.candidates(&id(i)), vec![k], "trace {i}");
                assert!(idx.may_hold(&id(i)), "trace {i}");
            }
        }
        assert!(idx.candidates(&id(10)).is_empty());
        // `may_hold` says what `candidates` lists, for IDs in and out of the ranges.
        for i in 0..=255u8 {
            assert_eq!(idx.may_hold(&id(i)), !idx.candidates(&id(i)).is_empty(), "id {i}");
        }
        let with_keys = TraceIndex {
            keys: Some(KeyLists {
                keys: vec![(KeyScope::Span, b"k".to_vec().into())],
                row_groups: vec![vec![1], vec![0], vec![1]],
            }),
            ..idx.clone()
        };
        for idx in [idx, with_keys] {
            let enc = idx.encode();
            assert_eq!(enc[8..12], 4u32.to_le_bytes());
            assert_eq!(TraceIndex::decode(&enc).unwrap(), idx);
            for cut in 1..enc.len() - 4 {
                let mut short = enc[..enc.len() - cut - 4].to_vec();
                short.extend_from_slice(&crc32c::crc32c(&short).to_le_bytes());
                assert!(TraceIndex::decode(&short).is_err(), "cut {cut}");
            }
        }
    }

    #[test]
    fn a_row_group_trace_bloom_has_few_false_positives() {
        let key = |i: u64| Bloom::key_of(&i.to_le_bytes());
        for n in [1usize, 300, 1_000, 5_000] {
            let mut b = Bloom::for_row_group(n);
            (0..n as u64).for_each(|i| b.insert(&key(i)));
            assert!((0..n as u64).all(|i| b.may_contain(&key(i))));
            let fp = (1_000_000..1_200_000u64).filter(|&i| b.may_contain(&key(i))).count();
            assert!(fp < 200, "{fp} false positives in 200,000 for {n} traces");
        }
        // Small filters (15 traces in 512 bits) hold to what their fill predicts (about one in
        // a million): unmixed, 0.04% passed.
        let mut fp = 0;
        for g in 0..100u64 {
            let mut b = Bloom::for_row_group(15);
            (0..15).for_each(|t| b.insert(&key(g * 15 + t)));
            fp += (1_000_000..1_010_000u64).filter(|&i| b.may_contain(&key(i))).count();
        }
        assert!(fp <= 10, "{fp} false positives in 1,000,000");
    }

    proptest::proptest! {
        /// Any bytes, and a valid version 4 index with bytes changed and its checksum redone
        /// (so the parser, not the checksum, meets them), decode to an index or an error: never
        /// a panic or an allocation sized by a damaged count.
        #[test]
        fn decoding_any_index_bytes_never_panics(
            bytes in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..512),
            edits in proptest::collection::vec((proptest::prelude::any::<usize>(), proptest::prelude::any::<u8>()), 1..8),
            keep in proptest::prelude::any::<usize>(),
        ) {
            let _ = TraceIndex::decode(&bytes);
            let mut b = Bloom::for_row_group(2);
            b.insert(&[1; 16]);
            let idx = TraceIndex {
                row_groups: vec![RowGroupRange { min: [1; 16], max: [1; 16], first_row: 0, rows: 1 }],
                bloom: Bloom::with_capacity(2),
                value_blooms: Vec::new(),
                keys: Some(KeyLists { keys: vec![(KeyScope::Span, b"k".to_vec().into())], row_groups: vec![vec![1]] }),
                trace_blooms: vec![b],
                trace_starts: vec![(5, 9)],
            };
            let enc = idx.encode();
            let mut body = enc[..enc.len() - 4].to_vec();
            for (at, v) in edits {
                let at = 8 + at % (body.len() - 8);
                body[at] = v;
            }
            body.truncate(8 + keep % (body.len() - 7));
            let crc = crc32c::crc32c(&body);
            body.extend_from_slice(&crc.to_le_bytes());
            let _ = TraceIndex::decode(&body);
        }
    }
}
