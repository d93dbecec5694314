//! Requests rendered as OTLP/JSON in random styles that decode to the same message ([`Styler`]),
//! and random edits of a JSON document ([`mutate`]).

use super::*;

/// A tiny deterministic generator for rendering choices (splitmix64).
pub(super) struct Rng(pub(super) u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }

    fn chance(&mut self, percent: u64) -> bool {
        self.next() % 100 < percent
    }
}

/// JSON with room for duplicate keys, rendered as text.
enum J {
    Raw(String),
    Obj(Vec<(String, J)>),
    Arr(Vec<J>),
}

fn raw(v: impl serde::Serialize) -> J {
    J::Raw(serde_json::to_string(&v).unwrap())
}

impl J {
    fn write(&self, rng: &mut Rng, out: &mut String) {
        let ws = |rng: &mut Rng, out: &mut String| {
            if rng.chance(5) {
                out.push_str([" ", "\n", "\t ", "\r\n"][rng.below(4)]);
            }
        };
        match self {
            J::Raw(s) => out.push_str(s),
            J::Obj(entries) => {
                out.push('{');
                for (i, (k, v)) in entries.iter().enumerate() {
                    if i > 0 {
                        out.push(',');
                    }
                    ws(rng, out);
                    out.push_str(&serde_json::to_string(k).unwrap());
                    out.push(':');
                    ws(rng, out);
                    v.write(rng, out);
                }
                ws(rng, out);
                out.push('}');
            }
            J::Arr(items) => {
                out.push('[');
                for (i, v) in items.iter().enumerate() {
                    if i > 0 {
                        out.push(',');
                    }
                    ws(rng, out);
                    v.write(rng, out);
                }
                out.push(']');
            }
        }
    }
}

/// Renders a request as OTLP/JSON in a randomly chosen style: snake_case or camelCase keys,
/// integers as numbers or strings, enums as names or numbers, defaults omitted, explicit or null,
/// overridden duplicate keys and snake_case aliases holding junk, ignored `AnyValue` members,
/// unknown keys, shuffled key order and whitespace. Every choice keeps the decoded message equal
/// to the original.
pub(super) struct Styler {
    pub(super) rng: Rng,
}

type Groups = Vec<Vec<(String, J)>>;

const MEMBERS: [(&str, &str); 7] = [
    ("stringValue", "string_value"),
    ("boolValue", "bool_value"),
    ("intValue", "int_value"),
    ("doubleValue", "double_value"),
    ("arrayValue", "array_value"),
    ("kvlistValue", "kvlist_value"),
    ("bytesValue", "bytes_value"),
];

impl Styler {
    fn junk(&mut self, depth: u32) -> J {
        let pick = if depth == 0 {
            self.rng.below(10)
        } else {
            self.rng.below(12)
        };
        match pick {
            0 => J::Raw("null".into()),
            1 => raw(self.rng.chance(50)),
            2 => raw(self.rng.next() as i64),
            3 => raw(-1.5),
            4 => raw(["", "zz", "NaN", "+1", "-5", "SPAN_KIND_SERVER", "!!", "0102", TID][self.rng.below(9)]),
            5 => raw(self.rng.next()),
            6 => J::Raw("1e300".into()),
            7 => J::Obj(Vec::new()),
            8 => J::Arr(Vec::new()),
            9 => raw("\u{e9}\u{1F600}\"\\"),
            10 => J::Arr((0..self.rng.below(3)).map(|_| self.junk(depth - 1)).collect()),
            _ => J::Obj(
                (0..self.rng.below(3))
                    .map(|_| {
                        let k = ["traceId", "values", "stringValue", "a"][self.rng.below(4)].to_string();
                        (k, self.junk(depth - 1))
                    })
                    .collect(),
            ),
        }
    }

