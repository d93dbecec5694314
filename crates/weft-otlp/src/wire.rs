//! Minimal protobuf wire-format reader and writer.
//!
//! The ingest hot path never builds a message tree: it walks the bytes with [`Reader`] and keeps
//! sub-slices of the input. Every read is bounds-checked, so arbitrary input yields a
//! [`WireError`], never a panic (see the `no_panic_on_arbitrary_input` property test).

use thiserror::Error;

/// Why a buffer is not valid protobuf.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum WireError {
    #[error("truncated varint at byte {0}")]
    TruncatedVarint(usize),
    #[error("varint longer than 10 bytes at byte {0}")]
    VarintTooLong(usize),
    #[error("length {len} at byte {at} runs past the end of the message ({remaining} bytes left)")]
    LengthOverrun { at: usize, len: u64, remaining: usize },
    #[error("unsupported wire type {wire_type} for field {field} at byte {at}")]
    BadWireType { field: u32, wire_type: u8, at: usize },
    #[error("field number 0 at byte {0}")]
    FieldZero(usize),
    #[error("field {field}: expected wire type {expected}, found {found}")]
    UnexpectedWireType { field: u32, expected: u8, found: u8 },
}

/// One decoded field value. Length-delimited values borrow from the input.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Value<'a> {
    Varint(u64),
    Fixed64(u64),
    Bytes(&'a [u8]),
    Fixed32(u32),
}

impl<'a> Value<'a> {
    pub fn wire_type(&self) -> u8 {
        match self {
            Value::Varint(_) => 0,
            Value::Fixed64(_) => 1,
            Value::Bytes(_) => 2,
            Value::Fixed32(_) => 5,
        }
    }

    /// Returns the bytes of a length-delimited field, or an error naming the field.
    pub fn bytes(self, field: u32) -> Result<&'a [u8], WireError> {
        match self {
            Value::Bytes(b) => Ok(b),
            other => Err(WireError::UnexpectedWireType {
                field,
                expected: 2,
                found: other.wire_type(),
            }),
        }
    }

    pub fn varint(self, field: u32) -> Result<u64, WireError> {
        match self {
            Value::Varint(v) => Ok(v),
            other => Err(WireError::UnexpectedWireType {
                field,
                expected: 0,
                found: other.wire_type(),
            }),
        }
    }

    pub fn fixed64(self, field: u32) -> Result<u64, WireError> {
        match self {
            Value::Fixed64(v) => Ok(v),
            other => Err(WireError::UnexpectedWireType {
                field,
                expected: 1,
                found: other.wire_type(),
            }),
        }
    }

    pub fn fixed32(self, field: u32) -> Result<u32, WireError> {
        match self {
            Value::Fixed32(v) => Ok(v),
            other => Err(WireError::UnexpectedWireType {
                field,
                expected: 5,
                found: other.wire_type(),
            }),
        }
    }
}

/// A field as found in the buffer: its number, value, and the byte range it occupies
/// (tag included), relative to the reader's buffer.
#[derive(Debug, Clone, Copy)]
pub struct Field<'a> {
    pub number: u32,
    pub value: Value<'a>,
    pub start: usize,
    pub end: usize,
}

/// Iterates the top-level fields of one message.
pub struct Reader<'a> {
    buf: &'a [u8],
    pos: usize,
}

/// Reads one varint at `pos`, advancing it.
#[inline(always)]
pub fn read_varint(buf: &[u8], pos: &mut usize) -> Result<u64, WireError> {
    // Fast path: tags and most lengths fit in one byte (measured: the varint loop was ~4% of
    // ingest CPU in `make bench` before this).
    if let Some(&b) = buf.get(*pos)
        && b < 0x80
    {
        *pos += 1;
        return Ok(u64::from(b));
    }
    read_varint_slow(buf, pos)
}

