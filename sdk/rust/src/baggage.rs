//! Baggage: an ordered list of entries, and the W3C `baggage` header codec
//! (spec/propagation.md#w3c-baggage).

use std::fmt::Write as _;

use crate::tracestate::trim_ows;

/// Maximum number of baggage members propagated.
pub const MAX_MEMBERS: usize = 180;
/// Maximum length of the serialised `baggage` header, commas included.
pub const MAX_BYTES: usize = 8192;

/// One baggage entry. `value` is decoded text; `metadata` is the canonical property list
/// (`key` or `key=value` joined by `;`), possibly empty.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BaggageEntry {
    /// The key, an RFC 7230 token for W3C baggage.
    pub key: String,
    /// The decoded value.
    pub value: String,
    /// Canonical property list.
    pub metadata: String,
}

/// An ordered baggage. Inserting an existing key replaces its value and metadata in place.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Baggage {
    entries: Vec<BaggageEntry>,
}

impl Baggage {
    /// Returns an empty baggage.
    pub const fn new() -> Self {
        Baggage { entries: Vec::new() }
    }

    /// Inserts or replaces an entry; a replaced entry keeps its position.
    pub fn insert(&mut self, key: impl Into<String>, value: impl Into<String>, metadata: impl Into<String>) {
        let (key, value, metadata) = (key.into(), value.into(), metadata.into());
        if let Some(e) = self.entries.iter_mut().find(|e| e.key == key) {
            e.value = value;
            e.metadata = metadata;
        } else {
            self.entries.push(BaggageEntry { key, value, metadata });
        }
    }

    /// Returns the value of `key`.
    pub fn get(&self, key: &str) -> Option<&str> {
        self.entries.iter().find(|e| e.key == key).map(|e| e.value.as_str())
    }

    /// Returns the entries in order.
    pub fn entries(&self) -> &[BaggageEntry] {
        &self.entries
    }

    /// Returns whether there are no entries.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Returns the number of entries.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Keeps, in order, each entry that still fits within 180 members and 8192 serialised bytes;
    /// drops the others.
    pub fn apply_limits(&mut self) {
        let mut count = 0usize;
        let mut bytes = 0usize;
        self.entries.retain(|e| {
            let len = member_len(e);
            let with = bytes + len + usize::from(count > 0);
            if count < MAX_MEMBERS && with <= MAX_BYTES {
                count += 1;
                bytes = with;
                true
            } else {
                false
            }
        });
    }

    /// Parses `baggage` header values (all lines, in order) and merges the valid members into
    /// `self` (later keys override), then applies the limits. Invalid members are skipped.
    pub fn extend_from_header<'a>(&mut self, values: impl IntoIterator<Item = &'a str>) {
        for value in values {
            for piece in value.split(',') {
                if let Some((k, v, m)) = parse_member(piece) {
                    self.insert(k, v, m);
                }
            }
        }
        self.apply_limits();
    }

    /// Serialises the W3C `baggage` header (`None` when nothing is written).
    ///
    /// Entries with a non-token key are skipped, invalid metadata is left out, and the 180-member
    /// and 8192-byte limits are applied.
    pub fn to_header(&self) -> Option<String> {
        let mut out = String::new();
        let mut count = 0usize;
        let mut member = String::new();
        for e in &self.entries {
            if !is_token(&e.key) {
                continue;
            }
            member.clear();
            write_member(&mut member, e);
            let with = out.len() + member.len() + usize::from(count > 0);
            if count >= MAX_MEMBERS || with > MAX_BYTES {
                continue;
            }
            if count > 0 {
                out.push(',');
            }
            out.push_str(&member);
            count += 1;
        }
        if out.is_empty() { None } else { Some(out) }
    }

    /// Converts to the `opentelemetry` API type (which is unordered and keeps at most 64 entries).
    pub fn to_otel(&self) -> opentelemetry::baggage::Baggage {
        let mut b = opentelemetry::baggage::Baggage::new();
        for e in &self.entries {
            b.insert_with_metadata(e.key.clone(), e.value.clone(), e.metadata.as_str());
        }
        b
    }

    /// Converts from the `opentelemetry` API type, ordering entries by key.
    pub fn from_otel(b: &opentelemetry::baggage::Baggage) -> Baggage {
        let mut entries: Vec<BaggageEntry> = b
            .iter()
            .map(|(k, (v, m))| BaggageEntry {
                key: k.to_string(),
                value: v.to_string(),
                metadata: m.to_string(),
            })
            .collect();
        entries.sort_by(|a, b| a.key.cmp(&b.key));
        Baggage { entries }
    }

    /// Returns whether this baggage holds exactly the entries of the API baggage, ignoring order.
    pub fn same_entries_as(&self, b: &opentelemetry::baggage::Baggage) -> bool {
        self.entries.len() == b.len()
            && self.entries.iter().all(|e| {
                b.get_with_metadata(e.key.as_str())
                    .is_some_and(|(v, m)| v.as_str() == e.value && m.as_str() == e.metadata)
            })
    }
}