    /// Adds a field. `default` fields may be left out or given as null.
    fn field(&mut self, o: &mut Groups, camel: &str, snake: &str, value: J, default: bool) {
        let value = if default {
            match self.rng.below(4) {
                0 | 1 => return,
                2 => J::Raw("null".into()),
                _ => value,
            }
        } else {
            value
        };
        let aliased = camel != snake;
        let use_snake = aliased && self.rng.chance(30);
        let key = if use_snake { snake } else { camel };
        let mut group = Vec::new();
        if self.rng.chance(10) {
            let junk = self.junk(2);
            group.push((key.to_string(), junk));
        }
        group.push((key.to_string(), value));
        if aliased && !use_snake && self.rng.chance(10) {
            let junk = (snake.to_string(), self.junk(2));
            if self.rng.chance(50) {
                group.insert(0, junk);
            } else {
                group.push(junk);
            }
        }
        o.push(group);
    }

    /// A field that must decode as absent.
    fn absent(&mut self, o: &mut Groups, camel: &str, snake: &str) {
        if self.rng.chance(30) {
            self.field(o, camel, snake, J::Raw("null".into()), false);
        }
    }

    fn finish(&mut self, mut o: Groups) -> J {
        if self.rng.chance(10) {
            let junk = self.junk(3);
            o.push(vec![(
                ["unknownField", "x_y", "TraceId", ""][self.rng.below(4)].to_string(),
                junk,
            )]);
        }
        for i in (1..o.len()).rev() {
            let j = self.rng.below(i + 1);
            o.swap(i, j);
        }
        J::Obj(o.into_iter().flatten().collect())
    }

    fn string(&mut self, o: &mut Groups, camel: &str, snake: &str, s: &str) {
        self.field(o, camel, snake, raw(s), s.is_empty());
    }

    fn uint(&mut self, o: &mut Groups, camel: &str, snake: &str, v: u64, bits32: bool) {
        // A 32-bit field is read as 64 bits and truncated, so high bits may be added.
        let v = if bits32 && self.rng.chance(5) { v | (1 << 40) } else { v };
        let j = if self.rng.chance(50) {
            raw(v)
        } else {
            raw(v.to_string())
        };
        self.field(o, camel, snake, j, v as u32 == 0 && (bits32 || v == 0));
    }

    fn enumeration(&mut self, o: &mut Groups, camel: &str, v: i32, names: &[&str]) {
        let j = match usize::try_from(v).ok().and_then(|i| names.get(i)) {
            Some(name) if self.rng.chance(50) => raw(name),
            _ => raw(v),
        };
        self.field(o, camel, camel, j, v == 0);
    }

    fn hex_id(&mut self, o: &mut Groups, camel: &str, snake: &str, b: &[u8]) {
        let h = if self.rng.chance(20) {
            hex::encode_upper(b)
        } else {
            hex::encode(b)
        };
        self.field(o, camel, snake, raw(h), b.is_empty());
    }

    fn messages<T>(&mut self, o: &mut Groups, camel: &str, snake: &str, items: &[T], f: impl Fn(&mut Self, &T) -> J) {
        let arr = J::Arr(items.iter().map(|x| f(self, x)).collect());
        self.field(o, camel, snake, arr, items.is_empty());
    }

    fn attributes(&mut self, o: &mut Groups, attrs: &[KeyValue]) {
        self.messages(o, "attributes", "attributes", attrs, Self::key_value);
    }

    fn key_value(&mut self, kv: &KeyValue) -> J {
        let mut o = Groups::new();
        self.string(&mut o, "key", "key", &kv.key);
        match &kv.value {
            Some(v) => {
                let j = self.any_value(v);
                self.field(&mut o, "value", "value", j, false);
            }
            None => self.absent(&mut o, "value", "value"),
        }
        self.finish(o)
    }

    fn double(&mut self, d: f64) -> J {
        if d.is_nan() {
            raw("NaN")
        } else if d.is_infinite() {
            raw(if d > 0.0 { "Infinity" } else { "-Infinity" })
        } else if d != 0.0 && d.fract() == 0.0 && d.abs() < 1e15 && self.rng.chance(30) {
            J::Raw(format!("{}", d as i64))
        } else if self.rng.chance(20) {
            raw(serde_json::to_string(&d).unwrap())
        } else {
            raw(d)
        }
    }

