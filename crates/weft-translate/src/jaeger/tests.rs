use super::*;
use prost::Message;
use weft_otlp::pb::collector::ExportTraceServiceRequest;

/// A minimal Thrift writer for the tests (binary or compact protocol).
struct W {
    out: Vec<u8>,
    compact: bool,
    last: Vec<i16>,
}

const BOOL: u8 = 2;
const DOUBLE: u8 = 4;
const I32: u8 = 8;
const I64: u8 = 10;
const STRING: u8 = 11;
const STRUCT: u8 = 12;
const LIST: u8 = 15;

impl W {
    fn new(compact: bool) -> W {
        W {
            out: Vec::new(),
            compact,
            last: vec![0],
        }
    }
    fn ctype(t: u8, v: bool) -> u8 {
        match t {
            BOOL => {
                if v {
                    1
                } else {
                    2
                }
            }
            DOUBLE => 7,
            I32 => 5,
            I64 => 6,
            STRING => 8,
            STRUCT => 12,
            LIST => 9,
            _ => unreachable!(),
        }
    }
    fn varint(&mut self, mut v: u64) {
        while v >= 0x80 {
            self.out.push(v as u8 | 0x80);
            v >>= 7;
        }
        self.out.push(v as u8);
    }
    fn zz(&mut self, v: i64) {
        self.varint(((v << 1) ^ (v >> 63)) as u64);
    }
    fn field(&mut self, t: u8, id: i16, bool_value: bool) {
        if self.compact {
            let last = *self.last.last().unwrap();
            let d = id - last;
            let ct = Self::ctype(t, bool_value);
            if d > 0 && d <= 15 {
                self.out.push(((d as u8) << 4) | ct);
            } else {
                self.out.push(ct);
                self.zz(i64::from(id));
            }
            *self.last.last_mut().unwrap() = id;
        } else {
            self.out.push(t);
            self.out.extend_from_slice(&id.to_be_bytes());
        }
    }
    fn begin(&mut self) {
        self.last.push(0);
    }
    fn stop(&mut self) {
        self.out.push(0);
        self.last.pop();
    }
    fn i64(&mut self, id: i16, v: i64) {
        self.field(I64, id, false);
        if self.compact {
            self.zz(v)
        } else {
            self.out.extend_from_slice(&v.to_be_bytes())
        }
    }
    fn i32(&mut self, id: i16, v: i32) {
        self.field(I32, id, false);
        if self.compact {
            self.zz(i64::from(v))
        } else {
            self.out.extend_from_slice(&v.to_be_bytes())
        }
    }
    fn str(&mut self, id: i16, s: &str) {
        self.field(STRING, id, false);
        if self.compact {
            self.varint(s.len() as u64)
        } else {
            self.out.extend_from_slice(&(s.len() as i32).to_be_bytes())
        }
        self.out.extend_from_slice(s.as_bytes());
    }
    fn bool(&mut self, id: i16, v: bool) {
        self.field(BOOL, id, v);
        if !self.compact {
            self.out.push(u8::from(v));
        }
    }
    fn double(&mut self, id: i16, v: f64) {
        self.field(DOUBLE, id, false);
        if self.compact {
            self.out.extend_from_slice(&v.to_le_bytes())
        } else {
            self.out.extend_from_slice(&v.to_be_bytes())
        }
    }
    fn list(&mut self, id: i16, n: usize) {
        self.field(LIST, id, false);
        if self.compact {
            if n < 15 {
                self.out.push(((n as u8) << 4) | 12)
            } else {
                self.out.push(0xfc);
                self.varint(n as u64)
            }
        } else {
            self.out.push(STRUCT);
            self.out.extend_from_slice(&(n as i32).to_be_bytes());
        }
    }
    fn struct_field(&mut self, id: i16) {
        self.field(STRUCT, id, false);
    }
}

fn str_tag(w: &mut W, k: &str, v: &str) {
    w.begin();
    w.str(1, k);
    w.i32(2, 0);
    w.str(3, v);
    w.stop();
}

