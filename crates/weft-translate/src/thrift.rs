//! Thrift's binary and compact protocols, read in place: strings and binaries borrow from the
//! payload. Every length is checked against what is left, container sizes are bounded by the
//! bytes left (an element takes at least one byte), and nesting is bounded, so no input makes
//! the reader allocate without limit, recurse without limit or panic.

use crate::TranslateError;

/// Field and element types, numbered as the binary protocol numbers them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Type {
    Bool,
    Byte,
    Double,
    I16,
    I32,
    I64,
    Binary,
    Struct,
    Map,
    Set,
    List,
}

impl Type {
    fn from_binary(b: u8) -> Option<Type> {
        Some(match b {
            2 => Type::Bool,
            3 => Type::Byte,
            4 => Type::Double,
            6 => Type::I16,
            8 => Type::I32,
            10 => Type::I64,
            11 => Type::Binary,
            12 => Type::Struct,
            13 => Type::Map,
            14 => Type::Set,
            15 => Type::List,
            _ => return None,
        })
    }

    fn from_compact(b: u8) -> Option<Type> {
        Some(match b {
            1 | 2 => Type::Bool,
            3 => Type::Byte,
            4 => Type::I16,
            5 => Type::I32,
            6 => Type::I64,
            7 => Type::Double,
            8 => Type::Binary,
            9 => Type::List,
            10 => Type::Set,
            11 => Type::Map,
            12 => Type::Struct,
            _ => return None,
        })
    }
}

/// Which Thrift protocol a payload uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Protocol {
    Binary,
    Compact,
}

/// Deepest nesting of structs and containers accepted.
const MAX_DEPTH: usize = 64;

/// A reader over one payload.
pub struct Reader<'a> {
    buf: &'a [u8],
    pos: usize,
    proto: Protocol,
    /// Compact: the last field ID of each open struct (field IDs are deltas).
    last_ids: Vec<i16>,
    /// Compact: a bool field's value travels in its header.
    pending_bool: Option<bool>,
    depth: usize,
}

fn err(msg: impl Into<String>) -> TranslateError {
    TranslateError::new(msg)
}

impl<'a> Reader<'a> {
    pub fn new(buf: &'a [u8], proto: Protocol) -> Self {
        Reader {
            buf,
            pos: 0,
            proto,
            last_ids: Vec::new(),
            pending_bool: None,
            depth: 0,
        }
    }

    /// Bytes not read yet.
    pub fn remaining(&self) -> usize {
        self.buf.len() - self.pos
    }

    pub fn position(&self) -> usize {
        self.pos
    }

    /// Goes back to `pos`, a [`Self::position`] of this reader taken outside any struct or
    /// container opened since (an in-order read that found the payload out of order).
    pub fn rewind(&mut self, pos: usize) {
        self.pos = pos;
        self.pending_bool = None;
    }

    /// Binary protocol: consumes a struct's stop byte when it is next; `false`, with nothing
    /// read, otherwise and in the compact protocol.
    #[inline]
    pub fn binary_stop_is_next(&mut self) -> bool {
        if self.proto == Protocol::Binary && self.buf.get(self.pos) == Some(&0) {
            self.pos += 1;
            return true;
        }
        false
    }

    /// Binary protocol: consumes the header of field `id` with type byte `ty` when it is next,
    /// as serializers write fields, in ID order. `false`, with nothing read, otherwise and in
    /// the compact protocol.
    #[inline]
    pub fn binary_field_is(&mut self, ty: u8, id: i16) -> bool {
        let [hi, lo] = id.to_be_bytes();
        if self.proto == Protocol::Binary && self.buf.get(self.pos..self.pos + 3) == Some(&[ty, hi, lo][..]) {
            self.pos += 3;
            return true;
        }
        false
    }