#[inline(never)]
fn read_varint_slow(buf: &[u8], pos: &mut usize) -> Result<u64, WireError> {
    let start = *pos;
    let mut result: u64 = 0;
    for i in 0..10 {
        let Some(&b) = buf.get(*pos) else {
            return Err(WireError::TruncatedVarint(start));
        };
        *pos += 1;
        result |= u64::from(b & 0x7f) << (7 * i);
        if b < 0x80 {
            return Ok(result);
        }
    }
    Err(WireError::VarintTooLong(start))
}

/// Advances `pos` past the field that starts there and returns its number, its wire type and
/// the range of its value (for a length-delimited field, the payload without the length). Same checks and
/// errors as [`Reader::next`], without building a [`Field`]; for walks that skip most fields,
/// such as finding a scope's header among its 512 spans (that walk through [`Reader::next`]
/// was most of the head builder's `Reader::next` time; docs/benchmarks/ingest.md, "What
/// changed this session").
#[inline]
pub fn next_field(buf: &[u8], pos: &mut usize) -> Result<(u32, u8, std::ops::Range<usize>), WireError> {
    let start = *pos;
    let tag = read_varint(buf, pos)?;
    let number = tag >> 3;
    if number == 0 || number > u64::from(u32::MAX >> 3) {
        return Err(WireError::FieldZero(start));
    }
    let fixed = |pos: &mut usize, n: usize| {
        let remaining = buf.len() - *pos;
        if n > remaining {
            return Err(WireError::LengthOverrun {
                at: start,
                len: n as u64,
                remaining,
            });
        }
        *pos += n;
        Ok(*pos - n..*pos)
    };
    let value = match tag & 7 {
        0 => {
            let at = *pos;
            read_varint(buf, pos)?;
            at..*pos
        }
        1 => fixed(pos, 8)?,
        2 => {
            let at = *pos;
            let len = read_varint(buf, pos)?;
            let remaining = buf.len() - *pos;
            if len > remaining as u64 {
                return Err(WireError::LengthOverrun { at, len, remaining });
            }
            *pos += len as usize;
            *pos - len as usize..*pos
        }
        5 => fixed(pos, 4)?,
        wire_type => {
            return Err(WireError::BadWireType {
                field: number as u32,
                wire_type: wire_type as u8,
                at: start,
            });
        }
    };
    Ok((number as u32, (tag & 7) as u8, value))
}

/// Calls `f` with the payload of each length-delimited field `number` at the top level of
/// `buf`, in order, and stops at the first malformed field: what a walk with [`Reader::next`]
/// that stops at an error sees. A field whose tag and length are one byte each, as nearly
/// all of them are, is read without the general parser (compaction walks every attribute of
/// every span this way; docs/benchmarks/all-in-cost-and-compaction.md, "Compaction of
/// realistic spans").
#[inline]
pub fn each_bytes_field<'a>(buf: &'a [u8], number: u32, mut f: impl FnMut(&'a [u8])) {
    let tag = u64::from(number) << 3 | 2;
    let mut p = 0;
    while p < buf.len() {
        if tag < 0x80
            && buf[p] == tag as u8
            && let Some(&len) = buf.get(p + 1)
            && len < 0x80
        {
            let end = p + 2 + usize::from(len);
            let Some(v) = buf.get(p + 2..end) else { return };
            f(v);
            p = end;
            continue;
        }
        match next_field(buf, &mut p) {
            Ok((n, 2, range)) if n == number => f(&buf[range]),
            Ok(_) => {}
            Err(_) => return,
        }
    }
}

impl<'a> Reader<'a> {
    pub fn new(buf: &'a [u8]) -> Self {
        Reader { buf, pos: 0 }
    }