    fn any_value(&mut self, v: &AnyValue) -> J {
        let (member, value) = match &v.value {
            None => (MEMBERS.len(), None),
            Some(V::StringValue(s)) => (0, Some(raw(s))),
            Some(V::BoolValue(b)) => (1, Some(raw(b))),
            Some(V::IntValue(i)) => (
                2,
                Some(if self.rng.chance(50) {
                    raw(i)
                } else {
                    raw(i.to_string())
                }),
            ),
            Some(V::DoubleValue(d)) => (3, Some(self.double(*d))),
            Some(V::ArrayValue(a)) => {
                let mut o = Groups::new();
                self.messages(&mut o, "values", "values", &a.values, Self::any_value);
                (4, Some(self.finish(o)))
            }
            Some(V::KvlistValue(k)) => {
                let mut o = Groups::new();
                self.messages(&mut o, "values", "values", &k.values, Self::key_value);
                (5, Some(self.finish(o)))
            }
            Some(V::BytesValue(b)) => (6, Some(raw(B64.encode(b)))),
        };
        let mut value = value;
        let mut o = Groups::new();
        for (i, (camel, snake)) in MEMBERS.iter().enumerate() {
            if i == member {
                let j = value.take().expect("one member");
                self.field(&mut o, camel, snake, j, false);
            } else if i < member {
                // A member that would win must be absent.
                self.absent(&mut o, camel, snake);
            } else if self.rng.chance(10) {
                // A member that loses is ignored, even when invalid.
                let key = if self.rng.chance(50) { camel } else { snake };
                let junk = self.junk(2);
                o.push(vec![(key.to_string(), junk)]);
            }
        }
        self.finish(o)
    }

    fn span(&mut self, s: &Span) -> J {
        let mut o = Groups::new();
        self.hex_id(&mut o, "traceId", "trace_id", &s.trace_id);
        self.hex_id(&mut o, "spanId", "span_id", &s.span_id);
        self.string(&mut o, "traceState", "trace_state", &s.trace_state);
        self.hex_id(&mut o, "parentSpanId", "parent_span_id", &s.parent_span_id);
        self.uint(&mut o, "flags", "flags", s.flags.into(), true);
        self.string(&mut o, "name", "name", &s.name);
        self.enumeration(&mut o, "kind", s.kind, crate::json::KINDS);
        self.uint(
            &mut o,
            "startTimeUnixNano",
            "start_time_unix_nano",
            s.start_time_unix_nano,
            false,
        );
        self.uint(
            &mut o,
            "endTimeUnixNano",
            "end_time_unix_nano",
            s.end_time_unix_nano,
            false,
        );
        self.attributes(&mut o, &s.attributes);
        self.uint(
            &mut o,
            "droppedAttributesCount",
            "dropped_attributes_count",
            s.dropped_attributes_count.into(),
            true,
        );
        self.messages(&mut o, "events", "events", &s.events, |r, e| {
            let mut o = Groups::new();
            r.uint(&mut o, "timeUnixNano", "time_unix_nano", e.time_unix_nano, false);
            r.string(&mut o, "name", "name", &e.name);
            r.attributes(&mut o, &e.attributes);
            r.uint(
                &mut o,
                "droppedAttributesCount",
                "dropped_attributes_count",
                e.dropped_attributes_count.into(),
                true,
            );
            r.finish(o)
        });
        self.uint(
            &mut o,
            "droppedEventsCount",
            "dropped_events_count",
            s.dropped_events_count.into(),
            true,
        );
        self.messages(&mut o, "links", "links", &s.links, |r, l| {
            let mut o = Groups::new();
            r.hex_id(&mut o, "traceId", "trace_id", &l.trace_id);
            r.hex_id(&mut o, "spanId", "span_id", &l.span_id);
            r.string(&mut o, "traceState", "trace_state", &l.trace_state);
            r.attributes(&mut o, &l.attributes);
            r.uint(
                &mut o,
                "droppedAttributesCount",
                "dropped_attributes_count",
                l.dropped_attributes_count.into(),
                true,
            );
            r.uint(&mut o, "flags", "flags", l.flags.into(), true);
            r.finish(o)
        });
        self.uint(
            &mut o,
            "droppedLinksCount",
            "dropped_links_count",
            s.dropped_links_count.into(),
            true,
        );
        match &s.status {
            Some(st) => {
                let mut so = Groups::new();
                self.string(&mut so, "message", "message", &st.message);
                self.enumeration(&mut so, "code", st.code, crate::json::STATUS_CODES);
                let j = self.finish(so);
                self.field(&mut o, "status", "status", j, false);
            }
            None => self.absent(&mut o, "status", "status"),
        }
        self.finish(o)
    }

