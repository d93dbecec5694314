// Package otlp exports spans as OTLP (spec/otlp.md) over HTTP/protobuf (gzip by default) or
// gRPC. The protobuf is written by hand, straight from the span records into a reused buffer,
// in the exact deterministic form spec/otlp.md fixes; no otlp proto objects are built.
package otlp

import (
	"encoding/binary"
	"math"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"weft.dev/sdk/go/export"
)

// Wire types.
const (
	wtVarint  = 0
	wtFixed64 = 1
	wtLen     = 2
	wtFixed32 = 5
)

func appendVarint(b []byte, v uint64) []byte {
	for v >= 0x80 {
		b = append(b, byte(v)|0x80)
		v >>= 7
	}
	return append(b, byte(v))
}

func appendTag(b []byte, field int, wt int) []byte {
	return appendVarint(b, uint64(field)<<3|uint64(wt))
}

func appendString(b []byte, field int, s string) []byte {
	if s == "" {
		return b
	}
	b = appendTag(b, field, wtLen)
	b = appendVarint(b, uint64(len(s)))
	return append(b, s...)
}

func appendBytesField(b []byte, field int, s []byte) []byte {
	b = appendTag(b, field, wtLen)
	b = appendVarint(b, uint64(len(s)))
	return append(b, s...)
}

func appendFixed64(b []byte, field int, v uint64) []byte {
	if v == 0 {
		return b
	}
	b = appendTag(b, field, wtFixed64)
	return binary.LittleEndian.AppendUint64(b, v)
}

func appendUvarintField(b []byte, field int, v uint64) []byte {
	if v == 0 {
		return b
	}
	return appendVarint(appendTag(b, field, wtVarint), v)
}

// openLen writes the tag of a length-delimited field and reserves one byte for its length;
// closeLen fills the length in, moving the body when the length needs more than one byte.
func openLen(b []byte, field int) ([]byte, int) {
	b = appendTag(b, field, wtLen)
	b = append(b, 0)
	return b, len(b)
}

func closeLen(b []byte, start int) []byte {
	n := len(b) - start
	if n < 0x80 {
		b[start-1] = byte(n)
		return b
	}
	var tmp [10]byte
	l := appendVarint(tmp[:0], uint64(n))
	extra := len(l) - 1
	b = append(b, tmp[:extra]...)
	copy(b[start+extra:], b[start:start+n])
	copy(b[start-1:], l)
	return b
}

func appendAnyValue(b []byte, field int, v attribute.Value) []byte {
	b, s := openLen(b, field)
	switch v.Type() {
	case attribute.STRING:
		str := v.AsString()
		b = appendTag(b, 1, wtLen)
		b = appendVarint(b, uint64(len(str)))
		b = append(b, str...)
	case attribute.BOOL:
		b = appendTag(b, 2, wtVarint)
		if v.AsBool() {
			b = append(b, 1)
		} else {
			b = append(b, 0)
		}
	case attribute.INT64:
		b = appendTag(b, 3, wtVarint)
		b = appendVarint(b, uint64(v.AsInt64()))
	case attribute.FLOAT64:
		b = appendTag(b, 4, wtFixed64)
		b = binary.LittleEndian.AppendUint64(b, math.Float64bits(v.AsFloat64()))
	case attribute.BYTESLICE:
		b = appendBytesField(b, 7, v.AsByteSlice())
	case attribute.MAP:
		var ks int
		b, ks = openLen(b, 6)
		for _, kv := range v.AsMap() {
			b = appendKeyValue(b, 1, kv)
		}
		b = closeLen(b, ks)
	case attribute.BOOLSLICE, attribute.INT64SLICE, attribute.FLOAT64SLICE, attribute.STRINGSLICE, attribute.SLICE:
		var as int
		b, as = openLen(b, 5)
		switch v.Type() {
		case attribute.BOOLSLICE:
			for _, x := range v.AsBoolSlice() {
				b = appendAnyValue(b, 1, attribute.BoolValue(x))
			}
		case attribute.INT64SLICE:
			for _, x := range v.AsInt64Slice() {
				b = appendAnyValue(b, 1, attribute.Int64Value(x))
			}
		case attribute.FLOAT64SLICE:
			for _, x := range v.AsFloat64Slice() {
				b = appendAnyValue(b, 1, attribute.Float64Value(x))
			}
		case attribute.STRINGSLICE:
			for _, x := range v.AsStringSlice() {
				b = appendAnyValue(b, 1, attribute.StringValue(x))
			}
		default:
			for _, x := range v.AsSlice() {
				b = appendAnyValue(b, 1, x)
			}
		}
		b = closeLen(b, as)
	default:
		// EMPTY: an AnyValue with no member set.
	}
	return closeLen(b, s)
}

func appendKeyValue(b []byte, field int, kv attribute.KeyValue) []byte {
	b, s := openLen(b, field)
	b = appendString(b, 1, string(kv.Key))
	b = appendAnyValue(b, 2, kv.Value)
	return closeLen(b, s)
}

func appendAttributes(b []byte, field int, kvs []attribute.KeyValue) []byte {
	for _, kv := range kvs {
		b = appendKeyValue(b, field, kv)
	}
	return b
}

