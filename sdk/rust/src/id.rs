//! Trace and span IDs: generation, validity and hex (spec/ids.md).
//!
//! IDs are the `opentelemetry` crate's [`TraceId`] and [`SpanId`] (a `u128` and a `u64`, read
//! big-endian), so they cross the API boundary without conversion.
//!
//! **PRNG.** Every thread owns a [`WyRand`] state in a `thread_local!` cell, seeded from OS entropy
//! (`getrandom`) the first time that thread draws. A draw is one add and one 128-bit multiply, no
//! lock and no shared atomic (bench `id/trace_id`). Fork without exec is unsupported: a child
//! process that keeps drawing on a thread that drew before the fork continues the parent's
//! sequence. The PRNG is not for anything security-sensitive.
//!
//! **Hex.** Hex is never computed when a span is created, sampled or exported as protobuf. It is
//! produced on demand by [`encode_hex`] into a caller buffer, or once per span through [`LazyHex`].

use std::cell::Cell;
use std::fmt;
use std::sync::OnceLock;
use std::time::{SystemTime, UNIX_EPOCH};

pub use opentelemetry::trace::{SpanId, TraceFlags, TraceId};

/// The W3C Level 2 "random" trace flag (`0x02`).
pub const FLAG_RANDOM: u8 = 0x02;
/// The W3C "sampled" trace flag (`0x01`).
pub const FLAG_SAMPLED: u8 = 0x01;

const WY_ADD: u64 = 0xa076_1d64_78bd_642f;
const WY_XOR: u64 = 0xe703_7ed1_a0b4_28db;

/// The wyrand generator (64-bit state, 64-bit output), as specified in spec/ids.md.
///
/// `WyRand::new(seed)` produces exactly the reference stream of the `prng/wyrand/*` vectors.
#[derive(Clone, Debug)]
pub struct WyRand {
    state: u64,
}

impl WyRand {
    /// Creates a generator whose first draw advances `seed` once.
    pub const fn new(seed: u64) -> Self {
        WyRand { state: seed }
    }

    /// Returns the next 64-bit output.
    #[inline]
    pub fn next_u64(&mut self) -> u64 {
        self.state = self.state.wrapping_add(WY_ADD);
        wymix(self.state)
    }
}

#[inline(always)]
fn wymix(state: u64) -> u64 {
    let t = (state as u128).wrapping_mul((state ^ WY_XOR) as u128);
    ((t >> 64) as u64) ^ (t as u64)
}

thread_local! {
    // A `const` initialiser and no destructor: access compiles to a plain TLS load, no lazy-init
    // branch or registration (bench `id_trace_id`). 0 means "not seeded yet"; the state passing
    // through 0 later only causes a harmless reseed.
    static RNG_STATE: Cell<u64> = const { Cell::new(0) };
}

#[cold]
#[inline(never)]
fn seed_thread() -> u64 {
    // getrandom failing is practically impossible on Linux; fall back to a mix of time and the
    // address of a stack local rather than panicking inside instrumentation.
    getrandom::u64().unwrap_or_else(|_| {
        let nanos = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_nanos() as u64)
            .unwrap_or(0);
        let local = 0u8;
        wymix(nanos ^ (&local as *const u8 as u64).rotate_left(32))
    })
}

/// Forgets this thread's PRNG state, so that its next draw reseeds from OS entropy.
///
/// A process that forks without exec calls this in the child (the Python SDK does, from
/// `os.register_at_fork`); otherwise parent and child draw the same IDs.
pub fn reseed_thread() {
    RNG_STATE.set(0);
}

/// Draws the next 64-bit value from this thread's PRNG, seeding it from OS entropy on first use.
#[inline]
pub fn next_u64() -> u64 {
    let mut state = RNG_STATE.get();
    if state == 0 {
        state = seed_thread();
    }
    let next = state.wrapping_add(WY_ADD);
    RNG_STATE.set(next);
    wymix(next)
}

/// Draws a uniformly distributed `f64` in `[0, 1)` from this thread's PRNG.
pub fn next_f64() -> f64 {
    (next_u64() >> 11) as f64 * (1.0 / (1u64 << 53) as f64)
}

