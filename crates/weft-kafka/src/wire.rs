//! Kafka's primitive types (big-endian integers, length-prefixed strings and arrays, zig-zag
//! varints), written into a `Vec<u8>` and read from a byte slice.
//!
//! Only the non-flexible ("classic") encodings are here: every request this crate sends uses a
//! version from before tagged fields, which every broker from 2.1 to 4.x accepts.

use crate::Error;

/// Appends Kafka primitives to a buffer.
pub(crate) trait Put {
    fn i8(&mut self, v: i8);
    fn i16(&mut self, v: i16);
    fn i32(&mut self, v: i32);
    fn i64(&mut self, v: i64);
    fn string(&mut self, s: &str);
    fn nullable_string(&mut self, s: Option<&str>);
    fn varint(&mut self, v: i64);
    fn varbytes(&mut self, b: Option<&[u8]>);
}

impl Put for Vec<u8> {
    fn i8(&mut self, v: i8) {
        self.push(v as u8);
    }
    fn i16(&mut self, v: i16) {
        self.extend_from_slice(&v.to_be_bytes());
    }
    fn i32(&mut self, v: i32) {
        self.extend_from_slice(&v.to_be_bytes());
    }
    fn i64(&mut self, v: i64) {
        self.extend_from_slice(&v.to_be_bytes());
    }
    fn string(&mut self, s: &str) {
        self.i16(s.len() as i16);
        self.extend_from_slice(s.as_bytes());
    }
    fn nullable_string(&mut self, s: Option<&str>) {
        match s {
            Some(s) => self.string(s),
            None => self.i16(-1),
        }
    }
    /// Zig-zag varint, as record fields use.
    fn varint(&mut self, v: i64) {
        let mut z = ((v << 1) ^ (v >> 63)) as u64;
        while z >= 0x80 {
            self.push((z as u8) | 0x80);
            z >>= 7;
        }
        self.push(z as u8);
    }
    fn varbytes(&mut self, b: Option<&[u8]>) {
        match b {
            Some(b) => {
                self.varint(b.len() as i64);
                self.extend_from_slice(b);
            }
            None => self.varint(-1),
        }
    }
}

/// Reads Kafka primitives from a slice; every read checks the length left.
pub(crate) struct Get<'a> {
    pub buf: &'a [u8],
    pub pos: usize,
}

impl<'a> Get<'a> {
    pub fn new(buf: &'a [u8]) -> Self {
        Get { buf, pos: 0 }
    }

    pub fn remaining(&self) -> usize {
        self.buf.len() - self.pos
    }

    pub fn bytes(&mut self, n: usize) -> Result<&'a [u8], Error> {
        if self.remaining() < n {
            return Err(Error::Protocol(format!(
                "response ends early: wanted {n} bytes at offset {}, {} left",
                self.pos,
                self.remaining()
            )));
        }
        let out = &self.buf[self.pos..self.pos + n];
        self.pos += n;
        Ok(out)
    }

    pub fn i8(&mut self) -> Result<i8, Error> {
        Ok(self.bytes(1)?[0] as i8)
    }
    pub fn i16(&mut self) -> Result<i16, Error> {
        Ok(i16::from_be_bytes(self.bytes(2)?.try_into().unwrap()))
    }
    pub fn i32(&mut self) -> Result<i32, Error> {
        Ok(i32::from_be_bytes(self.bytes(4)?.try_into().unwrap()))
    }
    pub fn u32(&mut self) -> Result<u32, Error> {
        Ok(u32::from_be_bytes(self.bytes(4)?.try_into().unwrap()))
    }
    pub fn i64(&mut self) -> Result<i64, Error> {
        Ok(i64::from_be_bytes(self.bytes(8)?.try_into().unwrap()))
    }
    pub fn bool(&mut self) -> Result<bool, Error> {
        Ok(self.i8()? != 0)
    }
    pub fn nullable_string(&mut self) -> Result<Option<&'a str>, Error> {
        let n = self.i16()?;
        if n < 0 {
            return Ok(None);
        }
        let b = self.bytes(n as usize)?;
        std::str::from_utf8(b)
            .map(Some)
            .map_err(|_| Error::Protocol("a string in the response is not UTF-8".into()))
    }
    pub fn string(&mut self) -> Result<&'a str, Error> {
        Ok(self.nullable_string()?.unwrap_or(""))
    }
    /// An array length; -1 (null) reads as 0. Refuses lengths the bytes left cannot hold.
    pub fn array_len(&mut self, min_item_bytes: usize) -> Result<usize, Error> {
        let n = self.i32()?;
        if n < 0 {
            return Ok(0);
        }
        let n = n as usize;
        if n * min_item_bytes.max(1) > self.remaining() {
            return Err(Error::Protocol(format!(
                "array of {n} items does not fit in the {} bytes left",
                self.remaining()
            )));
        }
        Ok(n)
    }
    pub fn varint(&mut self) -> Result<i64, Error> {
        let mut z: u64 = 0;
        for shift in (0..64).step_by(7) {
            let b = self.bytes(1)?[0];
            z |= u64::from(b & 0x7f) << shift;
            if b < 0x80 {
                return Ok(((z >> 1) as i64) ^ -((z & 1) as i64));
            }
        }
        Err(Error::Protocol("varint longer than 10 bytes".into()))
    }
    /// Varint-length bytes; None when the length is -1.
    pub fn varbytes(&mut self) -> Result<Option<&'a [u8]>, Error> {
        let n = self.varint()?;
        if n < 0 {
            return Ok(None);
        }
        self.bytes(n as usize).map(Some)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn varints_round_trip_with_zigzag() {
        for v in [0i64, 1, -1, 63, -64, 64, 300, -300, i32::MAX as i64, i64::MIN, i64::MAX] {
            let mut b = Vec::new();
            b.varint(v);
            let mut g = Get::new(&b);
            assert_eq!(g.varint().unwrap(), v);
            assert_eq!(g.remaining(), 0);
        }
        // Kafka's own examples: 0 → 00, -1 → 01, 1 → 02, 150 → ac 02.
        let mut b = Vec::new();
        b.varint(150);
        assert_eq!(b, [0xac, 0x02]);
    }

    #[test]
    fn short_input_is_an_error_not_a_panic() {
        let mut g = Get::new(&[0, 0, 0]);
        assert!(g.i32().is_err());
        let mut g = Get::new(&[0x7f, 0xff, 0xff, 0xff]);
        assert!(g.array_len(1).is_err());
        let mut g = Get::new(&[0xff; 11]);
        assert!(g.varint().is_err());
    }
}
