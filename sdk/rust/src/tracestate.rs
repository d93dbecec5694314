//! W3C `tracestate` (Level 2), stored canonically (spec/propagation.md#w3c-trace-context).
//!
//! A [`TraceState`] is its canonical serialisation (`key=value` members joined by `,`, no
//! whitespace) behind an `Arc<str>`, so cloning it into a child span is a reference-count
//! increment and the empty state allocates nothing.

use std::borrow::Cow;
use std::fmt;
use std::sync::Arc;

/// Maximum number of (non-empty) list members.
pub const MAX_MEMBERS: usize = 32;
/// Maximum length of the serialised header on inject.
pub const MAX_HEADER_LEN: usize = 512;
/// Members longer than this are removed first when truncating.
pub const LARGE_MEMBER_LEN: usize = 128;

/// An immutable, validated W3C tracestate.
#[derive(Clone, Default, PartialEq, Eq, Hash)]
pub struct TraceState(Option<Arc<str>>);

/// Why a tracestate was rejected. A rejected tracestate is discarded as a whole.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum TraceStateError {
    /// A member has no `=`.
    MissingEquals,
    /// A key does not match the Level 2 key grammar.
    InvalidKey,
    /// A value is empty, too long, or has a forbidden character.
    InvalidValue,
    /// A key appears twice. Only [`TraceState::from_members`] reports this: a received header
    /// with a repeated key keeps the first occurrence (see [`TraceState::parse`]).
    DuplicateKey,
    /// More than 32 non-empty members.
    TooManyMembers,
}

impl fmt::Display for TraceStateError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let s = match self {
            TraceStateError::MissingEquals => "tracestate member has no '='",
            TraceStateError::InvalidKey => "invalid tracestate key",
            TraceStateError::InvalidValue => "invalid tracestate value",
            TraceStateError::DuplicateKey => "duplicate tracestate key",
            TraceStateError::TooManyMembers => "more than 32 tracestate members",
        };
        f.write_str(s)
    }
}

impl std::error::Error for TraceStateError {}

/// Trims SP and HTAB (only) from both ends.
#[inline]
pub(crate) fn trim_ows(s: &str) -> &str {
    s.trim_matches(|c| c == ' ' || c == '\t')
}

/// Returns whether `key` matches `( lcalpha / DIGIT ) 0*255( keychar )`.
pub fn is_valid_key(key: &str) -> bool {
    let b = key.as_bytes();
    if b.is_empty() || b.len() > 256 {
        return false;
    }
    if !(b[0].is_ascii_lowercase() || b[0].is_ascii_digit()) {
        return false;
    }
    b[1..]
        .iter()
        .all(|&c| c.is_ascii_lowercase() || c.is_ascii_digit() || matches!(c, b'_' | b'-' | b'*' | b'/' | b'@'))
}

/// Returns whether `value` is 1–256 characters of `0x20–0x7E` except `,` and `=`, not ending in
/// a space.
pub fn is_valid_value(value: &str) -> bool {
    let b = value.as_bytes();
    if b.is_empty() || b.len() > 256 || b[b.len() - 1] == b' ' {
        return false;
    }
    b.iter().all(|&c| (0x20..=0x7e).contains(&c) && c != b',' && c != b'=')
}

impl TraceState {
    /// The empty tracestate.
    pub const EMPTY: TraceState = TraceState(None);