    /// Returns the next field, `Ok(None)` at the end of the message, or the first wire error.
    #[inline]
    #[allow(clippy::should_implement_trait)]
    pub fn next(&mut self) -> Result<Option<Field<'a>>, WireError> {
        if self.pos >= self.buf.len() {
            return Ok(None);
        }
        let start = self.pos;
        let tag = read_varint(self.buf, &mut self.pos)?;
        let number = (tag >> 3) as u32;
        if number == 0 || tag >> 3 > u64::from(u32::MAX >> 3) {
            return Err(WireError::FieldZero(start));
        }
        let wire_type = (tag & 7) as u8;
        let value = match wire_type {
            0 => Value::Varint(read_varint(self.buf, &mut self.pos)?),
            1 => {
                let b = self.take(8, start)?;
                Value::Fixed64(u64::from_le_bytes(b.try_into().expect("8 bytes")))
            }
            2 => {
                let at = self.pos;
                let len = read_varint(self.buf, &mut self.pos)?;
                let remaining = self.buf.len() - self.pos;
                if len > remaining as u64 {
                    return Err(WireError::LengthOverrun { at, len, remaining });
                }
                Value::Bytes(self.take(len as usize, start)?)
            }
            5 => {
                let b = self.take(4, start)?;
                Value::Fixed32(u32::from_le_bytes(b.try_into().expect("4 bytes")))
            }
            _ => {
                return Err(WireError::BadWireType {
                    field: number,
                    wire_type,
                    at: start,
                });
            }
        };
        Ok(Some(Field {
            number,
            value,
            start,
            end: self.pos,
        }))
    }

    #[inline]
    fn take(&mut self, n: usize, at: usize) -> Result<&'a [u8], WireError> {
        let remaining = self.buf.len() - self.pos;
        if n > remaining {
            return Err(WireError::LengthOverrun {
                at,
                len: n as u64,
                remaining,
            });
        }
        let s = &self.buf[self.pos..self.pos + n];
        self.pos += n;
        Ok(s)
    }
}