/// Builds a trace ID from two draws (bytes 0–7, then 8–15), redrawing both while the result is
/// all zero.
#[inline]
pub fn trace_id_from_draws(mut draw: impl FnMut() -> u64) -> TraceId {
    loop {
        let hi = draw();
        let lo = draw();
        if hi | lo != 0 {
            return TraceId::from(((hi as u128) << 64) | lo as u128);
        }
    }
}

/// Builds a span ID from one draw, redrawing while it is zero.
#[inline]
pub fn span_id_from_draws(mut draw: impl FnMut() -> u64) -> SpanId {
    loop {
        let v = draw();
        if v != 0 {
            return SpanId::from(v);
        }
    }
}

/// Builds an X-Ray compatible trace ID: a default trace ID whose bytes 0–3 are replaced by the
/// Unix time in whole seconds (big-endian, truncated to 32 bits). Redraws if the result is zero.
pub fn xray_trace_id_from_draws(unix_nanos: u64, mut draw: impl FnMut() -> u64) -> TraceId {
    let secs = (unix_nanos / 1_000_000_000) as u32;
    loop {
        let random = u128::from_be_bytes(trace_id_from_draws(&mut draw).to_bytes());
        let id = (random & !(0xffff_ffffu128 << 96)) | ((secs as u128) << 96);
        if id != 0 {
            return TraceId::from(id);
        }
    }
}

/// Generates trace and span IDs. Implementations are called on application threads and must
/// not block.
pub trait IdGenerator: Send + Sync + fmt::Debug + 'static {
    /// Returns a new valid (not all-zero) trace ID whose last 7 bytes are uniformly random.
    fn new_trace_id(&self) -> TraceId;
    /// Returns a new valid (not all-zero) span ID.
    fn new_span_id(&self) -> SpanId;
}

/// The default generator: IDs drawn from the thread-local PRNG.
#[derive(Clone, Copy, Debug, Default)]
pub struct RandomIdGenerator;

impl IdGenerator for RandomIdGenerator {
    #[inline]
    fn new_trace_id(&self) -> TraceId {
        trace_id_from_draws(next_u64)
    }
    #[inline]
    fn new_span_id(&self) -> SpanId {
        span_id_from_draws(next_u64)
    }
}

/// The AWS X-Ray compatible generator: the first 4 bytes of a trace ID hold the wall-clock Unix
/// time in seconds.
#[derive(Clone, Copy, Debug, Default)]
pub struct XrayIdGenerator;

impl IdGenerator for XrayIdGenerator {
    fn new_trace_id(&self) -> TraceId {
        xray_trace_id_from_draws(crate::time::now_unix_nanos(), next_u64)
    }
    fn new_span_id(&self) -> SpanId {
        span_id_from_draws(next_u64)
    }
}

/// Returns the trace flags of a new span: the sampled flag from the decision; the random flag
/// copied from the parent, or set for a new trace whose ID a weft generator produced.
#[inline]
pub fn new_span_flags(parent_flags: Option<u8>, sampled: bool, weft_generated: bool) -> u8 {
    let random = match parent_flags {
        Some(p) => p & FLAG_RANDOM,
        None if weft_generated => FLAG_RANDOM,
        None => 0,
    };
    random | if sampled { FLAG_SAMPLED } else { 0 }
}

/// Returns whether a trace ID is valid (not all zero).
#[inline]
pub fn is_valid_trace_id(id: TraceId) -> bool {
    id != TraceId::INVALID
}

/// Returns whether a span ID is valid (not all zero).
#[inline]
pub fn is_valid_span_id(id: SpanId) -> bool {
    id != SpanId::INVALID
}

const HEX_LOWER: &[u8; 16] = b"0123456789abcdef";

/// Writes `bytes` as lowercase hex into `out`, which must be exactly twice as long.
///
/// # Panics
/// Panics if `out.len() != 2 * bytes.len()`.
#[inline]
pub fn encode_hex(bytes: &[u8], out: &mut [u8]) {
    assert_eq!(out.len(), bytes.len() * 2, "hex output buffer has the wrong length");
    for (i, b) in bytes.iter().enumerate() {
        out[2 * i] = HEX_LOWER[(b >> 4) as usize];
        out[2 * i + 1] = HEX_LOWER[(b & 0x0f) as usize];
    }
}