/// A batch: process `frontend` (hostname, jaeger.version tags), one server span with tags of
/// every type, a log, an error, and a child client span found through a CHILD_OF reference.
fn batch_bytes(compact: bool) -> Vec<u8> {
    let mut w = W::new(compact);
    w.struct_field(1);
    w.begin();
    w.str(1, "frontend");
    w.list(2, 2);
    str_tag(&mut w, "hostname", "host-1");
    str_tag(&mut w, "jaeger.version", "Python-4.8.0");
    w.stop();
    w.list(2, 2);
    // span 1
    w.begin();
    w.i64(1, 0x1122);
    w.i64(2, 0);
    w.i64(3, 0x33);
    w.i64(4, 0);
    w.str(5, "HTTP GET /dispatch");
    w.i32(7, 1);
    w.i64(8, 1_700_000_000_000_000);
    w.i64(9, 1500);
    w.list(10, 4);
    str_tag(&mut w, "span.kind", "server");
    w.begin();
    w.str(1, "error");
    w.i32(2, 2);
    w.bool(5, true);
    w.stop();
    w.begin();
    w.str(1, "http.status_code");
    w.i32(2, 3);
    w.i64(6, 503);
    w.stop();
    w.begin();
    w.str(1, "ratio");
    w.i32(2, 1);
    w.double(4, 0.25);
    w.stop();
    w.list(11, 1);
    w.begin();
    w.i64(1, 1_700_000_000_000_100);
    w.list(2, 2);
    str_tag(&mut w, "event", "cache miss");
    str_tag(&mut w, "key", "k1");
    w.stop();
    w.stop();
    // span 2: parent from a reference
    w.begin();
    w.i64(1, 0x1122);
    w.i64(2, 0);
    w.i64(3, 0x44);
    w.i64(4, 0);
    w.str(5, "redis GET");
    w.list(6, 1);
    w.begin();
    w.i32(1, 0);
    w.i64(2, 0x1122);
    w.i64(3, 0);
    w.i64(4, 0x33);
    w.stop();
    w.i64(8, 1_700_000_000_000_200);
    w.i64(9, 300);
    w.list(10, 1);
    str_tag(&mut w, "span.kind", "client");
    w.stop();
    w.stop();
    w.out
}

fn otlp(b: &Batch<'_>) -> ExportTraceServiceRequest {
    ExportTraceServiceRequest::decode(&to_otlp(b)[..]).unwrap()
}

#[test]
fn http_batch_maps_as_the_collector_does() {
    let body = batch_bytes(false);
    let b = decode_http(&body).unwrap();
    let req = otlp(&b);
    let rs = &req.resource_spans[0];
    let res: Vec<(String, String)> = rs
        .resource
        .as_ref()
        .unwrap()
        .attributes
        .iter()
        .map(|kv| (kv.key.clone(), format!("{:?}", kv.value.as_ref().unwrap().value)))
        .collect();
    assert_eq!(res.len(), 3, "{res:?}");
    assert_eq!(res[0].0, "service.name");
    assert_eq!(res[1].0, "host.name");
    assert!(
        res[2].0 == "opencensus.exporterversion" && res[2].1.contains("Jaeger-Python-4.8.0"),
        "{res:?}"
    );
    let spans = &rs.scope_spans[0].spans;
    let (server, client) = (&spans[0], &spans[1]);
    assert_eq!(server.trace_id[14..], [0x11, 0x22]);
    assert_eq!(server.kind, 2);
    assert_eq!(server.end_time_unix_nano - server.start_time_unix_nano, 1_500_000);
    assert_eq!(server.status.as_ref().unwrap().code, 2);
    let keys: Vec<&str> = server.attributes.iter().map(|kv| kv.key.as_str()).collect();
    assert_eq!(keys, vec!["http.status_code", "ratio"]);
    assert_eq!(server.events[0].name, "cache miss");
    assert_eq!(server.events[0].attributes[0].key, "key");
    assert_eq!(client.parent_span_id, server.span_id);
    assert_eq!(client.kind, 3);
    assert!(client.links.is_empty(), "the parent reference is not a link");
}

#[test]
fn agent_datagrams_in_both_protocols() {
    for compact in [true, false] {
        let mut d = Vec::new();
        if compact {
            d.extend_from_slice(&[0x82, 0x81, 0x01, 9]);
            d.extend_from_slice(b"emitBatch");
        } else {
            d.extend_from_slice(&0x8001_0004u32.to_be_bytes());
            d.extend_from_slice(&9i32.to_be_bytes());
            d.extend_from_slice(b"emitBatch");
            d.extend_from_slice(&1i32.to_be_bytes());
        }
        // args struct { 1: Batch }
        let mut w = W::new(compact);
        w.struct_field(1);
        w.begin();
        let inner = batch_bytes(compact);
        w.out.extend_from_slice(&inner);
        w.stop();
        w.out.push(0);
        d.extend_from_slice(&w.out);
        let AgentPayload::Jaeger(b) =
            decode_agent(&d, if compact { Protocol::Compact } else { Protocol::Binary }).unwrap()
        else {
            panic!("expected a Jaeger batch")
        };
        assert_eq!(b, decode_http(&batch_bytes(false)).unwrap(), "compact={compact}");
    }
}

#[test]
fn bad_batches_are_refused() {
    assert!(decode_http(b"").is_err());
    assert!(decode_http(&[0]).unwrap_err().0.contains("no process"));
    let mut body = batch_bytes(false);
    body.push(0);
    assert!(decode_http(&body).unwrap_err().0.contains("after the batch"));
    assert!(
        decode_agent(b"\x82\x21\x01\x03foo\x00", Protocol::Compact)
            .unwrap_err()
            .0
            .contains("unknown method")
    );
}

