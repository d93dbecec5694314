//! A JSON scanner for the receivers' hot paths (Zipkin v2 JSON, X-Ray segment documents): it
//! matches keys as packed integers, borrows every string without escapes from the payload, and
//! builds no intermediate value. Each format reads its own shape with it and keeps a
//! serde_json reader as the reference its tests compare with.

use std::borrow::Cow;

use crate::TranslateError;

/// How deep a skipped value may nest.
const MAX_DEPTH: usize = 64;

/// A key of at most 15 bytes as one integer (its bytes, then its length in the top byte), so
/// that matching a key against a dozen field names is integer comparisons, not a `memcmp`
/// per candidate (that was 14% of the conversion's time). Longer keys map to 0, which no
/// field name packs to.
pub(crate) const fn pack(k: &[u8]) -> u128 {
    if k.len() > 15 {
        return 0;
    }
    let mut v = (k.len() as u128) << 120;
    let mut i = 0;
    while i < k.len() {
        v |= (k[i] as u128) << (8 * i);
        i += 1;
    }
    v
}

pub(crate) struct Scanner<'a> {
    /// The whole payload, validated as UTF-8 once: every string between quotes is then valid
    /// too (a quote is ASCII, so never inside a multi-byte character) and is sliced out of it.
    text: &'a str,
    pub(crate) b: &'a [u8],
    pub(crate) i: usize,
    /// Where the last key read by [`Self::object`] is in the payload (between its quotes,
    /// escapes as sent), for [`Self::last_key`].
    key_at: (usize, usize),
    /// What the payload is, for errors: "malformed {what}: {problem} at byte {i}".
    what: &'static str,
}

/// The bytes of `w` that are `b`, as their high bits; exact up to and including the lowest one
/// (the classic has-zero-byte test on `w ^ b*0x01..`; borrows can only add bits above it).
#[inline]
fn byte_mask(w: u64, b: u8) -> u64 {
    let x = w ^ (u64::from(b) * 0x0101_0101_0101_0101);
    x.wrapping_sub(0x0101_0101_0101_0101) & !x & 0x8080_8080_8080_8080
}

/// The bytes of `w` below 0x20 (control characters), exact up to the lowest one as above.
#[inline]
fn control_mask(w: u64) -> u64 {
    w.wrapping_sub(0x2020_2020_2020_2020) & !w & 0x8080_8080_8080_8080
}

/// The bytes of `chunk` that end a plain string (a quote, a backslash or a control
/// character), one bit each, lowest byte lowest. Exact up to the lowest set bit, which is all
/// the callers read (`trailing_zeros`, 32 when none).
#[inline]
fn special16(chunk: &[u8; 16]) -> u32 {
    #[cfg(target_arch = "x86_64")]
    return special16_sse2(chunk);
    #[cfg(not(target_arch = "x86_64"))]
    special16_swar(chunk)
}

/// SSE2's byte compares and `movemask` do in a few instructions what the 8-byte masks do in
/// two dozen, on every key and string of a payload (the conversion 9 % faster on Brave-like
/// Zipkin JSON).
#[cfg(target_arch = "x86_64")]
#[inline]
fn special16_sse2(chunk: &[u8; 16]) -> u32 {
    #[allow(unsafe_code)]
    // SAFETY: SSE2 is part of the x86_64 baseline, so the intrinsics exist on every x86_64 CPU;
    // the one load reads the 16 bytes of the array it is given.
    unsafe {
        use std::arch::x86_64::*;
        let v = _mm_loadu_si128(chunk.as_ptr().cast());
        let q = _mm_cmpeq_epi8(v, _mm_set1_epi8(b'"' as i8));
        let bs = _mm_cmpeq_epi8(v, _mm_set1_epi8(b'\\' as i8));
        // Unsigned v < 0x20 exactly when max(v, 0x1f) == 0x1f.
        let ctl = _mm_cmpeq_epi8(_mm_max_epu8(v, _mm_set1_epi8(0x1f)), _mm_set1_epi8(0x1f));
        _mm_movemask_epi8(_mm_or_si128(_mm_or_si128(q, bs), ctl)) as u32
    }
}

