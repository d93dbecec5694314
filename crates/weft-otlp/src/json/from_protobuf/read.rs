//! Reading the wire format as prost does: fields with prost's checks and recursion budget, the
//! whole input checked as a `TracesData`, and singular message fields merged without copying.

use super::{Msg, ProtobufError, ProtobufProblem, Ty};

/// The whole input, for error offsets.
#[derive(Clone, Copy)]
pub(super) struct Input<'a> {
    pub(super) pb: &'a [u8],
}

impl<'a> Input<'a> {
    /// The fields of the message `buf`, a slice of the input. `ctx` is prost's recursion budget
    /// for them: `RECURSION_LIMIT` for the `TracesData`'s own fields, one less per level below.
    fn fields(self, buf: &'a [u8], ctx: u32) -> Fields<'a> {
        Fields {
            buf,
            base: buf.as_ptr().addr().wrapping_sub(self.pb.as_ptr().addr()),
            pos: 0,
            ctx,
        }
    }
}

/// One field's value. Length-delimited values borrow from the input; a group is skipped.
#[derive(Debug, Clone, Copy)]
enum Val<'a> {
    Varint(u64),
    Fixed64(u64),
    Bytes(&'a [u8]),
    Group,
    Fixed32(u32),
}

#[derive(Debug, Clone, Copy)]
pub(super) struct Field<'a> {
    pub(super) number: u32,
    value: Val<'a>,
    /// Offset of the field's key in the input.
    pub(super) at: usize,
}

impl<'a> Field<'a> {
    fn error(&self, problem: ProtobufProblem) -> ProtobufError {
        ProtobufError { at: self.at, problem }
    }

    fn mismatch(&self, expected: u8) -> ProtobufError {
        let found = match self.value {
            Val::Varint(_) => 0,
            Val::Fixed64(_) => 1,
            Val::Bytes(_) => 2,
            Val::Group => 3,
            Val::Fixed32(_) => 5,
        };
        self.error(ProtobufProblem::Mismatch {
            field: self.number,
            expected,
            found,
        })
    }

    pub(super) fn varint(&self) -> Result<u64, ProtobufError> {
        match self.value {
            Val::Varint(v) => Ok(v),
            _ => Err(self.mismatch(0)),
        }
    }

    pub(super) fn fixed64(&self) -> Result<u64, ProtobufError> {
        match self.value {
            Val::Fixed64(v) => Ok(v),
            _ => Err(self.mismatch(1)),
        }
    }

    pub(super) fn fixed32(&self) -> Result<u32, ProtobufError> {
        match self.value {
            Val::Fixed32(v) => Ok(v),
            _ => Err(self.mismatch(5)),
        }
    }

    pub(super) fn bytes(&self) -> Result<&'a [u8], ProtobufError> {
        match self.value {
            Val::Bytes(b) => Ok(b),
            _ => Err(self.mismatch(2)),
        }
    }

    pub(super) fn str(&self) -> Result<&'a str, ProtobufError> {
        std::str::from_utf8(self.bytes()?).map_err(|_| self.error(ProtobufProblem::Utf8(self.number)))
    }
}

/// The budget for the fields of a message nested in one whose fields have budget `ctx`, as
/// prost's `message::merge` checks it.
pub(super) fn child(ctx: u32, at: usize) -> Result<u32, ProtobufError> {
    ctx.checked_sub(1).ok_or(ProtobufError {
        at,
        problem: ProtobufProblem::TooDeep,
    })
}

/// Iterates the fields of one message with prost's checks: `decode_key`, `decode_varint` and
/// `skip_field` (for groups, which no known field uses).
struct Fields<'a> {
    buf: &'a [u8],
    /// Offset of `buf` in the input.
    base: usize,
    pos: usize,
    ctx: u32,
}