/// `spec/formats/vectors/jaeger.json`: each batch becomes the expected OTLP (as OTLP/JSON) and
/// reads through Jaeger's query API as the expected trace, or is refused naming the problem.
#[test]
fn spec_vectors() {
    crate::vectors::run("jaeger.json", |v| {
        let body = crate::vectors::input(v);
        let b = decode_http(&body)?;
        let otlp = to_otlp(&b);
        let req = ExportTraceServiceRequest::decode(&otlp[..]).unwrap();
        let data = weft_otlp::pb::trace::TracesData {
            resource_spans: req.resource_spans.clone(),
        };
        Ok(serde_json::json!({
            "otlp": weft_otlp::json::resource_spans_to_json(&req.resource_spans),
            "jaeger": ui::convert(&data).to_json(),
        }))
    });
}

mod no_panic {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(512))]
        /// Random and mangled batches and datagrams, in both protocols: refused or converted.
        #[test]
        fn decoders_refuse_or_convert(
            raw in proptest::collection::vec(any::<u8>(), 0..300),
            flips in proptest::collection::vec((any::<usize>(), any::<u8>()), 0..6),
            cut in 0usize..2000,
            compact in any::<bool>(),
        ) {
            let mut mangled = batch_bytes(compact);
            for (at, v) in flips {
                let n = mangled.len();
                mangled[at % n] = v;
            }
            mangled.truncate(cut.max(1));
            for input in [raw, mangled] {
                if let Ok(b) = decode_http(&input) {
                    crate::assert_valid_conversion(&to_otlp(&b));
                    let req = otlp(&b);
                    let n: usize = req.resource_spans.iter().flat_map(|r| &r.scope_spans).map(|s| s.spans.len()).sum();
                    prop_assert_eq!(n, b.spans.len());
                }
                for proto in [Protocol::Compact, Protocol::Binary] {
                    match decode_agent(&input, proto) {
                        Ok(AgentPayload::Jaeger(b)) => crate::assert_valid_conversion(&to_otlp(&b)),
                        Ok(AgentPayload::Zipkin(s)) => crate::assert_valid_conversion(&crate::zipkin::to_otlp(&s)),
                        Err(_) => {}
                    }
                }
            }
        }
    }
}

mod tags_in_order {
    use super::*;
    use proptest::prelude::*;

    /// One field of a tag: its ID (the Tag struct's 1 to 7, or an unknown 8) and a value of
    /// the type that ID has, or of another type.
    fn field() -> impl Strategy<Value = (i16, u8, i64, String)> {
        (
            1i16..=8,
            prop_oneof![Just(STRING), Just(I32), Just(I64), Just(DOUBLE), Just(BOOL)],
            -3i64..6,
            "[a-z.é]{0,6}",
        )
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(2048))]
        /// Tags as clients write them (key, type, the value of that type, in ID order) and
        /// tags in any other order, with fields missing, repeated, of another type or unknown,
        /// or cut short: the in-order reader and the general one read the same tag and leave
        /// the reader at the same place, or both refuse.
        #[test]
        fn read_as_the_general_reader_reads_them(
            canonical in (any::<bool>(), "[a-z.]{0,8}", 0i32..=5, any::<i64>(), "[a-z]{0,8}"),
            fields in proptest::collection::vec(field(), 0..6),
            use_canonical in any::<bool>(),
            cut in proptest::option::of(0usize..40),
        ) {
            let mut w = W::new(false);
            w.begin();
            if use_canonical {
                let (has_key, key, vtype, n, text) = canonical;
                if has_key {
                    w.str(1, &key);
                }
                w.i32(2, vtype);
                match vtype {
                    0 => w.str(3, &text),
                    1 => w.double(4, n as f64),
                    2 => w.bool(5, n % 2 == 0),
                    3 => w.i64(6, n),
                    4 => w.str(7, &text),
                    _ => {}
                }
            } else {
                for (id, ty, n, text) in fields {
                    match ty {
                        STRING => w.str(id, &text),
                        I32 => w.i32(id, n as i32),
                        I64 => w.i64(id, n),
                        DOUBLE => w.double(id, n as f64),
                        _ => w.bool(id, n % 2 == 0),
                    }
                }
            }
            w.stop();
            // A byte after the tag, so that where each reader stops is seen.
            w.out.push(0x5a);
            let mut bytes = w.out;
            if let Some(c) = cut {
                bytes.truncate(c);
            }
            let mut fast = Reader::new(&bytes, Protocol::Binary);
            let mut general = Reader::new(&bytes, Protocol::Binary);
            match (tag(&mut fast), tag_any_order(&mut general)) {
                (Ok(a), Ok(b)) => {
                    prop_assert_eq!(a, b);
                    prop_assert_eq!(fast.position(), general.position());
                }
                (Err(a), Err(b)) => prop_assert_eq!(a.to_string(), b.to_string()),
                (a, b) => prop_assert!(false, "in order {:?}, general {:?}", a, b),
            }
        }
    }
}