/// Returns whether `s` is an RFC 7230 `token`.
pub fn is_token(s: &str) -> bool {
    !s.is_empty() && s.bytes().all(is_tchar)
}

#[inline]
fn is_tchar(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b)
}

/// Returns whether `b` is a W3C `baggage-octet`.
#[inline]
pub fn is_baggage_octet(b: u8) -> bool {
    matches!(b, 0x21 | 0x23..=0x2b | 0x2d..=0x3a | 0x3c..=0x5b | 0x5d..=0x7e)
}

fn hex_val(b: u8) -> Option<u8> {
    match b {
        b'0'..=b'9' => Some(b - b'0'),
        b'a'..=b'f' => Some(b - b'a' + 10),
        b'A'..=b'F' => Some(b - b'A' + 10),
        _ => None,
    }
}

/// Percent-decodes `%XX` (either case); `plus_is_space` also maps `+` to a space (form
/// encoding). The bytes are then read as UTF-8, each byte that is not part of a well-formed
/// sequence becoming one U+FFFD. `None` only for a `%` not followed by two hex digits.
pub(crate) fn percent_decode(s: &str, plus_is_space: bool) -> Option<String> {
    if !(s.contains('%') || plus_is_space && s.contains('+')) {
        return Some(s.to_owned());
    }
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        match b[i] {
            b'%' => {
                let hi = hex_val(*b.get(i + 1)?)?;
                let lo = hex_val(*b.get(i + 2)?)?;
                out.push(hi << 4 | lo);
                i += 3;
            }
            b'+' if plus_is_space => {
                out.push(b' ');
                i += 1;
            }
            c => {
                out.push(c);
                i += 1;
            }
        }
    }
    Some(utf8_lossy_per_byte(&out))
}

/// Decodes UTF-8, replacing every byte that is not part of a well-formed sequence with U+FFFD
/// (one per byte, as Go's decoder does; `String::from_utf8_lossy` would collapse a truncated
/// multi-byte prefix into one).
pub(crate) fn utf8_lossy_per_byte(mut bytes: &[u8]) -> String {
    let mut out = String::with_capacity(bytes.len());
    loop {
        match std::str::from_utf8(bytes) {
            Ok(s) => {
                out.push_str(s);
                return out;
            }
            Err(e) => {
                let good = e.valid_up_to();
                out.push_str(std::str::from_utf8(&bytes[..good]).unwrap_or_default());
                out.push('\u{FFFD}');
                bytes = &bytes[good + 1..];
            }
        }
    }
}