/// The same from two 8-byte masks, where SSE2 is not: only the lowest flagged byte's bit.
#[cfg_attr(target_arch = "x86_64", allow(dead_code))]
#[inline]
fn special16_swar(chunk: &[u8; 16]) -> u32 {
    let special = |w: u64| byte_mask(w, b'"') | byte_mask(w, b'\\') | control_mask(w);
    let lo = special(u64::from_le_bytes(chunk[..8].try_into().expect("8 bytes")));
    let hi = special(u64::from_le_bytes(chunk[8..].try_into().expect("8 bytes")));
    if lo != 0 {
        1 << (lo.trailing_zeros() / 8)
    } else if hi != 0 {
        1 << (8 + hi.trailing_zeros() / 8)
    } else {
        0
    }
}

impl<'a> Scanner<'a> {
    /// A scanner of `body`, which must be UTF-8; `what` names the payload in errors.
    pub(crate) fn new(body: &'a [u8], what: &'static str) -> Result<Self, TranslateError> {
        let text = std::str::from_utf8(body)
            .map_err(|e| TranslateError::new(format!("malformed {what}: not UTF-8 at byte {}", e.valid_up_to())))?;
        Ok(Scanner {
            text,
            b: body,
            i: 0,
            key_at: (0, 0),
            what,
        })
    }

    /// An error naming the payload, the problem and where it is.
    pub(crate) fn malformed(&self, problem: impl std::fmt::Display, at: usize) -> TranslateError {
        TranslateError::new(format!("malformed {}: {problem} at byte {at}", self.what))
    }

    /// Refuses anything but whitespace after the payload.
    pub(crate) fn end(&mut self) -> Result<(), TranslateError> {
        if self.peek().is_some() {
            return Err(self.malformed("trailing characters", self.i));
        }
        Ok(())
    }

    #[inline]
    pub(crate) fn ws(&mut self) {
        while let Some(&c) = self.b.get(self.i) {
            if matches!(c, b' ' | b'\n' | b'\r' | b'\t') {
                self.i += 1;
            } else {
                break;
            }
        }
    }

    #[inline]
    pub(crate) fn peek(&mut self) -> Option<u8> {
        self.ws();
        self.b.get(self.i).copied()
    }

    #[inline]
    pub(crate) fn eat(&mut self, c: u8) -> bool {
        if self.peek() == Some(c) {
            self.i += 1;
            true
        } else {
            false
        }
    }

    #[inline]
    pub(crate) fn expect(&mut self, c: u8) -> Result<(), TranslateError> {
        if self.eat(c) { Ok(()) } else { Err(self.expected(c)) }
    }

    /// The error of [`Self::expect`], kept out of line: `expect` runs between every key and
    /// value of a payload, and inlined it is a compare and a branch.
    #[cold]
    #[inline(never)]
    fn expected(&self, c: u8) -> TranslateError {
        self.malformed(format!("expected '{}'", c as char), self.i)
    }

    pub(crate) fn literal(&mut self, word: &[u8]) -> Result<(), TranslateError> {
        if self.b[self.i..].starts_with(word) {
            self.i += word.len();
            Ok(())
        } else {
            Err(self.malformed("invalid literal", self.i))
        }
    }

    /// `null` (consumed) or not.
    #[inline(always)]
    pub(crate) fn null(&mut self) -> Result<bool, TranslateError> {
        if self.peek() == Some(b'n') {
            self.literal(b"null")?;
            return Ok(true);
        }
        Ok(false)
    }