// flags returns the OTLP span/link flags: the W3C flags in bits 0-7 (all eight, spec/otlp.md),
// has-is-remote, is-remote.
func flags(f trace.TraceFlags, remote bool) uint32 {
	v := uint32(f) | 0x100
	if remote {
		v |= 0x200
	}
	return v
}

func appendSpan(b []byte, sp *export.SpanData) []byte {
	b, s := openLen(b, 2)
	b = appendBytesField(b, 1, sp.TraceID[:])
	b = appendBytesField(b, 2, sp.SpanID[:])
	b = appendString(b, 3, sp.Tracestate)
	if sp.ParentSpanID.IsValid() {
		b = appendBytesField(b, 4, sp.ParentSpanID[:])
	}
	b = appendString(b, 5, sp.Name)
	kind := sp.Kind
	if kind == trace.SpanKindUnspecified {
		kind = trace.SpanKindInternal
	}
	b = appendTag(b, 6, wtVarint)
	b = appendVarint(b, uint64(kind))
	b = appendFixed64(b, 7, sp.StartUnixNano)
	b = appendFixed64(b, 8, sp.EndUnixNano)
	b = appendAttributes(b, 9, sp.Attributes)
	b = appendUvarintField(b, 10, uint64(sp.DroppedAttributes))
	for i := range sp.Events {
		ev := &sp.Events[i]
		var es int
		b, es = openLen(b, 11)
		b = appendFixed64(b, 1, ev.TimeUnixNano)
		b = appendString(b, 2, ev.Name)
		b = appendAttributes(b, 3, ev.Attributes)
		b = appendUvarintField(b, 4, uint64(ev.DroppedAttributes))
		b = closeLen(b, es)
	}
	b = appendUvarintField(b, 12, uint64(sp.DroppedEvents))
	for i := range sp.Links {
		l := &sp.Links[i]
		var ls int
		b, ls = openLen(b, 13)
		t, sid := l.SpanContext.TraceID(), l.SpanContext.SpanID()
		b = appendBytesField(b, 1, t[:])
		b = appendBytesField(b, 2, sid[:])
		b = appendString(b, 3, l.Tracestate)
		b = appendAttributes(b, 4, l.Attributes)
		b = appendUvarintField(b, 5, uint64(l.DroppedAttributes))
		b = appendTag(b, 6, wtFixed32)
		b = binary.LittleEndian.AppendUint32(b, flags(l.SpanContext.TraceFlags(), l.SpanContext.IsRemote()))
		b = closeLen(b, ls)
	}
	b = appendUvarintField(b, 14, uint64(sp.DroppedLinks))
	if code := statusCode(sp.StatusCode); code != 0 || sp.StatusMessage != "" {
		var ss int
		b, ss = openLen(b, 15)
		b = appendString(b, 2, sp.StatusMessage)
		b = appendUvarintField(b, 3, code)
		b = closeLen(b, ss)
	}
	b = appendTag(b, 16, wtFixed32)
	b = binary.LittleEndian.AppendUint32(b, flags(sp.TraceFlags, sp.ParentIsRemote))
	return closeLen(b, s)
}

// statusCode maps otel codes (Unset 0, Error 1, Ok 2) to OTLP (Unset 0, Ok 1, Error 2).
func statusCode(c codes.Code) uint64 {
	switch c {
	case codes.Ok:
		return 1
	case codes.Error:
		return 2
	}
	return 0
}

// AppendRequest appends the ExportTraceServiceRequest of one batch to dst: one ResourceSpans,
// one ScopeSpans per distinct scope in order of first appearance, spans in batch order.
func AppendRequest(dst []byte, res *export.Resource, batch []*export.SpanData) []byte {
	b, rs := openLen(dst, 1)
	// Resource (always written, even empty).
	var r int
	b, r = openLen(b, 1)
	if res != nil {
		b = appendAttributes(b, 1, res.Attributes)
		b = appendUvarintField(b, 2, uint64(res.DroppedAttributes))
	}
	b = closeLen(b, r)
	var seen [8]*export.Scope
	scopes := seen[:0]
	for _, sp := range batch {
		found := false
		for _, sc := range scopes {
			if sc == sp.Scope {
				found = true
				break
			}
		}
		if found {
			continue
		}
		scopes = append(scopes, sp.Scope)
		var ss int
		b, ss = openLen(b, 2)
		var sc int
		b, sc = openLen(b, 1)
		if sp.Scope != nil {
			b = appendString(b, 1, sp.Scope.Name)
			b = appendString(b, 2, sp.Scope.Version)
			b = appendAttributes(b, 3, sp.Scope.Attributes)
		}
		b = closeLen(b, sc)
		for _, s2 := range batch {
			if s2.Scope == sp.Scope {
				b = appendSpan(b, s2)
			}
		}
		if sp.Scope != nil {
			b = appendString(b, 3, sp.Scope.SchemaURL)
		}
		b = closeLen(b, ss)
	}
	if res != nil {
		b = appendString(b, 3, res.SchemaURL)
	}
	return closeLen(b, rs)
}
