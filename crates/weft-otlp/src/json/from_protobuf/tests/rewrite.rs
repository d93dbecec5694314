//! Rewriting a valid encoding into another that decodes to the same message: fields reordered,
//! unknown fields added, scalars overridden, messages split, or anything at all scrambled.

use super::*;

/// A small splitmix64 generator for the rewrites.
struct Rng(u64);

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

/// Encodes one field with a value as `next_field` returns it.
fn field(number: u32, wire_type: u8, value: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    put_tag(&mut out, number, wire_type);
    if wire_type == 2 {
        put_varint(&mut out, value.len() as u64);
    }
    out.extend_from_slice(value);
    out
}

/// The fields of a valid message without groups: number, wire type, value.
fn fields_of(buf: &[u8]) -> Vec<(u32, u8, &[u8])> {
    let mut pos = 0;
    let mut out = Vec::new();
    while pos < buf.len() {
        let (number, wire_type, value) = next_field(buf, &mut pos).expect("valid protobuf");
        out.push((number, wire_type, &buf[value]));
    }
    out
}

fn singular_message(msg: Msg, number: u32) -> bool {
    matches!(
        (msg, number),
        (Msg::ResourceSpans, 1) | (Msg::ScopeSpans, 1) | (Msg::Span, 15) | (Msg::KeyValue, 2) | (Msg::AnyValue, 5 | 6)
    )
}

/// What a rewrite may do to a valid encoding. Each kind keeps the decoded message the same.
#[derive(Clone, Copy, Default)]
pub(super) struct Rewrites {
    /// Puts the fields in a random order, keeping the relative order of the occurrences of each
    /// field (and of all members of `AnyValue`'s oneof).
    pub(super) reorder: bool,
    /// Adds unknown fields of every wire type, groups included.
    pub(super) unknown: bool,
    /// Precedes singular scalar fields (and oneof members) with other values, which lose.
    pub(super) overridden: bool,
    /// Splits singular messages into two occurrences, which prost merges.
    pub(super) split: bool,
    /// Anything at all, the message included: shuffles every field and repeats any.
    pub(super) scramble: bool,
}

struct Rewriter {
    rng: Rng,
    what: Rewrites,
    percent: u64,
}

impl Rewriter {
    fn chance(&mut self) -> bool {
        self.rng.chance(self.percent)
    }

    /// Rewrites the message `buf`; returns it and the offsets where its fields end.
    fn message(&mut self, msg: Msg, buf: &[u8]) -> (Vec<u8>, Vec<usize>) {
        // (ordering group, encoded field)
        let mut items: Vec<(u64, Vec<u8>)> = Vec::new();
        let mut unknown_group = 1 << 40;
        let mut unknown = |this: &mut Self, items: &mut Vec<(u64, Vec<u8>)>| {
            if this.what.unknown && this.chance() {
                unknown_group += 1;
                items.push((unknown_group, this.unknown_field(msg)));
            }
        };
        unknown(self, &mut items);
        for (number, wire_type, value) in fields_of(buf) {
            let group = if msg == Msg::AnyValue && (1..=7).contains(&number) {
                0
            } else {
                u64::from(number)
            };
            let ty = msg.field(number).expect("a known field");
            if self.what.overridden && self.chance() {
                if msg == Msg::AnyValue {
                    let junk = self.junk_any(number);
                    items.push((group, junk));
                } else if let Some(junk) = self.junk(number, ty) {
                    items.push((group, junk));
                }
            }
            match ty {
                Ty::Message(m) => {
                    let (inner, ends) = self.message(m, value);
                    if self.what.split && singular_message(msg, number) && self.chance() {
                        let cut = if ends.is_empty() || self.rng.chance(20) {
                            0
                        } else {
                            ends[self.rng.below(ends.len())]
                        };
                        items.push((group, field(number, 2, &inner[..cut])));
                        items.push((group, field(number, 2, &inner[cut..])));
                    } else {
                        items.push((group, field(number, 2, &inner)));
                    }
                }
                _ => items.push((group, field(number, wire_type, value))),
            }
            if self.what.scramble && self.chance() {
                let dup = items[self.rng.below(items.len())].clone();
                items.push(dup);
            }
            unknown(self, &mut items);
        }
        if self.what.scramble {
            for i in (1..items.len()).rev() {
                let j = self.rng.below(i + 1);
                items.swap(i, j);
            }
        } else if self.what.reorder {
            let salt = self.rng.next();
            items.sort_by_key(|(group, _)| {
                let mut r = Rng(salt ^ group.wrapping_mul(0x2545_f491_4f6c_dd1d));
                r.next()
            });
        }
        let mut out = Vec::new();
        let mut ends = Vec::new();
        for (_, f) in items {
            out.extend_from_slice(&f);
            ends.push(out.len());
        }
        (out, ends)
    }

    /// Another valid value for field `number` of type `ty`, or `None` for a repeated field.
    fn junk(&mut self, number: u32, ty: Ty) -> Option<Vec<u8>> {
        let v = self.rng.next();
        Some(match ty {
            Ty::Varint => vi(number, v),
            Ty::Fixed32 => f32_field(number, v as u32),
            Ty::Fixed64 => f64_field(number, v),
            Ty::Str => ld(number, ["", "junk", "\"é\n"][self.rng.below(3)].as_bytes()),
            Ty::Bytes => ld(number, &v.to_le_bytes()[..self.rng.below(9)]),
            Ty::Message(_) => return None,
        })
    }

    /// Some member of `AnyValue`'s oneof, which a later member `number` overrides (a message
    /// member is not followed by itself, which would merge rather than override).
    fn junk_any(&mut self, number: u32) -> Vec<u8> {
        let v = self.rng.next();
        match self.rng.below(7) {
            4 | 5 if number == 5 || number == 6 => vi(3, v),
            0 => ld(1, b"junk"),
            1 => vi(2, v & 1),
            2 => vi(3, v),
            3 => f64_field(4, v),
            4 => ld(5, &ld(1, &vi(3, v))),
            5 => ld(6, &ld(1, &ld(1, b"junk"))),
            _ => ld(7, &v.to_le_bytes()),
        }
    }

    fn unknown_field(&mut self, msg: Msg) -> Vec<u8> {
        let number = loop {
            let n = match self.rng.below(4) {
                0 => 17 + self.rng.below(30) as u32,
                1 => 1000,
                2 => (1 << 29) - 1,
                _ => 1 + self.rng.below(16) as u32,
            };
            if msg.field(n).is_none() {
                break n;
            }
        };
        let v = self.rng.next();
        match self.rng.below(5) {
            0 => vi(number, v),
            1 => f64_field(number, v),
            2 => ld(number, &v.to_le_bytes()[..self.rng.below(9)]),
            3 => f32_field(number, v as u32),
            _ => group(
                number,
                &[vi(1, v), ld(2, b"\xff\xfe not UTF-8"), group(3, &f32_field(4, 5))].concat(),
            ),
        }
    }
}

pub(super) fn rewrite(pb: &[u8], what: Rewrites, seed: u64, percent: u64) -> Vec<u8> {
    Rewriter {
        rng: Rng(seed),
        what,
        percent,
    }
    .message(Msg::TracesData, pb)
    .0
}