    /// Parses the values of every `tracestate` header line, in order, as one list
    /// (spec/propagation.md, "tracestate extract").
    ///
    /// Empty and whitespace-only members are skipped. When a key appears more than once, the
    /// first (left-most) occurrence is kept, at its position, and every later one is dropped.
    /// Any invalid member (a dropped duplicate included) or more than 32 non-empty members
    /// (dropped duplicates included) rejects the whole list.
    pub fn parse<'a>(values: impl IntoIterator<Item = &'a str>) -> Result<TraceState, TraceStateError> {
        let mut out = String::new();
        let mut count = 0usize;
        for value in values {
            for piece in value.split(',') {
                let piece = trim_ows(piece);
                if piece.is_empty() {
                    continue;
                }
                let (key, val) = piece.split_once('=').ok_or(TraceStateError::MissingEquals)?;
                if !is_valid_key(key) {
                    return Err(TraceStateError::InvalidKey);
                }
                if !is_valid_value(val) {
                    return Err(TraceStateError::InvalidValue);
                }
                count += 1;
                if count > MAX_MEMBERS {
                    return Err(TraceStateError::TooManyMembers);
                }
                if members_of(&out).any(|(k, _)| k == key) {
                    // A later duplicate: the left-most member is the most recent position.
                    continue;
                }
                if !out.is_empty() {
                    out.push(',');
                }
                out.push_str(piece);
            }
        }
        Ok(TraceState::from_canonical_unchecked(out))
    }

    /// Parses one header value (see [`TraceState::parse`]).
    pub fn parse_str(value: &str) -> Result<TraceState, TraceStateError> {
        Self::parse(std::iter::once(value))
    }

    fn from_canonical_unchecked(s: String) -> TraceState {
        if s.is_empty() {
            TraceState(None)
        } else {
            TraceState(Some(Arc::from(s)))
        }
    }

    /// Builds a tracestate from members in order. Unlike [`TraceState::parse`], which accepts
    /// what another tracer sent, this builds a state weft will send, so a repeated key is an
    /// error ([`TraceStateError::DuplicateKey`]; W3C: adding a member "MUST NOT result in the
    /// same key being present multiple times"), as are an invalid key or value and more than 32
    /// members.
    pub fn from_members<'a>(members: impl IntoIterator<Item = (&'a str, &'a str)>) -> Result<Self, TraceStateError> {
        let mut s = String::new();
        let mut count = 0usize;
        for (k, v) in members {
            if !is_valid_key(k) {
                return Err(TraceStateError::InvalidKey);
            }
            if !is_valid_value(v) {
                return Err(TraceStateError::InvalidValue);
            }
            count += 1;
            if count > MAX_MEMBERS {
                return Err(TraceStateError::TooManyMembers);
            }
            if members_of(&s).any(|(key, _)| key == k) {
                return Err(TraceStateError::DuplicateKey);
            }
            if !s.is_empty() {
                s.push(',');
            }
            s.push_str(k);
            s.push('=');
            s.push_str(v);
        }
        Ok(TraceState::from_canonical_unchecked(s))
    }

    /// Returns whether there are no members.
    #[inline]
    pub fn is_empty(&self) -> bool {
        self.0.is_none()
    }

    /// Returns the canonical serialisation (`""` when empty).
    #[inline]
    pub fn as_str(&self) -> &str {
        self.0.as_deref().unwrap_or("")
    }

    /// Returns the members in order.
    pub fn members(&self) -> impl Iterator<Item = (&str, &str)> {
        members_of(self.as_str())
    }

    /// Returns the number of members.
    pub fn len(&self) -> usize {
        self.members().count()
    }

    /// Returns the value of `key`, if present.
    pub fn get(&self, key: &str) -> Option<&str> {
        self.members().find(|(k, _)| *k == key).map(|(_, v)| v)
    }

    /// Returns a tracestate with `key=value` at the front, any old `key` member removed, and the
    /// right-most member dropped if that makes 33 members. Returns `None` if the key or value is
    /// invalid.
    pub fn with_front(&self, key: &str, value: &str) -> Option<TraceState> {
        if !is_valid_key(key) || !is_valid_value(value) {
            return None;
        }
        let mut s = String::with_capacity(self.as_str().len() + key.len() + value.len() + 2);
        s.push_str(key);
        s.push('=');
        s.push_str(value);
        let mut n = 1;
        for (k, v) in self.members() {
            if k == key {
                continue;
            }
            if n == MAX_MEMBERS {
                break;
            }
            s.push(',');
            s.push_str(k);
            s.push('=');
            s.push_str(v);
            n += 1;
        }
        Some(TraceState::from_canonical_unchecked(s))
    }

    /// Returns a tracestate without the `key` member (the same state if it is absent).
    pub fn without(&self, key: &str) -> TraceState {
        if self.get(key).is_none() {
            return self.clone();
        }
        let mut s = String::with_capacity(self.as_str().len());
        for (k, v) in self.members().filter(|(k, _)| *k != key) {
            if !s.is_empty() {
                s.push(',');
            }
            s.push_str(k);
            s.push('=');
            s.push_str(v);
        }
        TraceState::from_canonical_unchecked(s)
    }

    /// Returns the header value to inject: the canonical form, truncated to at most 512
    /// characters by removing whole members (right-most members over 128 characters first, then
    /// right-most members). Borrows when no truncation is needed.
    pub fn header_value(&self) -> Cow<'_, str> {
        let s = self.as_str();
        if s.len() <= MAX_HEADER_LEN {
            return Cow::Borrowed(s);
        }
        let mut members: Vec<&str> = s.split(',').collect();
        let total = |m: &[&str]| m.iter().map(|x| x.len()).sum::<usize>() + m.len().saturating_sub(1);
        while total(&members) > MAX_HEADER_LEN {
            match members.iter().rposition(|m| m.len() > LARGE_MEMBER_LEN) {
                Some(i) => {
                    members.remove(i);
                }
                None => break,
            }
        }
        while total(&members) > MAX_HEADER_LEN {
            members.pop();
        }
        Cow::Owned(members.join(","))
    }

    /// Converts to the `opentelemetry` API type. Members whose keys the API's (Level 1) validator
    /// rejects are left out; the full state travels beside it (see `propagation::SpanExtras`).
    pub fn to_otel(&self) -> opentelemetry::trace::TraceState {
        if self.is_empty() {
            return opentelemetry::trace::TraceState::NONE;
        }
        if let Ok(ts) = opentelemetry::trace::TraceState::from_key_value(self.members()) {
            return ts;
        }
        let kept: Vec<(&str, &str)> = self
            .members()
            .filter(|m| opentelemetry::trace::TraceState::from_key_value([*m]).is_ok())
            .collect();
        opentelemetry::trace::TraceState::from_key_value(kept).unwrap_or_default()
    }

    /// Converts from the `opentelemetry` API type, validating with the Level 2 rules (an invalid
    /// state becomes empty).
    pub fn from_otel(ts: &opentelemetry::trace::TraceState) -> TraceState {
        if *ts == opentelemetry::trace::TraceState::NONE {
            return TraceState::EMPTY;
        }
        TraceState::parse_str(&ts.header()).unwrap_or_default()
    }
}