impl<'a> Fields<'a> {
    /// Returns the next field, `Ok(None)` at the end of the message, or the first error.
    fn next(&mut self) -> Result<Option<Field<'a>>, ProtobufError> {
        if self.pos >= self.buf.len() {
            return Ok(None);
        }
        let start = self.pos;
        let (number, wire_type) = self.key()?;
        let value = match wire_type {
            0 => Val::Varint(self.varint()?),
            1 => Val::Fixed64(u64::from_le_bytes(self.take(start)?)),
            2 => Val::Bytes(self.len_delimited(start)?),
            3 => {
                self.skip_group(number, self.ctx, start)?;
                Val::Group
            }
            5 => Val::Fixed32(u32::from_le_bytes(self.take(start)?)),
            _ => return Err(self.error(start, ProtobufProblem::EndGroup)),
        };
        Ok(Some(Field {
            number,
            value,
            at: self.base + start,
        }))
    }

    fn error(&self, pos: usize, problem: ProtobufProblem) -> ProtobufError {
        ProtobufError {
            at: self.base + pos,
            problem,
        }
    }

    /// A varint as prost's `decode_varint` reads it: at most 10 bytes, and the 10th below 2.
    #[inline]
    fn varint(&mut self) -> Result<u64, ProtobufError> {
        let start = self.pos;
        let mut v = 0u64;
        for i in 0..10 {
            let Some(&b) = self.buf.get(self.pos) else { break };
            self.pos += 1;
            v |= u64::from(b & 0x7f) << (7 * i);
            if b < 0x80 {
                if i == 9 && b > 1 {
                    break;
                }
                return Ok(v);
            }
        }
        Err(self.error(start, ProtobufProblem::Varint))
    }

    /// A key as prost's `decode_key` reads it: returns the field number and wire type (0 to 5).
    fn key(&mut self) -> Result<(u32, u8), ProtobufError> {
        let start = self.pos;
        let key = self.varint()?;
        let wire_type = (key & 7) as u8;
        if key > u64::from(u32::MAX) || key >> 3 == 0 {
            return Err(self.error(start, ProtobufProblem::Key));
        }
        if wire_type > 5 {
            return Err(self.error(start, ProtobufProblem::WireType(wire_type)));
        }
        Ok(((key >> 3) as u32, wire_type))
    }

    fn take<const N: usize>(&mut self, start: usize) -> Result<[u8; N], ProtobufError> {
        let Some(b) = self.buf.get(self.pos..self.pos + N) else {
            return Err(self.error(start, ProtobufProblem::Overrun));
        };
        self.pos += N;
        let mut out = [0; N];
        out.copy_from_slice(b);
        Ok(out)
    }

    fn len_delimited(&mut self, start: usize) -> Result<&'a [u8], ProtobufError> {
        let len = self.varint()?;
        let remaining = self.buf.len() - self.pos;
        if len > remaining as u64 {
            return Err(self.error(start, ProtobufProblem::Overrun));
        }
        let b = &self.buf[self.pos..self.pos + len as usize];
        self.pos += len as usize;
        Ok(b)
    }

    /// Skips a field of wire type `wire_type` as prost's `skip_field` does, with recursion
    /// budget `ctx`. For a group, reads up to the end of group `number`.
    fn skip(&mut self, number: u32, wire_type: u8, ctx: u32, start: usize) -> Result<(), ProtobufError> {
        match wire_type {
            3 => self.skip_group(number, ctx, start),
            _ if ctx == 0 => Err(self.error(start, ProtobufProblem::TooDeep)),
            0 => self.varint().map(|_| ()),
            1 => self.take::<8>(start).map(|_| ()),
            2 => self.len_delimited(start).map(|_| ()),
            5 => self.take::<4>(start).map(|_| ()),
            _ => Err(self.error(start, ProtobufProblem::EndGroup)),
        }
    }

    fn skip_group(&mut self, number: u32, ctx: u32, start: usize) -> Result<(), ProtobufError> {
        if ctx == 0 {
            return Err(self.error(start, ProtobufProblem::TooDeep));
        }
        loop {
            let inner = self.pos;
            if inner >= self.buf.len() {
                // Prost reads on past the message's end and then fails; so does this.
                return Err(self.error(start, ProtobufProblem::Overrun));
            }
            let (n, wire_type) = self.key()?;
            if wire_type == 4 {
                if n != number {
                    return Err(self.error(inner, ProtobufProblem::EndGroup));
                }
                return Ok(());
            }
            self.skip(n, wire_type, ctx - 1, inner)?;
        }
    }
}