/// Returns the 32-character lowercase hex form of a trace ID.
pub fn trace_id_hex(id: TraceId) -> String {
    let mut out = [0u8; 32];
    encode_hex(&id.to_bytes(), &mut out);
    String::from_utf8_lossy(&out).into_owned()
}

/// Returns the 16-character lowercase hex form of a span ID.
pub fn span_id_hex(id: SpanId) -> String {
    let mut out = [0u8; 16];
    encode_hex(&id.to_bytes(), &mut out);
    String::from_utf8_lossy(&out).into_owned()
}

/// Value of each byte as a hex digit: `0..=15`, or `0xff` for a non-digit. `LOWER` accepts only
/// `0-9a-f`; `ANY` also accepts `A-F`.
pub(crate) const fn hex_table(upper: bool) -> [u8; 256] {
    let mut t = [0xffu8; 256];
    let mut i = 0;
    while i < 10 {
        t[b'0' as usize + i] = i as u8;
        i += 1;
    }
    let mut i = 0;
    while i < 6 {
        t[b'a' as usize + i] = 10 + i as u8;
        if upper {
            t[b'A' as usize + i] = 10 + i as u8;
        }
        i += 1;
    }
    t
}
static HEX_LOWER_TABLE: [u8; 256] = hex_table(false);
static HEX_ANY_TABLE: [u8; 256] = hex_table(true);

/// Parses up to 32 lowercase hex digits into an integer; `None` on any other byte or if empty.
#[inline]
pub fn parse_hex_lower_u128(s: &[u8]) -> Option<u128> {
    parse_hex_with(s, &HEX_LOWER_TABLE)
}

/// Parses up to 16 lowercase hex digits into an integer; `None` on any other byte or if empty.
#[inline]
pub fn parse_hex_lower_u64(s: &[u8]) -> Option<u64> {
    if s.len() > 16 {
        return None;
    }
    parse_hex_with(s, &HEX_LOWER_TABLE).map(|v| v as u64)
}

/// Parses up to 32 hex digits of either case; `None` on any other byte or if empty.
#[inline]
pub fn parse_hex_any_u128(s: &[u8]) -> Option<u128> {
    parse_hex_with(s, &HEX_ANY_TABLE)
}

#[inline]
fn parse_hex_with(s: &[u8], table: &[u8; 256]) -> Option<u128> {
    if s.is_empty() || s.len() > 32 {
        return None;
    }
    let mut acc: u128 = 0;
    let mut bad = 0u8;
    for &b in s {
        let v = table[b as usize];
        bad |= v;
        acc = (acc << 4) | (v & 0x0f) as u128;
    }
    // Every valid digit is < 16, so any 0xff marks a non-digit (checked once, after the loop).
    if bad & 0xf0 != 0 { None } else { Some(acc) }
}

/// Parses an exact-width 16-digit lowercase span ID, rejecting all-zero.
#[inline]
pub fn parse_span_id(s: &[u8]) -> Option<SpanId> {
    if s.len() != 16 {
        return None;
    }
    match parse_hex_lower_u64(s)? {
        0 => None,
        v => Some(SpanId::from(v)),
    }
}

/// Parses an exact-width 32-digit lowercase trace ID, rejecting all-zero.
#[inline]
pub fn parse_trace_id(s: &[u8]) -> Option<TraceId> {
    if s.len() != 32 {
        return None;
    }
    match parse_hex_lower_u128(s)? {
        0 => None,
        v => Some(TraceId::from(v)),
    }
}

/// The hex forms of a span context's IDs, computed once.
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct HexIds {
    buf: [u8; 48],
}