fn members_of(s: &str) -> impl Iterator<Item = (&str, &str)> {
    s.split(',').filter(|m| !m.is_empty()).filter_map(|m| m.split_once('='))
}

impl fmt::Debug for TraceState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "TraceState({:?})", self.as_str())
    }
}

impl fmt::Display for TraceState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parse_joins_lines_and_skips_empty_members() {
        let ts = TraceState::parse([" a=1 ,, ", "b=2"]).unwrap();
        assert_eq!(ts.as_str(), "a=1,b=2");
        assert_eq!(ts.get("b"), Some("2"));
        assert_eq!(ts.len(), 2);
    }

    #[test]
    fn duplicate_keys_keep_the_first_occurrence() {
        let p = |v: &[&str]| TraceState::parse(v.iter().copied()).map(|t| t.as_str().to_owned());
        assert_eq!(p(&["foo=1,foo=1"]), Ok("foo=1".into()));
        assert_eq!(p(&["foo=1,foo=2"]), Ok("foo=1".into()));
        assert_eq!(p(&["foo=1", "foo=2"]), Ok("foo=1".into()));
        assert_eq!(p(&["a=1,foo=1,b=2,foo=2,c=3,a=9"]), Ok("a=1,foo=1,b=2,c=3".into()));
        // A dropped duplicate is still validated ...
        assert_eq!(p(&["foo=1,foo=bar=baz"]), Err(TraceStateError::InvalidValue));
        assert_eq!(p(&["foo=1,bar=2,foo"]), Err(TraceStateError::MissingEquals));
        // ... and still counts towards the 32-member limit.
        let mut many: Vec<String> = (1..=31).map(|i| format!("k{i}=v")).collect();
        many.push("k1=w".into());
        let ts = TraceState::parse(many.iter().map(|s| s.as_str())).unwrap();
        assert_eq!((ts.len(), ts.get("k1")), (31, Some("v")));
        many.push("k2=w".into());
        assert_eq!(
            TraceState::parse(many.iter().map(|s| s.as_str())),
            Err(TraceStateError::TooManyMembers)
        );
    }

    #[test]
    fn from_members_rejects_what_weft_must_not_send() {
        assert_eq!(
            TraceState::from_members([("a", "1"), ("a", "2")]),
            Err(TraceStateError::DuplicateKey)
        );
        assert_eq!(
            TraceState::from_members([("a=1,b", "2")]),
            Err(TraceStateError::InvalidKey)
        );
        assert_eq!(
            TraceState::from_members([("a", "1,b=2")]),
            Err(TraceStateError::InvalidValue)
        );
        assert_eq!(
            TraceState::from_members([("a", "1"), ("b@x", " 2")]).unwrap().as_str(),
            "a=1,b@x= 2"
        );
        assert_eq!(TraceState::from_members([]), Ok(TraceState::EMPTY));
    }

    #[test]
    fn rejects_bad_members() {
        assert_eq!(TraceState::parse_str("A=1"), Err(TraceStateError::InvalidKey));
        assert_eq!(
            TraceState::parse_str("a=1 x,"),
            Ok(TraceState::parse_str("a=1 x").unwrap())
        );
        assert_eq!(TraceState::parse_str("a"), Err(TraceStateError::MissingEquals));
        assert_eq!(TraceState::parse_str("a=\t1"), Err(TraceStateError::InvalidValue));
        let many: Vec<String> = (0..33).map(|i| format!("k{i}=v")).collect();
        assert_eq!(
            TraceState::parse(many.iter().map(|s| s.as_str())),
            Err(TraceStateError::TooManyMembers)
        );
    }

    #[test]
    fn level2_keys() {
        assert!(is_valid_key("foo@@bar"));
        assert!(is_valid_key("fw529a3039@dt"));
        assert!(!is_valid_key("@foo"));
    }

    #[test]
    fn front_insert_drops_rightmost_at_33() {
        let many: Vec<String> = (0..32).map(|i| format!("k{i}=v")).collect();
        let ts = TraceState::parse(many.iter().map(|s| s.as_str())).unwrap();
        let ts2 = ts.with_front("ot", "th:8").unwrap();
        assert_eq!(ts2.len(), 32);
        assert!(ts2.as_str().starts_with("ot=th:8,k0=v"));
        assert!(ts2.get("k31").is_none());
        let ts3 = ts2.with_front("k5", "w").unwrap();
        assert!(ts3.as_str().starts_with("k5=w,ot=th:8,k0=v,k1=v,k2=v,k3=v,k4=v,k6=v"));
        assert_eq!(ts3.without("k5").without("ot").len(), 30);
    }

    #[test]
    fn otel_conversion_keeps_what_the_api_accepts() {
        let ts = TraceState::parse_str("a=1,foo@@bar=2,b=3").unwrap();
        assert_eq!(ts.to_otel().header(), "a=1,b=3");
        assert_eq!(TraceState::from_otel(&ts.to_otel()).as_str(), "a=1,b=3");
    }
}
