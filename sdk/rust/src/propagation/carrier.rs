//! Carriers: where propagators read and write headers.

use std::collections::HashMap;

/// Read access to a set of headers.
pub trait Getter {
    /// Calls `f` with each value of header `name` (ASCII case-insensitive), one per header line,
    /// in the order received, until `f` returns `false`. Values are passed as received.
    fn values<'a>(&'a self, name: &str, f: &mut dyn FnMut(&'a str) -> bool);
    /// Calls `f` with the name of every header present (duplicates allowed).
    fn names<'a>(&'a self, f: &mut dyn FnMut(&'a str));
}

/// Write access to a set of headers.
pub trait Setter {
    /// Sets header `name` (lowercase) to `value`, replacing any existing value.
    fn set(&mut self, name: &str, value: String);
}

/// An ordered list of headers; lookups are case-insensitive and keep duplicate lines.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct HeaderVec(pub Vec<(String, String)>);

impl HeaderVec {
    /// Returns an empty list.
    pub fn new() -> Self {
        HeaderVec(Vec::new())
    }

    /// Builds a list from name/value pairs, keeping order and duplicates.
    pub fn from_pairs<K: Into<String>, V: Into<String>>(pairs: impl IntoIterator<Item = (K, V)>) -> Self {
        HeaderVec(pairs.into_iter().map(|(k, v)| (k.into(), v.into())).collect())
    }

    /// Appends a header line.
    pub fn append(&mut self, name: impl Into<String>, value: impl Into<String>) {
        self.0.push((name.into(), value.into()));
    }

    /// Returns the first value of `name` as stored.
    pub fn get(&self, name: &str) -> Option<&str> {
        self.0
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }
}

impl Getter for HeaderVec {
    fn values<'a>(&'a self, name: &str, f: &mut dyn FnMut(&'a str) -> bool) {
        for (k, v) in &self.0 {
            if k.eq_ignore_ascii_case(name) && !f(v) {
                return;
            }
        }
    }
    fn names<'a>(&'a self, f: &mut dyn FnMut(&'a str)) {
        for (k, _) in &self.0 {
            f(k);
        }
    }
}

impl Setter for HeaderVec {
    fn set(&mut self, name: &str, value: String) {
        self.0.retain(|(k, _)| !k.eq_ignore_ascii_case(name));
        self.0.push((name.to_owned(), value));
    }
}

impl<'s> Getter for [(&'s str, &'s str)] {
    fn values<'a>(&'a self, name: &str, f: &mut dyn FnMut(&'a str) -> bool) {
        for (k, v) in self {
            if k.eq_ignore_ascii_case(name) && !f(v) {
                return;
            }
        }
    }
    fn names<'a>(&'a self, f: &mut dyn FnMut(&'a str)) {
        for (k, _) in self {
            f(k);
        }
    }
}

/// A map holds one value per name; lookups try the exact name, then a case-insensitive scan.
impl<S: std::hash::BuildHasher> Getter for HashMap<String, String, S> {
    fn values<'a>(&'a self, name: &str, f: &mut dyn FnMut(&'a str) -> bool) {
        if let Some(v) = self.get(name) {
            f(v);
            return;
        }
        for (k, v) in self {
            if k.eq_ignore_ascii_case(name) && !f(v) {
                return;
            }
        }
    }
    fn names<'a>(&'a self, f: &mut dyn FnMut(&'a str)) {
        for k in self.keys() {
            f(k);
        }
    }
}

impl<S: std::hash::BuildHasher> Setter for HashMap<String, String, S> {
    fn set(&mut self, name: &str, value: String) {
        self.insert(name.to_ascii_lowercase(), value);
    }
}

/// Non-UTF-8 header values are skipped.
impl Getter for http::HeaderMap {
    fn values<'a>(&'a self, name: &str, f: &mut dyn FnMut(&'a str) -> bool) {
        for v in self.get_all(name) {
            if let Ok(s) = v.to_str()
                && !f(s)
            {
                return;
            }
        }
    }
    fn names<'a>(&'a self, f: &mut dyn FnMut(&'a str)) {
        for k in self.keys() {
            f(k.as_str());
        }
    }
}

/// Headers with an invalid name or value are not set.
impl Setter for http::HeaderMap {
    fn set(&mut self, name: &str, value: String) {
        if let (Ok(n), Ok(v)) = (
            http::header::HeaderName::from_bytes(name.as_bytes()),
            http::header::HeaderValue::from_str(&value),
        ) {
            self.insert(n, v);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn header_vec_is_case_insensitive_and_ordered() {
        let mut h = HeaderVec::from_pairs([("TraceState", "a=1"), ("tracestate", "b=2")]);
        let mut seen = Vec::new();
        h.values("tracestate", &mut |v| {
            seen.push(v.to_owned());
            true
        });
        assert_eq!(seen, ["a=1", "b=2"]);
        h.set("tracestate", "c=3".into());
        assert_eq!(h.0, vec![("tracestate".to_string(), "c=3".to_string())]);
    }

    #[test]
    fn http_header_map() {
        let mut h = http::HeaderMap::new();
        Setter::set(&mut h, "traceparent", "x".into());
        let mut got = None;
        Getter::values(&h, "TraceParent", &mut |v| {
            got = Some(v);
            false
        });
        assert_eq!(got, Some("x"));
    }
}
