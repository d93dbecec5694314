//! The composite propagator, configured like `OTEL_PROPAGATORS`.

use std::fmt;

use super::{
    B3Encoding, B3Propagator, BaggagePropagator, Getter, JaegerPropagator, PropagatedContext, Propagator, Setter,
    TraceContextPropagator, XrayPropagator,
};

/// A propagator name that is not known.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct UnknownPropagator(pub String);

impl fmt::Display for UnknownPropagator {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "unknown propagator {:?}", self.0)
    }
}

impl std::error::Error for UnknownPropagator {}

/// Runs its members in order: extract lets the last valid span context win and accumulates
/// baggage; inject lets every member write its headers (a later member wins a shared header).
#[derive(Debug)]
pub struct CompositePropagator {
    members: Vec<Box<dyn Propagator>>,
    fields: Vec<String>,
}

impl Default for CompositePropagator {
    /// `tracecontext,baggage`.
    fn default() -> Self {
        Self::new(vec![
            Box::new(TraceContextPropagator::new()),
            Box::new(BaggagePropagator::new()),
        ])
    }
}

impl CompositePropagator {
    /// Composes `members` in order.
    pub fn new(members: Vec<Box<dyn Propagator>>) -> Self {
        let mut fields: Vec<String> = Vec::new();
        for m in &members {
            for f in m.fields() {
                if !fields.contains(f) {
                    fields.push(f.clone());
                }
            }
        }
        CompositePropagator { members, fields }
    }

    /// Builds a composite from `OTEL_PROPAGATORS`-style names (`tracecontext`, `baggage`, `b3`,
    /// `b3multi`, `xray`, `jaeger`, `none`). A repeated name is used once, at its first position;
    /// unknown names are skipped and returned so the caller can log them.
    pub fn from_names<'a>(names: impl IntoIterator<Item = &'a str>) -> (Self, Vec<UnknownPropagator>) {
        let mut seen: Vec<String> = Vec::new();
        let mut members: Vec<Box<dyn Propagator>> = Vec::new();
        let mut unknown = Vec::new();
        for name in names {
            let name = name.trim().to_ascii_lowercase();
            if name.is_empty() || seen.contains(&name) {
                continue;
            }
            seen.push(name.clone());
            let p: Box<dyn Propagator> = match name.as_str() {
                "tracecontext" => Box::new(TraceContextPropagator::new()),
                "baggage" => Box::new(BaggagePropagator::new()),
                "b3" => Box::new(B3Propagator::new(B3Encoding::Single)),
                "b3multi" => Box::new(B3Propagator::new(B3Encoding::Multi)),
                "xray" => Box::new(XrayPropagator::new()),
                "jaeger" => Box::new(JaegerPropagator::new()),
                "none" => continue,
                _ => {
                    unknown.push(UnknownPropagator(name));
                    continue;
                }
            };
            members.push(p);
        }
        (Self::new(members), unknown)
    }

    /// Builds the composite named by `OTEL_PROPAGATORS` (default `tracecontext,baggage`),
    /// logging unknown names to stderr.
    pub fn from_env() -> Self {
        let v = std::env::var("OTEL_PROPAGATORS").unwrap_or_else(|_| "tracecontext,baggage".into());
        let (p, unknown) = Self::from_names(v.split(','));
        for u in unknown {
            crate::log::warn(format_args!("ignoring {u} in OTEL_PROPAGATORS"));
        }
        p
    }

    /// Returns the number of members.
    pub fn len(&self) -> usize {
        self.members.len()
    }

    /// Returns whether there are no members.
    pub fn is_empty(&self) -> bool {
        self.members.is_empty()
    }
}

impl Propagator for CompositePropagator {
    fn extract(&self, carrier: &dyn Getter, cx: &mut PropagatedContext) {
        for m in &self.members {
            m.extract(carrier, cx);
        }
    }

    fn inject(&self, cx: &PropagatedContext, carrier: &mut dyn Setter) {
        for m in &self.members {
            m.inject(cx, carrier);
        }
    }

    fn fields(&self) -> &[String] {
        &self.fields
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_dedupe_and_unknowns() {
        let (p, unknown) = CompositePropagator::from_names(["tracecontext", "b3", "tracecontext", "nope", "none"]);
        assert_eq!(p.len(), 2);
        assert_eq!(unknown, vec![UnknownPropagator("nope".into())]);
        assert_eq!(p.fields(), ["traceparent", "tracestate", "b3"]);
    }
}