    fn scope_spans(&mut self, ss: &ScopeSpans) -> J {
        let mut o = Groups::new();
        match &ss.scope {
            Some(s) => {
                let mut so = Groups::new();
                self.string(&mut so, "name", "name", &s.name);
                self.string(&mut so, "version", "version", &s.version);
                self.attributes(&mut so, &s.attributes);
                self.uint(
                    &mut so,
                    "droppedAttributesCount",
                    "dropped_attributes_count",
                    s.dropped_attributes_count.into(),
                    true,
                );
                let j = self.finish(so);
                self.field(&mut o, "scope", "scope", j, false);
            }
            None => self.absent(&mut o, "scope", "scope"),
        }
        self.messages(&mut o, "spans", "spans", &ss.spans, Self::span);
        self.string(&mut o, "schemaUrl", "schema_url", &ss.schema_url);
        self.finish(o)
    }

    fn resource_spans(&mut self, rs: &ResourceSpans) -> J {
        let mut o = Groups::new();
        match &rs.resource {
            Some(r) => {
                let mut ro = Groups::new();
                self.attributes(&mut ro, &r.attributes);
                self.uint(
                    &mut ro,
                    "droppedAttributesCount",
                    "dropped_attributes_count",
                    r.dropped_attributes_count.into(),
                    true,
                );
                let j = self.finish(ro);
                self.field(&mut o, "resource", "resource", j, false);
            }
            None => self.absent(&mut o, "resource", "resource"),
        }
        self.messages(&mut o, "scopeSpans", "scope_spans", &rs.scope_spans, Self::scope_spans);
        self.string(&mut o, "schemaUrl", "schema_url", &rs.schema_url);
        self.finish(o)
    }

    pub(super) fn render(req: &ExportTraceServiceRequest, seed: u64) -> String {
        let mut r = Styler { rng: Rng(seed) };
        let mut o = Groups::new();
        r.messages(
            &mut o,
            "resourceSpans",
            "resource_spans",
            &req.resource_spans,
            Self::resource_spans,
        );
        let j = r.finish(o);
        let mut out = String::new();
        j.write(&mut r.rng, &mut out);
        out
    }
}

/// Picks a random node of `v` and replaces it with junk, removes it or turns it to null.
pub(super) fn mutate(v: &mut Value, rng: &mut Rng, styler: &mut Styler) {
    fn count(v: &Value) -> usize {
        1 + match v {
            Value::Array(a) => a.iter().map(count).sum(),
            Value::Object(o) => o.values().map(count).sum(),
            _ => 0,
        }
    }
    fn nth<'a>(v: &'a mut Value, n: &mut usize) -> Option<&'a mut Value> {
        if *n == 0 {
            return Some(v);
        }
        *n -= 1;
        match v {
            Value::Array(a) => a.iter_mut().find_map(|x| nth(x, n)),
            Value::Object(o) => o.values_mut().find_map(|x| nth(x, n)),
            _ => None,
        }
    }
    let mut n = rng.below(count(v));
    let node = nth(v, &mut n).expect("node exists");
    match rng.below(6) {
        0 => *node = Value::Null,
        1 => {
            if let Value::Object(o) = node
                && !o.is_empty()
            {
                let k = o.keys().nth(rng.below(o.len())).unwrap().clone();
                let x = o.remove(&k).unwrap();
                if rng.chance(50) {
                    o.insert(snake(&k), x);
                }
            }
        }
        2 => {
            if let Value::String(s) = node {
                let mut len = s.len().saturating_sub(1 + rng.below(3));
                while !s.is_char_boundary(len) {
                    len -= 1;
                }
                s.truncate(len);
            }
        }
        3 => {
            if let Value::Array(a) = node {
                a.push(Value::Null);
            }
        }
        _ => {
            let mut text = String::new();
            styler.junk(2).write(rng, &mut text);
            *node = serde_json::from_str(&text).expect("junk is JSON");
        }
    }
}