impl HexIds {
    /// Computes the hex of both IDs.
    pub fn new(trace_id: TraceId, span_id: SpanId) -> Self {
        let mut buf = [0u8; 48];
        encode_hex(&trace_id.to_bytes(), &mut buf[..32]);
        encode_hex(&span_id.to_bytes(), &mut buf[32..]);
        HexIds { buf }
    }
    /// The 32-character trace ID.
    pub fn trace_id(&self) -> &str {
        std::str::from_utf8(&self.buf[..32]).unwrap_or_default()
    }
    /// The 16-character span ID.
    pub fn span_id(&self) -> &str {
        std::str::from_utf8(&self.buf[32..]).unwrap_or_default()
    }
}

impl fmt::Debug for HexIds {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}-{}", self.trace_id(), self.span_id())
    }
}

/// A once-computed hex view of a span context's IDs.
///
/// The first call to [`LazyHex::get`] computes the hex; later calls (from any thread) return the
/// cached value. Nothing is computed if `get` is never called.
#[derive(Default)]
pub struct LazyHex(OnceLock<HexIds>);

impl LazyHex {
    /// Returns an empty cache.
    pub const fn new() -> Self {
        LazyHex(OnceLock::new())
    }
    /// Returns the hex IDs, computing them on the first call.
    pub fn get(&self, trace_id: TraceId, span_id: SpanId) -> &HexIds {
        self.0.get_or_init(|| HexIds::new(trace_id, span_id))
    }
    /// Returns whether the hex was computed already.
    pub fn is_computed(&self) -> bool {
        self.0.get().is_some()
    }
}

impl fmt::Debug for LazyHex {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("LazyHex").field(&self.0.get()).finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wyrand_reference_stream() {
        let mut r = WyRand::new(0);
        assert_eq!(r.next_u64(), 0x111cb3a78f59a58e);
        assert_eq!(r.next_u64(), 0xceabd938ff4e856d);
    }

    #[test]
    fn zero_trace_id_is_redrawn_whole() {
        let draws = [0u64, 0, 7, 9];
        let mut i = 0;
        let id = trace_id_from_draws(|| {
            i += 1;
            draws[i - 1]
        });
        assert_eq!(i, 4);
        assert_eq!(id, TraceId::from((7u128 << 64) | 9));
    }

    #[test]
    fn generated_ids_are_valid_and_differ() {
        let g = RandomIdGenerator;
        let a = g.new_trace_id();
        let b = g.new_trace_id();
        assert!(is_valid_trace_id(a) && a != b);
        assert!(is_valid_span_id(g.new_span_id()));
    }

    #[test]
    fn threads_get_different_streams() {
        let a = std::thread::spawn(next_u64).join().unwrap();
        let b = std::thread::spawn(next_u64).join().unwrap();
        assert_ne!(a, b);
    }

    #[test]
    fn xray_ids_carry_the_epoch() {
        let id = XrayIdGenerator.new_trace_id();
        let secs = u32::from_be_bytes(id.to_bytes()[..4].try_into().unwrap()) as u64;
        let now = crate::time::now_unix_nanos() / 1_000_000_000;
        assert!(now - secs <= 2);
    }

    #[test]
    fn hex_round_trip_and_case() {
        assert_eq!(parse_hex_lower_u64(b"00f067aa0ba902b7"), Some(0x00f067aa0ba902b7));
        assert_eq!(parse_hex_lower_u64(b"00F067aa0ba902b7"), None);
        assert_eq!(parse_hex_any_u128(b"Ff"), Some(255));
        assert_eq!(parse_hex_lower_u128(b""), None);
        assert_eq!(parse_span_id(b"0000000000000000"), None);
        let h = HexIds::new(
            TraceId::from(0x4bf92f3577b34da6a3ce929d0e0e4736u128),
            SpanId::from(0xb7),
        );
        assert_eq!(h.trace_id(), "4bf92f3577b34da6a3ce929d0e0e4736");
        assert_eq!(h.span_id(), "00000000000000b7");
    }

    #[test]
    fn lazy_hex_is_computed_once() {
        let lazy = LazyHex::new();
        assert!(!lazy.is_computed());
        let a = *lazy.get(TraceId::from(1u128), SpanId::from(2));
        assert!(lazy.is_computed());
        assert_eq!(*lazy.get(TraceId::from(3u128), SpanId::from(4)), a);
    }
}