/// Parses one list member; `None` if it is empty or invalid.
fn parse_member(piece: &str) -> Option<(String, String, String)> {
    let piece = trim_ows(piece);
    if piece.is_empty() {
        return None;
    }
    let mut parts = piece.split(';');
    let kv = parts.next()?;
    let (k, v) = kv.split_once('=')?;
    let (k, v) = (trim_ows(k), trim_ows(v));
    if !is_token(k) || !v.bytes().all(is_baggage_octet) {
        return None;
    }
    let value = percent_decode(v, false)?;
    let mut metadata = String::new();
    for prop in parts {
        let prop = canonical_property(prop)?;
        if prop.is_empty() {
            continue;
        }
        if !metadata.is_empty() {
            metadata.push(';');
        }
        metadata.push_str(&prop);
    }
    Some((k.to_owned(), value, metadata))
}

/// Canonicalises one property (`key` or `key=value`); `Some("")` for an empty property and `None`
/// for an invalid one.
fn canonical_property(prop: &str) -> Option<String> {
    let prop = trim_ows(prop);
    if prop.is_empty() {
        return Some(String::new());
    }
    match prop.split_once('=') {
        None => is_token(prop).then(|| prop.to_owned()),
        Some((k, v)) => {
            let (k, v) = (trim_ows(k), trim_ows(v));
            (is_token(k) && v.bytes().all(is_baggage_octet)).then(|| format!("{k}={v}"))
        }
    }
}

/// Returns the metadata in canonical form if it is a valid property list.
fn valid_metadata(m: &str) -> Option<String> {
    let mut out = String::new();
    for prop in m.split(';') {
        let p = canonical_property(prop)?;
        if p.is_empty() {
            continue;
        }
        if !out.is_empty() {
            out.push(';');
        }
        out.push_str(&p);
    }
    Some(out)
}

fn write_member(out: &mut String, e: &BaggageEntry) {
    out.push_str(&e.key);
    out.push('=');
    for &b in e.value.as_bytes() {
        if is_baggage_octet(b) && b != b'%' {
            out.push(b as char);
        } else {
            let _ = write!(out, "%{b:02X}");
        }
    }
    if !e.metadata.is_empty()
        && let Some(m) = valid_metadata(&e.metadata)
        && !m.is_empty()
    {
        out.push(';');
        out.push_str(&m);
    }
}

fn member_len(e: &BaggageEntry) -> usize {
    let mut s = String::new();
    write_member(&mut s, e);
    s.len()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(v: &[&str]) -> Baggage {
        let mut b = Baggage::new();
        b.extend_from_header(v.iter().copied());
        b
    }

    #[test]
    fn extract_decodes_and_keeps_order() {
        let b = parse(&["userId=alice, serverNode=DF%2028 ;p1; p2 = x", "isProduction=false"]);
        assert_eq!(b.get("serverNode"), Some("DF 28"));
        assert_eq!(b.entries()[1].metadata, "p1;p2=x");
        assert_eq!(b.entries()[2].key, "isProduction");
    }

    #[test]
    fn invalid_members_are_skipped_and_duplicates_replace() {
        let b = parse(&["a=1,bad key=2,c=%zz,a=3,d=%E2%82x"]);
        assert_eq!(b.len(), 2);
        assert_eq!(b.get("a"), Some("3"));
        assert_eq!(b.get("d"), Some("\u{FFFD}\u{FFFD}x"));
    }

    #[test]
    fn inject_escapes_minimally() {
        let mut b = Baggage::new();
        b.insert("promo", "50% off; \"deal\"", "");
        b.insert("word", "été", "");
        b.insert("bad key", "x", "");
        assert_eq!(
            b.to_header().unwrap(),
            "promo=50%25%20off%3B%20%22deal%22,word=%C3%A9t%C3%A9"
        );
    }

    #[test]
    fn limits_drop_only_members_that_do_not_fit() {
        let mut b = Baggage::new();
        b.insert("big", "x".repeat(9000), "");
        for i in 0..200 {
            b.insert(format!("k{i}"), "v", "");
        }
        b.apply_limits();
        assert_eq!(b.len(), MAX_MEMBERS);
        assert!(b.get("big").is_none());
    }
}