    /// A string; borrowed unless it has escapes. The plain-string path is inlined into every
    /// caller and the rest is out of line (3 % of the Zipkin conversion's time).
    #[inline(always)]
    pub(crate) fn string(&mut self) -> Result<Cow<'a, str>, TranslateError> {
        if !self.eat(b'"') {
            return Err(self.malformed("expected a string", self.i));
        }
        let start = self.i;
        // Sixteen bytes at a time: the lowest flagged byte is the first quote, backslash or
        // control character, found without a byte loop. Most strings (keys, names, IDs) are
        // plain ASCII and end at their first quote.
        while let Some(chunk) = self.b.get(self.i..self.i + 16) {
            let m = special16(chunk.try_into().expect("16 bytes"));
            if m == 0 {
                self.i += 16;
                continue;
            }
            self.i += m.trailing_zeros() as usize;
            if self.b[self.i] == b'"' {
                let s = &self.text[start..self.i];
                self.i += 1;
                return Ok(Cow::Borrowed(s));
            }
            break;
        }
        self.string_rest(start)
    }

    /// The rest of a string from where [`Self::string`] stopped: its last 15 bytes of
    /// payload, or a backslash or control character.
    #[inline(never)]
    fn string_rest(&mut self, start: usize) -> Result<Cow<'a, str>, TranslateError> {
        while let Some(&c) = self.b.get(self.i) {
            match c {
                b'"' => {
                    let s = &self.text[start..self.i];
                    self.i += 1;
                    return Ok(Cow::Borrowed(s));
                }
                b'\\' => return self.string_escaped(start).map(Cow::Owned),
                0..=0x1f => return Err(self.malformed("control character in a string", self.i)),
                _ => self.i += 1,
            }
        }
        Err(self.malformed("unterminated string", start))
    }

    fn string_escaped(&mut self, start: usize) -> Result<String, TranslateError> {
        let mut out: Vec<u8> = self.b[start..self.i].to_vec();
        loop {
            let Some(&c) = self.b.get(self.i) else {
                return Err(self.malformed("unterminated string", start));
            };
            self.i += 1;
            match c {
                b'"' => break,
                b'\\' => {
                    let Some(&e) = self.b.get(self.i) else {
                        return Err(self.malformed("unterminated escape", self.i));
                    };
                    self.i += 1;
                    match e {
                        b'"' | b'\\' | b'/' => out.push(e),
                        b'b' => out.push(8),
                        b'f' => out.push(12),
                        b'n' => out.push(b'\n'),
                        b'r' => out.push(b'\r'),
                        b't' => out.push(b'\t'),
                        b'u' => {
                            let mut cp = self.hex4()?;
                            if (0xd800..0xdc00).contains(&cp) {
                                // A high surrogate must be followed by a low one.
                                if self.b.get(self.i) != Some(&b'\\') || self.b.get(self.i + 1) != Some(&b'u') {
                                    return Err(self.malformed("lone surrogate in a string", self.i));
                                }
                                self.i += 2;
                                let lo = self.hex4()?;
                                if !(0xdc00..0xe000).contains(&lo) {
                                    return Err(self.malformed("invalid surrogate pair", self.i));
                                }
                                cp = 0x10000 + ((cp - 0xd800) << 10) + (lo - 0xdc00);
                            } else if (0xdc00..0xe000).contains(&cp) {
                                return Err(self.malformed("lone surrogate in a string", self.i));
                            }
                            let ch = char::from_u32(cp).ok_or_else(|| self.malformed("invalid \\u escape", self.i))?;
                            let mut buf = [0u8; 4];
                            out.extend_from_slice(ch.encode_utf8(&mut buf).as_bytes());
                        }
                        _ => return Err(self.malformed("invalid escape", self.i - 1)),
                    }
                }
                0..=0x1f => return Err(self.malformed("control character in a string", self.i - 1)),
                c => out.push(c),
            }
        }
        String::from_utf8(out).map_err(|_| self.malformed("string is not UTF-8", start))
    }

    fn hex4(&mut self) -> Result<u32, TranslateError> {
        let Some(h) = self.b.get(self.i..self.i + 4) else {
            return Err(self.malformed("short \\u escape", self.i));
        };
        let mut v = 0u32;
        for &c in h {
            let d = (c as char)
                .to_digit(16)
                .ok_or_else(|| self.malformed("invalid \\u escape", self.i))?;
            v = v * 16 + d;
        }
        self.i += 4;
        Ok(v)
    }

    /// The text of a JSON number (validated), for tag values.
    pub(crate) fn number_text(&mut self) -> Result<&'a str, TranslateError> {
        self.ws();
        let start = self.i;
        let b = self.b;
        let mut j = self.i;
        if b.get(j) == Some(&b'-') {
            j += 1;
        }
        let int_start = j;
        while b.get(j).is_some_and(u8::is_ascii_digit) {
            j += 1;
        }
        if j == int_start || (b[int_start] == b'0' && j - int_start > 1) {
            return Err(self.malformed("invalid number", start));
        }
        if b.get(j) == Some(&b'.') {
            j += 1;
            let f = j;
            while b.get(j).is_some_and(u8::is_ascii_digit) {
                j += 1;
            }
            if j == f {
                return Err(self.malformed("invalid number", start));
            }
        }
        if matches!(b.get(j), Some(b'e' | b'E')) {
            j += 1;
            if matches!(b.get(j), Some(b'+' | b'-')) {
                j += 1;
            }
            let e = j;
            while b.get(j).is_some_and(u8::is_ascii_digit) {
                j += 1;
            }
            if j == e {
                return Err(self.malformed("invalid number", start));
            }
        }
        self.i = j;
        Ok(&self.text[start..j])
    }

    /// Microseconds: a non-negative integer, or a float truncated; `null` is 0.
    pub(crate) fn micros(&mut self, what: &str) -> Result<u64, TranslateError> {
        if self.null()? {
            return Ok(0);
        }
        self.ws();
        let at = self.i;
        // A plain integer (every SDK's timestamps and durations) in one pass; anything else
        // (a sign, fraction, exponent, leading zero or overflow) takes the general way.
        let b = self.b;
        let mut j = at;
        let mut v: u64 = 0;
        while let Some(&c) = b.get(j) {
            if !c.is_ascii_digit() {
                break;
            }
            let Some(next) = v.checked_mul(10).and_then(|v| v.checked_add(u64::from(c - b'0'))) else {
                break;
            };
            v = next;
            j += 1;
        }
        let plain_end = !matches!(b.get(j), Some(b'0'..=b'9' | b'.' | b'e' | b'E'));
        if j > at && plain_end && (b[at] != b'0' || j == at + 1) {
            self.i = j;
            return Ok(v);
        }
        let t = self.number_text()?;
        if let Ok(v) = t.parse::<u64>() {
            return Ok(v);
        }
        match t.parse::<f64>() {
            Ok(f) if f.is_finite() && f >= 0.0 && !t.starts_with('-') => Ok(f as u64),
            _ if t.starts_with('-') => Err(self.malformed(format!("negative microseconds in {what}"), at)),
            _ => Err(self.malformed(format!("invalid microseconds in {what}"), at)),
        }
    }

    pub(crate) fn bool(&mut self) -> Result<Option<bool>, TranslateError> {
        match self.peek() {
            Some(b't') => self.literal(b"true").map(|_| Some(true)),
            Some(b'f') => self.literal(b"false").map(|_| Some(false)),
            Some(b'n') => self.literal(b"null").map(|_| None),
            _ => Err(self.malformed("expected a boolean", self.i)),
        }
    }

    /// A string, number or boolean as text; `None` for `null`.
    #[inline]
    pub(crate) fn text(&mut self) -> Result<Option<Cow<'a, str>>, TranslateError> {
        match self.peek() {
            Some(b'"') => self.string().map(Some),
            Some(b't') => self.literal(b"true").map(|_| Some(Cow::Borrowed("true"))),
            Some(b'f') => self.literal(b"false").map(|_| Some(Cow::Borrowed("false"))),
            Some(b'n') => self.literal(b"null").map(|_| None),
            Some(b'-' | b'0'..=b'9') => self.number_text().map(|t| Some(Cow::Borrowed(t))),
            _ => Err(self.malformed("expected a string, number or boolean", self.i)),
        }
    }

    #[inline(always)]
    pub(crate) fn opt_string(&mut self) -> Result<Option<Cow<'a, str>>, TranslateError> {
        if self.null()? {
            Ok(None)
        } else {
            self.string().map(Some)
        }
    }

    /// Any value, checked for syntax and skipped.
    pub(crate) fn skip(&mut self, depth: usize) -> Result<(), TranslateError> {
        self.skip_value(depth, false)
    }

    /// Any value, checked as a reader that keeps it checks it (serde_json building a `Value`):
    /// also every number within the range of a double.
    pub(crate) fn skip_kept(&mut self, depth: usize) -> Result<(), TranslateError> {
        self.skip_value(depth, true)
    }

    fn skip_value(&mut self, depth: usize, kept: bool) -> Result<(), TranslateError> {
        if depth > MAX_DEPTH {
            return Err(self.malformed("nesting too deep", self.i));
        }
        match self.peek() {
            Some(b'"') => self.string().map(|_| ()),
            Some(b'{') => {
                self.i += 1;
                if self.eat(b'}') {
                    return Ok(());
                }
                loop {
                    self.string()?;
                    self.expect(b':')?;
                    self.skip_value(depth + 1, kept)?;
                    if self.eat(b'}') {
                        return Ok(());
                    }
                    self.expect(b',')?;
                }
            }
            Some(b'[') => {
                self.i += 1;
                if self.eat(b']') {
                    return Ok(());
                }
                loop {
                    self.skip_value(depth + 1, kept)?;
                    if self.eat(b']') {
                        return Ok(());
                    }
                    self.expect(b',')?;
                }
            }
            Some(b't') => self.literal(b"true"),
            Some(b'f') => self.literal(b"false"),
            Some(b'n') => self.literal(b"null"),
            Some(b'-' | b'0'..=b'9') if kept => self.f64().map(|_| ()),
            Some(b'-' | b'0'..=b'9') => self.number_text().map(|_| ()),
            _ => Err(self.malformed("expected a value", self.i)),
        }
    }

    /// An object's key, packed (see [`pack`]); its text is then [`Self::last_key`]. A key of at
    /// most 15 plain bytes, the common case, is found and packed from one 16-byte load, without
    /// a byte loop. Only the packed key is returned: returning its text too went through the
    /// stack on every key of a payload, and only tags and a few X-Ray maps read it.
    #[inline(always)]
    fn key(&mut self) -> Result<u128, TranslateError> {
        self.ws();
        if self.b.get(self.i) == Some(&b'"') {
            let start = self.i + 1;
            if let Some(chunk) = self.b.get(start..start + 16) {
                let chunk: [u8; 16] = chunk.try_into().expect("16 bytes");
                let n = special16(&chunk).trailing_zeros().min(16) as usize;
                if n < 16 && chunk[n] == b'"' {
                    // The bytes before the quote, and the length in the top byte: `pack`.
                    let packed = (u128::from_le_bytes(chunk) & ((1u128 << (8 * n)) - 1)) | ((n as u128) << 120);
                    self.i = start + n + 1;
                    self.key_at = (start, start + n);
                    return Ok(packed);
                }
            }
        }
        let start = self.i + 1;
        let k = self.string()?;
        self.key_at = (start, self.i - 1);
        Ok(pack(k.as_bytes()))
    }

    /// The text of the key [`Self::object`] read last: borrowed from the payload unless it has
    /// escapes. Read it before the value, which may hold keys of its own.
    #[inline]
    pub(crate) fn last_key(&self) -> Result<Cow<'a, str>, TranslateError> {
        let (start, end) = self.key_at;
        if !self.b[start..end].contains(&b'\\') {
            return Ok(Cow::Borrowed(&self.text[start..end]));
        }
        // Read again from its opening quote; it was read once, so this cannot fail.
        let mut again = Scanner {
            text: self.text,
            b: self.b,
            i: start - 1,
            key_at: (0, 0),
            what: self.what,
        };
        again.string()
    }

    /// Iterates an object's keys: `f(self, key)` reads each value.
    pub(crate) fn object(
        &mut self,
        mut f: impl FnMut(&mut Self, u128) -> Result<(), TranslateError>,
    ) -> Result<(), TranslateError> {
        self.expect(b'{')?;
        if self.eat(b'}') {
            return Ok(());
        }
        loop {
            let packed = self.key()?;
            self.expect(b':')?;
            f(self, packed)?;
            if self.eat(b'}') {
                return Ok(());
            }
            self.expect(b',')?;
        }
    }

    /// Iterates an array's elements: `f(self)` reads each one.
    pub(crate) fn array(
        &mut self,
        mut f: impl FnMut(&mut Self) -> Result<(), TranslateError>,
    ) -> Result<(), TranslateError> {
        self.expect(b'[')?;
        if self.eat(b']') {
            return Ok(());
        }
        loop {
            f(self)?;
            if self.eat(b']') {
                return Ok(());
            }
            self.expect(b',')?;
        }
    }

    /// Any value, validated and skipped: its text as sent.
    pub(crate) fn raw(&mut self, depth: usize) -> Result<&'a str, TranslateError> {
        self.ws();
        let start = self.i;
        self.skip(depth)?;
        Ok(&self.text[start..self.i])
    }

    /// A number as a double (an integer too, as serde_json reads one into an `f64`).
    pub(crate) fn f64(&mut self) -> Result<f64, TranslateError> {
        let at = self.i;
        let t = self.number_text()?;
        // `number_text` checked the grammar, which Rust's parser accepts; a big exponent
        // gives infinity there, which serde_json refuses.
        match t.parse::<f64>() {
            Ok(f) if f.is_finite() => Ok(f),
            _ => Err(self.malformed("number out of range", at)),
        }
    }

    /// An integer that fits an `i64`; a fraction or exponent is refused, as serde_json refuses
    /// it for an integer field.
    pub(crate) fn i64(&mut self) -> Result<i64, TranslateError> {
        self.ws();
        let at = self.i;
        let t = self.number_text()?;
        // serde_json reads `-0` as the double -0.0, which an integer field refuses.
        match t.parse::<i64>() {
            Ok(v) if t != "-0" => Ok(v),
            _ => Err(self.malformed(format!("expected an integer, found {t}"), at)),
        }
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::{Scanner, pack};

    /// Microseconds: plain integers by the one-pass path, the rest as serde_json reads them
    /// into a `u64` field through a float (truncated, saturated), or refused.
    #[test]
    fn micros_read_every_number_form() {
        let cases: &[(&str, Option<u64>)] = &[
            ("0", Some(0)),
            ("7", Some(7)),
            (" 1795830286464468", Some(1_795_830_286_464_468)),
            ("18446744073709551615", Some(u64::MAX)),
            ("18446744073709551616", Some(u64::MAX)),
            ("1.9", Some(1)),
            ("1e3", Some(1000)),
            ("25E-1", Some(2)),
            ("null", Some(0)),
            ("0123", None),
            ("00", None),
            ("-1", None),
            ("-0.5", None),
            ("1.", None),
            ("x", None),
        ];
        for &(text, want) in cases {
            let body = format!("{text},");
            let mut s = Scanner::new(body.as_bytes(), "test").unwrap();
            let got = s.micros("t").ok();
            assert_eq!(got, want, "{text}");
            if want.is_some() {
                assert_eq!(s.b[s.i], b',', "{text}: stops after the number");
            }
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(2048))]
        /// Both ways of finding a string's end agree with a byte loop on the first quote,
        /// backslash or control character (any byte values, so high bytes too).
        #[test]
        fn special_bytes_are_found_alike(chunk in proptest::array::uniform16(prop_oneof![
            Just(b'"'), Just(b'\\'), 0u8..0x21, 0x7eu8..=0xff, any::<u8>()
        ])) {
            let first = chunk.iter().position(|&c| c == b'"' || c == b'\\' || c < 0x20);
            let want = first.map_or(32, |p| p as u32);
            prop_assert_eq!(super::special16_swar(&chunk).trailing_zeros(), want);
            prop_assert_eq!(super::special16(&chunk).trailing_zeros(), want);
        }

        /// Keys read by the 16-byte path are packed and sliced exactly as `pack` and `string`
        /// make them: any key (escapes, multi-byte characters, 15 and 16 bytes), followed by
        /// any amount of the rest of the payload (the fast path needs 16 bytes to load).
        #[test]
        fn keys_pack_as_pack_does(k in "[a-zé\"\\\\\u{1}]{0,18}", tail in 0usize..20, ws in "[ \t\n]{0,2}") {
            let key = serde_json::to_string(&k).unwrap();
            let body = format!("{{{ws}{key}:1{}}}", " ".repeat(tail));
            let mut s = Scanner::new(body.as_bytes(), "test").unwrap();
            let mut seen = Vec::new();
            s.object(|s, packed| {
                seen.push((packed, s.last_key()?.into_owned()));
                s.skip(0)
            }).unwrap();
            prop_assert_eq!(seen, vec![(pack(k.as_bytes()), k.clone())]);
        }
    }
}
