package propagation

import (
	"context"
	"strings"

	otelprop "go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"weft.dev/sdk/go/id"
)

// B3Encoding selects how B3 injects.
type B3Encoding int

const (
	// B3Single injects the single `b3` header (the default).
	B3Single B3Encoding = iota
	// B3Multi injects the X-B3-* headers.
	B3Multi
)

// B3 is the B3 propagator. Extract accepts both encodings; Encoding chooses inject.
type B3 struct{ Encoding B3Encoding }

var _ otelprop.TextMapPropagator = B3{}

type b3State int

const (
	b3Defer b3State = iota
	b3Deny
	b3Accept
	b3Debug
)

func parseTraceID16or32(s string) (t trace.TraceID, ok bool) {
	switch len(s) {
	case 32:
		ok = id.ParseHex(t[:], s)
	case 16:
		ok = id.ParseHex(t[8:], s)
	}
	return t, ok && t.IsValid()
}

func parseSpanID16(s string) (sid trace.SpanID, ok bool) {
	ok = id.ParseHex(sid[:], s)
	return sid, ok && sid.IsValid()
}

func b3Context(t trace.TraceID, s trace.SpanID, st b3State) (trace.SpanContext, Extras) {
	var f trace.TraceFlags
	if st == b3Accept || st == b3Debug {
		f = trace.FlagsSampled
	}
	return trace.NewSpanContext(trace.SpanContextConfig{TraceID: t, SpanID: s, TraceFlags: f, Remote: true}),
		Extras{B3Debug: st == b3Debug}
}

// Extract reads `b3`, then the X-B3-* headers.
func (B3) Extract(ctx context.Context, c otelprop.TextMapCarrier) context.Context {
	if v, ok := first(c, "b3"); ok {
		if sc, e, ok := parseB3Single(v); ok {
			return ContextWithRemote(ctx, sc, e)
		}
	}
	if sc, e, ok := parseB3Multi(c); ok {
		return ContextWithRemote(ctx, sc, e)
	}
	return ctx
}

func parseB3Single(v string) (trace.SpanContext, Extras, bool) {
	parts := strings.Split(v, "-")
	if len(parts) < 2 || len(parts) > 4 {
		return trace.SpanContext{}, Extras{}, false
	}
	t, ok1 := parseTraceID16or32(parts[0])
	s, ok2 := parseSpanID16(parts[1])
	if !ok1 || !ok2 {
		return trace.SpanContext{}, Extras{}, false
	}
	st := b3Defer
	if len(parts) >= 3 {
		switch parts[2] {
		case "0":
			st = b3Deny
		case "1":
			st = b3Accept
		case "d":
			st = b3Debug
		default:
			return trace.SpanContext{}, Extras{}, false
		}
	}
	if len(parts) == 4 {
		if _, ok := parseSpanID16(parts[3]); !ok {
			return trace.SpanContext{}, Extras{}, false
		}
	}
	sc, e := b3Context(t, s, st)
	return sc, e, true
}

func parseB3Multi(c otelprop.TextMapCarrier) (trace.SpanContext, Extras, bool) {
	tv, ok1 := first(c, "x-b3-traceid")
	sv, ok2 := first(c, "x-b3-spanid")
	if !ok1 || !ok2 {
		return trace.SpanContext{}, Extras{}, false
	}
	t, ok1 := parseTraceID16or32(tv)
	s, ok2 := parseSpanID16(sv)
	if !ok1 || !ok2 {
		return trace.SpanContext{}, Extras{}, false
	}
	if p, ok := first(c, "x-b3-parentspanid"); ok {
		if _, ok := parseSpanID16(p); !ok {
			return trace.SpanContext{}, Extras{}, false
		}
	}
	st := b3Defer
	if v, ok := first(c, "x-b3-sampled"); ok {
		switch strings.ToLower(v) {
		case "1", "true":
			st = b3Accept
		case "0", "false":
			st = b3Deny
		default:
			return trace.SpanContext{}, Extras{}, false
		}
	}
	if v, ok := first(c, "x-b3-flags"); ok && v == "1" {
		st = b3Debug
	}
	sc, e := b3Context(t, s, st)
	return sc, e, true
}

// Inject writes the context in the configured encoding.
func (b B3) Inject(ctx context.Context, c otelprop.TextMapCarrier) {
	sc, e := FromContext(ctx)
	if !sc.IsValid() {
		return
	}
	th, sh := hexIDs(ctx, sc)
	if b.Encoding == B3Multi {
		c.Set("x-b3-traceid", th)
		c.Set("x-b3-spanid", sh)
		switch {
		case e.B3Debug:
			c.Set("x-b3-flags", "1")
		case sc.IsSampled():
			c.Set("x-b3-sampled", "1")
		default:
			c.Set("x-b3-sampled", "0")
		}
		return
	}
	st := "0"
	switch {
	case e.B3Debug:
		st = "d"
	case sc.IsSampled():
		st = "1"
	}
	c.Set("b3", th+"-"+sh+"-"+st)
}

// Fields returns the headers the propagator sets.
func (b B3) Fields() []string {
	if b.Encoding == B3Multi {
		return []string{"x-b3-traceid", "x-b3-spanid", "x-b3-sampled", "x-b3-flags"}
	}
	return []string{"b3"}
}
