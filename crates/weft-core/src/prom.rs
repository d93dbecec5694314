//! The Prometheus text exposition format (version 0.0.4), written in one place.
//!
//! Each crate that keeps counters renders them through [`Exposition`], so HELP and TYPE lines,
//! label quoting and number formatting are the same everywhere.

use std::fmt::Write;

/// A metric family's type.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Counter,
    Gauge,
    Histogram,
}

impl Kind {
    fn as_str(self) -> &'static str {
        match self {
            Kind::Counter => "counter",
            Kind::Gauge => "gauge",
            Kind::Histogram => "histogram",
        }
    }
}

/// A Prometheus text page being written.
#[derive(Debug, Default)]
pub struct Exposition {
    out: String,
}

impl Exposition {
    pub fn new() -> Self {
        Exposition {
            out: String::with_capacity(8192),
        }
    }

    /// Starts a family: its HELP and TYPE lines. Samples of it follow.
    pub fn family(&mut self, name: &str, kind: Kind, help: &str) -> &mut Self {
        let _ = writeln!(self.out, "# HELP {name} {help}\n# TYPE {name} {}", kind.as_str());
        self
    }

    /// One sample. `labels` are (name, value) pairs; values are escaped.
    pub fn sample(&mut self, name: &str, labels: &[(&str, &str)], value: f64) -> &mut Self {
        self.out.push_str(name);
        if !labels.is_empty() {
            self.out.push('{');
            for (i, (k, v)) in labels.iter().enumerate() {
                if i > 0 {
                    self.out.push(',');
                }
                let _ = write!(self.out, "{k}=\"");
                for c in v.chars() {
                    match c {
                        '\\' => self.out.push_str("\\\\"),
                        '"' => self.out.push_str("\\\""),
                        '\n' => self.out.push_str("\\n"),
                        c => self.out.push(c),
                    }
                }
                self.out.push('"');
            }
            self.out.push('}');
        }
        let _ = writeln!(self.out, " {value}");
        self
    }

    /// A family with one unlabelled sample.
    pub fn single(&mut self, name: &str, kind: Kind, help: &str, value: f64) -> &mut Self {
        self.family(name, kind, help).sample(name, &[], value)
    }

    /// The page so far.
    pub fn as_str(&self) -> &str {
        &self.out
    }

    pub fn into_string(self) -> String {
        self.out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renders_families_and_escapes_labels() {
        let mut e = Exposition::new();
        e.family("x_total", Kind::Counter, "Things.")
            .sample("x_total", &[("tenant", "a\"b"), ("reason", "r")], 3.0);
        e.single("up", Kind::Gauge, "Up.", 1.5);
        assert_eq!(
            e.as_str(),
            "# HELP x_total Things.\n# TYPE x_total counter\nx_total{tenant=\"a\\\"b\",reason=\"r\"} 3\n# HELP up Up.\n# TYPE up gauge\nup 1.5\n"
        );
    }
}