    #[inline]
    fn take(&mut self, n: usize) -> Result<&'a [u8], TranslateError> {
        if n > self.remaining() {
            return Err(self.short(n));
        }
        let s = &self.buf[self.pos..self.pos + n];
        self.pos += n;
        Ok(s)
    }

    /// The error of a read past the end, out of the hot path.
    #[cold]
    #[inline(never)]
    fn short(&self, n: usize) -> TranslateError {
        err(format!(
            "thrift: {n} bytes needed at offset {} but only {} left",
            self.pos,
            self.remaining()
        ))
    }

    fn byte(&mut self) -> Result<u8, TranslateError> {
        Ok(self.take(1)?[0])
    }

    fn varint(&mut self) -> Result<u64, TranslateError> {
        let mut v = 0u64;
        for shift in (0..70).step_by(7) {
            let b = self.byte()?;
            if shift == 63 && b > 1 {
                return Err(err(format!("thrift: varint too long at offset {}", self.pos)));
            }
            v |= u64::from(b & 0x7f) << shift;
            if b < 0x80 {
                return Ok(v);
            }
        }
        Err(err(format!("thrift: varint too long at offset {}", self.pos)))
    }

    fn zigzag(&mut self) -> Result<i64, TranslateError> {
        let v = self.varint()?;
        Ok((v >> 1) as i64 ^ -((v & 1) as i64))
    }

    fn enter(&mut self) -> Result<(), TranslateError> {
        self.depth += 1;
        if self.depth > MAX_DEPTH {
            return Err(err(format!("thrift: nesting deeper than {MAX_DEPTH}")));
        }
        Ok(())
    }

    pub fn struct_begin(&mut self) -> Result<(), TranslateError> {
        self.enter()?;
        if self.proto == Protocol::Compact {
            self.last_ids.push(0);
        }
        Ok(())
    }

    pub fn struct_end(&mut self) {
        self.depth = self.depth.saturating_sub(1);
        if self.proto == Protocol::Compact {
            self.last_ids.pop();
        }
    }

    /// The next field's type and ID, or `None` at the struct's end.
    #[inline]
    pub fn field(&mut self) -> Result<Option<(Type, i16)>, TranslateError> {
        // The binary protocol's header (type byte, 2-byte ID), read inline: this runs for
        // every field of every span and tag, and the call and the protocol switch of the
        // general path were a quarter of the Jaeger conversion.
        if self.proto == Protocol::Binary {
            if self.buf.get(self.pos) == Some(&0) {
                self.pos += 1;
                return Ok(None);
            }
            if let Some(&[t, hi, lo]) = self.buf.get(self.pos..self.pos + 3)
                && let Some(ty) = Type::from_binary(t)
            {
                self.pos += 3;
                return Ok(Some((ty, i16::from_be_bytes([hi, lo]))));
            }
        }
        self.field_general()
    }

    #[inline(never)]
    fn field_general(&mut self) -> Result<Option<(Type, i16)>, TranslateError> {
        let at = self.pos;
        match self.proto {
            Protocol::Binary => {
                let t = self.byte()?;
                if t == 0 {
                    return Ok(None);
                }
                let ty = Type::from_binary(t)
                    .ok_or_else(|| err(format!("thrift: unknown field type {t} at offset {at}")))?;
                let id = i16::from_be_bytes(self.take(2)?.try_into().expect("2 bytes"));
                Ok(Some((ty, id)))
            }
            Protocol::Compact => {
                let b = self.byte()?;
                if b == 0 {
                    return Ok(None);
                }
                let t = b & 0x0f;
                let ty = Type::from_compact(t)
                    .ok_or_else(|| err(format!("thrift: unknown field type {t} at offset {at}")))?;
                let delta = (b >> 4) as i16;
                let last = self.last_ids.last().copied().unwrap_or(0);
                let id = if delta == 0 {
                    let v = self.zigzag()?;
                    i16::try_from(v).map_err(|_| err(format!("thrift: field id {v} out of range at offset {at}")))?
                } else {
                    last.wrapping_add(delta)
                };
                if let Some(l) = self.last_ids.last_mut() {
                    *l = id;
                }
                if ty == Type::Bool {
                    self.pending_bool = Some(t == 1);
                }
                Ok(Some((ty, id)))
            }
        }
    }

    pub fn bool(&mut self) -> Result<bool, TranslateError> {
        if let Some(b) = self.pending_bool.take() {
            return Ok(b);
        }
        Ok(self.byte()? == 1)
    }

    pub fn i8(&mut self) -> Result<i8, TranslateError> {
        Ok(self.byte()? as i8)
    }

    pub fn i16(&mut self) -> Result<i16, TranslateError> {
        match self.proto {
            Protocol::Binary => Ok(i16::from_be_bytes(self.take(2)?.try_into().expect("2 bytes"))),
            Protocol::Compact => Ok(self.zigzag()? as i16),
        }
    }

    pub fn i32(&mut self) -> Result<i32, TranslateError> {
        match self.proto {
            Protocol::Binary => Ok(i32::from_be_bytes(self.take(4)?.try_into().expect("4 bytes"))),
            Protocol::Compact => Ok(self.zigzag()? as i32),
        }
    }

    pub fn i64(&mut self) -> Result<i64, TranslateError> {
        match self.proto {
            Protocol::Binary => Ok(i64::from_be_bytes(self.take(8)?.try_into().expect("8 bytes"))),
            Protocol::Compact => self.zigzag(),
        }
    }

    pub fn double(&mut self) -> Result<f64, TranslateError> {
        let b: [u8; 8] = self.take(8)?.try_into().expect("8 bytes");
        Ok(match self.proto {
            Protocol::Binary => f64::from_be_bytes(b),
            Protocol::Compact => f64::from_le_bytes(b),
        })
    }

    pub fn binary(&mut self) -> Result<&'a [u8], TranslateError> {
        let at = self.pos;
        let len = match self.proto {
            Protocol::Binary => {
                let n = i32::from_be_bytes(self.take(4)?.try_into().expect("4 bytes"));
                usize::try_from(n).map_err(|_| err(format!("thrift: negative length {n} at offset {at}")))?
            }
            Protocol::Compact => self.varint()? as usize,
        };
        self.take(len)
    }

    /// A string: binary that must be UTF-8.
    pub fn string(&mut self) -> Result<&'a str, TranslateError> {
        let at = self.pos;
        let b = self.binary()?;
        if b.is_ascii() {
            // Nearly every string here (tag keys and values, names) is short and ASCII, and
            // `from_utf8`'s general check was 15 % of converting a Jaeger batch.
            // SAFETY: bytes below 0x80 are each a one-byte UTF-8 character.
            #[allow(unsafe_code)]
            return Ok(unsafe { std::str::from_utf8_unchecked(b) });
        }
        std::str::from_utf8(b).map_err(|_| err(format!("thrift: string at offset {at} is not UTF-8")))
    }

    /// A list or set header: element type and count.
    pub fn list_begin(&mut self) -> Result<(Type, usize), TranslateError> {
        let at = self.pos;
        let (ty, n) = match self.proto {
            Protocol::Binary => {
                let t = self.byte()?;
                let ty = Type::from_binary(t)
                    .ok_or_else(|| err(format!("thrift: unknown element type {t} at offset {at}")))?;
                let n = i32::from_be_bytes(self.take(4)?.try_into().expect("4 bytes"));
                let n =
                    usize::try_from(n).map_err(|_| err(format!("thrift: negative list size {n} at offset {at}")))?;
                (ty, n)
            }
            Protocol::Compact => {
                let b = self.byte()?;
                let ty = Type::from_compact(b & 0x0f)
                    .ok_or_else(|| err(format!("thrift: unknown element type {} at offset {at}", b & 0x0f)))?;
                let n = if b >> 4 == 15 {
                    self.varint()? as usize
                } else {
                    (b >> 4) as usize
                };
                (ty, n)
            }
        };
        if n > self.remaining() {
            return Err(err(format!(
                "thrift: list of {n} elements at offset {at} is longer than the {} bytes left",
                self.remaining()
            )));
        }
        self.enter()?;
        Ok((ty, n))
    }

    pub fn list_end(&mut self) {
        self.depth = self.depth.saturating_sub(1);
    }

    /// A map header: key type, value type and count.
    pub fn map_begin(&mut self) -> Result<(Type, Type, usize), TranslateError> {
        let at = self.pos;
        let (k, v, n) = match self.proto {
            Protocol::Binary => {
                let (k, v) = (self.byte()?, self.byte()?);
                let n = i32::from_be_bytes(self.take(4)?.try_into().expect("4 bytes"));
                let n = usize::try_from(n).map_err(|_| err(format!("thrift: negative map size {n} at offset {at}")))?;
                let k =
                    Type::from_binary(k).ok_or_else(|| err(format!("thrift: unknown key type {k} at offset {at}")))?;
                let v = Type::from_binary(v)
                    .ok_or_else(|| err(format!("thrift: unknown value type {v} at offset {at}")))?;
                (k, v, n)
            }
            Protocol::Compact => {
                let n = self.varint()? as usize;
                if n == 0 {
                    (Type::Byte, Type::Byte, 0)
                } else {
                    let b = self.byte()?;
                    let k = Type::from_compact(b >> 4)
                        .ok_or_else(|| err(format!("thrift: unknown key type at offset {at}")))?;
                    let v = Type::from_compact(b & 0x0f)
                        .ok_or_else(|| err(format!("thrift: unknown value type at offset {at}")))?;
                    (k, v, n)
                }
            }
        };
        if n > self.remaining() {
            return Err(err(format!(
                "thrift: map of {n} entries at offset {at} is longer than the bytes left"
            )));
        }
        self.enter()?;
        Ok((k, v, n))
    }

    /// Skips a value of type `ty`.
    pub fn skip(&mut self, ty: Type) -> Result<(), TranslateError> {
        match ty {
            Type::Bool => {
                self.bool()?;
            }
            Type::Byte => {
                self.byte()?;
            }
            Type::I16 => {
                self.i16()?;
            }
            Type::I32 => {
                self.i32()?;
            }
            Type::I64 => {
                self.i64()?;
            }
            Type::Double => {
                self.double()?;
            }
            Type::Binary => {
                self.binary()?;
            }
            Type::Struct => {
                self.struct_begin()?;
                while let Some((t, _)) = self.field()? {
                    self.skip(t)?;
                }
                self.struct_end();
            }
            Type::List | Type::Set => {
                let (t, n) = self.list_begin()?;
                for _ in 0..n {
                    self.skip_element(t)?;
                }
                self.list_end();
            }
            Type::Map => {
                let (k, v, n) = self.map_begin()?;
                for _ in 0..n {
                    self.skip_element(k)?;
                    self.skip_element(v)?;
                }
                self.list_end();
            }
        }
        Ok(())
    }

    /// Skips a container element (a compact bool element is one byte, not a header value).
    fn skip_element(&mut self, ty: Type) -> Result<(), TranslateError> {
        if ty == Type::Bool {
            self.byte()?;
            return Ok(());
        }
        self.skip(ty)
    }

    /// A bool inside a list, set or map.
    pub fn bool_element(&mut self) -> Result<bool, TranslateError> {
        Ok(self.byte()? == 1)
    }

    /// A message header (`name`, message type, sequence ID), as the Jaeger agent's UDP ports
    /// receive them. Binary: strict (versioned) or old-style; compact: protocol ID 0x82.
    pub fn message_begin(&mut self) -> Result<(&'a str, u8, i32), TranslateError> {
        match self.proto {
            Protocol::Binary => {
                let first = i32::from_be_bytes(self.take(4)?.try_into().expect("4 bytes"));
                if first < 0 {
                    if (first as u32) & 0xffff_0000 != 0x8001_0000 {
                        return Err(err(format!("thrift: bad binary message version {:#x}", first as u32)));
                    }
                    let ty = (first & 0xff) as u8;
                    let name = self.string()?;
                    let seq = self.i32()?;
                    Ok((name, ty, seq))
                } else {
                    let name = std::str::from_utf8(self.take(first as usize)?)
                        .map_err(|_| err("thrift: message name is not UTF-8"))?;
                    let ty = self.byte()?;
                    let seq = self.i32()?;
                    Ok((name, ty, seq))
                }
            }
            Protocol::Compact => {
                let id = self.byte()?;
                if id != 0x82 {
                    return Err(err(format!("thrift: bad compact protocol id {id:#x}")));
                }
                let vt = self.byte()?;
                if vt & 0x1f != 1 {
                    return Err(err(format!("thrift: bad compact protocol version {}", vt & 0x1f)));
                }
                let seq = self.varint()? as i32;
                let name = self.string()?;
                Ok((name, vt >> 5, seq))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn compact_field_deltas_and_bools() {
        // struct { 1: bool true, 2: i32 -3, 5: string "hi", 20: i64 7 }
        let buf = [0x11, 0x15, 0x05, 0x38, 0x02, b'h', b'i', 0x06, 0x28, 0x0e, 0x00];
        let mut r = Reader::new(&buf, Protocol::Compact);
        r.struct_begin().unwrap();
        assert_eq!(r.field().unwrap(), Some((Type::Bool, 1)));
        assert!(r.bool().unwrap());
        assert_eq!(r.field().unwrap(), Some((Type::I32, 2)));
        assert_eq!(r.i32().unwrap(), -3);
        assert_eq!(r.field().unwrap(), Some((Type::Binary, 5)));
        assert_eq!(r.string().unwrap(), "hi");
        assert_eq!(r.field().unwrap(), Some((Type::I64, 20)));
        assert_eq!(r.i64().unwrap(), 7);
        assert_eq!(r.field().unwrap(), None);
    }

    /// Strings: ASCII (the fast path), other UTF-8, and bytes that are not UTF-8 (refused),
    /// in both protocols.
    #[test]
    fn strings_must_be_utf8() {
        for (bytes, ok) in [
            (&b"http.method"[..], true),
            ("clé ✓".as_bytes(), true),
            (&b"ab\xffc"[..], false),
            (&b"\xc3"[..], false),
        ] {
            let mut binary = (bytes.len() as i32).to_be_bytes().to_vec();
            binary.extend_from_slice(bytes);
            let mut compact = vec![bytes.len() as u8];
            compact.extend_from_slice(bytes);
            for (buf, proto) in [(binary, Protocol::Binary), (compact, Protocol::Compact)] {
                let got = Reader::new(&buf, proto).string();
                match got {
                    Ok(s) => assert!(ok && s.as_bytes() == bytes, "{bytes:?}"),
                    Err(e) => assert!(!ok && e.to_string().contains("not UTF-8"), "{bytes:?}: {e}"),
                }
            }
        }
    }

    #[test]
    fn binary_lists_bounded_by_input() {
        // list<struct> of 2^31-1 elements in 5 bytes
        let buf = [12, 0x7f, 0xff, 0xff, 0xff];
        let mut r = Reader::new(&buf, Protocol::Binary);
        assert!(r.list_begin().is_err());
    }

    proptest! {
        #[test]
        fn skipping_any_input_never_panics(data in proptest::collection::vec(any::<u8>(), 0..256), compact in any::<bool>()) {
            let proto = if compact { Protocol::Compact } else { Protocol::Binary };
            let mut r = Reader::new(&data, proto);
            let _ = r.skip(Type::Struct);
            let mut r = Reader::new(&data, proto);
            let _ = r.message_begin();
        }
    }
}