/// Checks `buf` as a `msg` as prost decodes it, with recursion budget `ctx` for its fields.
pub(super) fn check(input: Input<'_>, msg: Msg, buf: &[u8], ctx: u32) -> Result<(), ProtobufError> {
    let mut fields = input.fields(buf, ctx);
    while let Some(f) = fields.next()? {
        let Some(ty) = msg.field(f.number) else {
            // `skip_field` checks the budget first (a group's was checked when it was skipped).
            if ctx == 0 && !matches!(f.value, Val::Group) {
                return Err(f.error(ProtobufProblem::TooDeep));
            }
            continue;
        };
        match ty {
            Ty::Varint => {
                f.varint()?;
            }
            Ty::Fixed32 => {
                f.fixed32()?;
            }
            Ty::Fixed64 => {
                f.fixed64()?;
            }
            Ty::Bytes => {
                f.bytes()?;
            }
            Ty::Str => {
                f.str()?;
            }
            Ty::Message(m) => check(input, m, f.bytes()?, child(ctx, f.at)?)?,
        }
    }
    Ok(())
}

/// A message as prost merges it: one occurrence, or all the occurrences of a singular message
/// field, whose fields are read in order as one message.
#[derive(Clone, Copy)]
pub(super) enum Body<'a> {
    One(&'a [u8]),
    /// The payloads of the occurrences of field `field` of `outer`, counting from the `skip`-th
    /// field of `outer` on (where an `AnyValue`'s last run of one kind starts).
    Merged {
        outer: &'a Body<'a>,
        field: u32,
        skip: usize,
    },
}

/// Calls `f` with each field of `body`, in order. `ctx` is the recursion budget of those fields.
pub(super) fn each<'b>(
    input: Input<'b>,
    body: &Body<'b>,
    ctx: u32,
    f: &mut dyn FnMut(Field<'b>) -> Result<(), ProtobufError>,
) -> Result<(), ProtobufError> {
    match *body {
        Body::One(buf) => {
            let mut fields = input.fields(buf, ctx);
            while let Some(field) = fields.next()? {
                f(field)?;
            }
            Ok(())
        }
        Body::Merged { outer, field, skip } => {
            let mut i = 0;
            each(input, outer, ctx + 1, &mut |o| {
                i += 1;
                if i > skip && o.number == field {
                    let mut fields = input.fields(o.bytes()?, ctx);
                    while let Some(x) = fields.next()? {
                        f(x)?;
                    }
                }
                Ok(())
            })
        }
    }
}

/// The occurrences of a singular message field, which prost merges into one message.
#[derive(Default)]
pub(super) struct Occurrences<'a> {
    count: usize,
    last: &'a [u8],
    pub(super) at: usize,
}

impl<'a> Occurrences<'a> {
    pub(super) fn add(&mut self, f: &Field<'a>) -> Result<(), ProtobufError> {
        self.last = f.bytes()?;
        self.at = f.at;
        self.count += 1;
        Ok(())
    }

    /// The merged message, or `None` if field `number` of `outer` is absent.
    pub(super) fn body(&self, outer: &'a Body<'a>, number: u32) -> Option<Body<'a>> {
        match self.count {
            0 => None,
            1 => Some(Body::One(self.last)),
            _ => Some(Body::Merged {
                outer,
                field: number,
                skip: 0,
            }),
        }
    }
}