/// Appends a varint.
#[inline]
pub fn put_varint(out: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        out.push((v as u8) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

/// Number of bytes [`put_varint`] writes for `v`.
#[inline]
pub fn varint_len(v: u64) -> usize {
    (64 - (v | 1).leading_zeros() as usize).div_ceil(7)
}

#[inline]
pub fn put_tag(out: &mut Vec<u8>, field: u32, wire_type: u8) {
    put_varint(out, (u64::from(field) << 3) | u64::from(wire_type));
}

/// Appends a length-delimited field.
#[inline]
pub fn put_bytes(out: &mut Vec<u8>, field: u32, b: &[u8]) {
    put_tag(out, field, 2);
    put_varint(out, b.len() as u64);
    out.extend_from_slice(b);
}

#[inline]
pub fn put_fixed64(out: &mut Vec<u8>, field: u32, v: u64) {
    put_tag(out, field, 1);
    out.extend_from_slice(&v.to_le_bytes());
}

#[inline]
pub fn put_varint_field(out: &mut Vec<u8>, field: u32, v: u64) {
    put_tag(out, field, 0);
    put_varint(out, v);
}

/// Starts a length-delimited field whose length is not known yet; finish it with [`end_nested`].
/// Reserves the maximum varint width so no bytes move afterwards, and writes a padded varint.
#[inline]
pub fn begin_nested(out: &mut Vec<u8>, field: u32) -> usize {
    put_tag(out, field, 2);
    let at = out.len();
    out.extend_from_slice(&[0x80, 0x80, 0x80, 0x80, 0x00]);
    at
}

/// Completes a field opened by [`begin_nested`]. Padded varints (`0x80 … 0x00`) are valid
/// protobuf; every decoder accepts them. Panics if the nested message exceeds 2^28 bytes,
/// which the request-size limits rule out.
#[inline]
pub fn end_nested(out: &mut [u8], at: usize) {
    let len = out.len() - at - 5;
    assert!(len < (1 << 28), "nested message too large");
    let len = len as u32;
    out[at] = (len & 0x7f) as u8 | 0x80;
    out[at + 1] = ((len >> 7) & 0x7f) as u8 | 0x80;
    out[at + 2] = ((len >> 14) & 0x7f) as u8 | 0x80;
    out[at + 3] = ((len >> 21) & 0x7f) as u8 | 0x80;
    out[at + 4] = 0;
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn varint_round_trip() {
        for v in [0u64, 1, 127, 128, 300, u32::MAX as u64, u64::MAX] {
            let mut out = Vec::new();
            put_varint(&mut out, v);
            assert_eq!(out.len(), varint_len(v));
            let mut pos = 0;
            assert_eq!(read_varint(&out, &mut pos).unwrap(), v);
            assert_eq!(pos, out.len());
        }
    }

    #[test]
    fn padded_nested_length_decodes() {
        let mut out = Vec::new();
        let at = begin_nested(&mut out, 3);
        out.extend_from_slice(b"hello");
        end_nested(&mut out, at);
        let mut r = Reader::new(&out);
        let f = r.next().unwrap().unwrap();
        assert_eq!(f.number, 3);
        assert_eq!(f.value, Value::Bytes(b"hello"));
        assert!(r.next().unwrap().is_none());
    }

    #[test]
    fn length_overrun_is_an_error() {
        let buf = [0x0a, 0x05, b'a'];
        assert!(matches!(Reader::new(&buf).next(), Err(WireError::LengthOverrun { .. })));
    }

    proptest! {
        #[test]
        fn no_panic_on_arbitrary_input(buf in proptest::collection::vec(any::<u8>(), 0..256)) {
            let mut r = Reader::new(&buf);
            for _ in 0..300 {
                match r.next() {
                    Ok(Some(_)) => {}
                    _ => break,
                }
            }
        }

        /// `each_bytes_field` yields what a `Reader::next` walk that stops at an error yields.
        #[test]
        fn each_bytes_field_agrees_with_reader(
            buf in proptest::collection::vec(any::<u8>(), 0..256),
            fields in proptest::collection::vec((1u32..20, proptest::collection::vec(any::<u8>(), 0..200)), 0..8),
            number in 1u32..20,
        ) {
            // Arbitrary bytes, and well-formed messages (lengths of one and two bytes).
            let mut good = Vec::new();
            for (n, v) in &fields {
                put_bytes(&mut good, *n, v);
            }
            for b in [&buf, &good] {
                for number in [number, 9, 1] {
                    let mut expected = Vec::new();
                    let mut r = Reader::new(b);
                    while let Ok(Some(f)) = r.next() {
                        if f.number == number && let Value::Bytes(v) = f.value {
                            expected.push(v);
                        }
                    }
                    let mut got = Vec::new();
                    each_bytes_field(b, number, |v| got.push(v));
                    prop_assert_eq!(got, expected);
                }
            }
        }

        /// `next_field` walks exactly as `Reader::next` does: same fields, ranges and errors.
        #[test]
        fn next_field_agrees_with_reader(buf in proptest::collection::vec(any::<u8>(), 0..256)) {
            let mut r = Reader::new(&buf);
            let mut p = 0;
            loop {
                let expected = r.next();
                if p >= buf.len() {
                    prop_assert!(matches!(expected, Ok(None)));
                    break;
                }
                let start = p;
                match (expected, next_field(&buf, &mut p)) {
                    (Ok(Some(f)), Ok((number, wire_type, value))) => {
                        prop_assert_eq!(f.number, number);
                        prop_assert_eq!(f.value.wire_type(), wire_type);
                        prop_assert_eq!((f.start, f.end), (start, p));
                        if let Value::Bytes(b) = f.value {
                            prop_assert_eq!(b, &buf[value]);
                        }
                    }
                    (Err(a), Err(b)) => {
                        prop_assert_eq!(a, b);
                        break;
                    }
                    (a, b) => prop_assert!(false, "reader {:?}, next_field {:?}", a, b),
                }
            }
        }
    }
}
