package propagation

import (
	"context"
	"sort"
	"strings"

	otelprop "go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"weft.dev/sdk/go/id"
)

// Jaeger is the Jaeger propagator (uber-trace-id and uberctx-* baggage).
type Jaeger struct{}

var _ otelprop.TextMapPropagator = Jaeger{}

// Extract reads uber-trace-id and the uberctx-* baggage headers.
func (Jaeger) Extract(ctx context.Context, c otelprop.TextMapCarrier) context.Context {
	var ms []Member
	for _, k := range c.Keys() {
		lk := strings.ToLower(k)
		if len(lk) <= len("uberctx-") || !strings.HasPrefix(lk, "uberctx-") {
			continue
		}
		v := c.Get(k)
		if vg, ok := c.(otelprop.ValuesGetter); ok {
			if vs := vg.Values(k); len(vs) > 0 {
				v = vs[0]
			}
		}
		v = trimOWS(v)
		if v == "" {
			continue
		}
		dec, ok := percentDecode(v, true)
		if !ok || dec == "" {
			continue
		}
		key := lk[len("uberctx-"):]
		dup := false
		for _, m := range ms {
			if m.Key == key {
				dup = true
			}
		}
		if !dup {
			ms = append(ms, Member{Key: key, Value: dec})
		}
	}
	if len(ms) > 0 {
		sort.Slice(ms, func(i, j int) bool { return ms[i].Key < ms[j].Key })
		ctx = ContextWithBaggage(ctx, BaggageFromContext(ctx).Merge(ms))
	}
	if v, ok := first(c, "uber-trace-id"); ok {
		if sc, e, ok := ParseUberTraceID(v); ok {
			return ContextWithRemote(ctx, sc, e)
		}
	}
	return ctx
}

func padHex(s string, n int) (string, bool) {
	if len(s) < 1 || len(s) > n || !isLowerHex(s) {
		return "", false
	}
	return strings.Repeat("0", n-len(s)) + s, true
}

// ParseUberTraceID parses an uber-trace-id value.
func ParseUberTraceID(v string) (trace.SpanContext, Extras, bool) {
	if strings.IndexByte(v, '%') >= 0 {
		d, ok := percentDecode(v, false)
		if !ok {
			return trace.SpanContext{}, Extras{}, false
		}
		v = d
	}
	f := strings.Split(v, ":")
	if len(f) != 4 {
		return trace.SpanContext{}, Extras{}, false
	}
	th, ok1 := padHex(f[0], 32)
	sh, ok2 := padHex(f[1], 16)
	if !ok1 || !ok2 || len(f[3]) < 1 || len(f[3]) > 2 {
		return trace.SpanContext{}, Extras{}, false
	}
	var flags byte
	for i := 0; i < len(f[3]); i++ {
		n, ok := unhex(f[3][i])
		if !ok {
			return trace.SpanContext{}, Extras{}, false
		}
		flags = flags<<4 | n
	}
	var cfg trace.SpanContextConfig
	if !id.ParseHex(cfg.TraceID[:], th) || !id.ParseHex(cfg.SpanID[:], sh) || !cfg.TraceID.IsValid() || !cfg.SpanID.IsValid() {
		return trace.SpanContext{}, Extras{}, false
	}
	var e Extras
	if flags&1 != 0 {
		cfg.TraceFlags = trace.FlagsSampled
		e.JaegerDebug = flags&2 != 0
	}
	cfg.Remote = true
	return trace.NewSpanContext(cfg), e, true
}

// Inject writes uber-trace-id and one uberctx-{key} per eligible baggage entry.
func (Jaeger) Inject(ctx context.Context, c otelprop.TextMapCarrier) {
	sc, e := FromContext(ctx)
	if sc.IsValid() {
		th, sh := hexIDs(ctx, sc)
		b := make([]byte, 0, 56)
		b = append(b, th...)
		b = append(b, ':')
		b = append(b, sh...)
		switch {
		case sc.IsSampled() && e.JaegerDebug:
			b = append(b, ":0:3"...)
		case sc.IsSampled():
			b = append(b, ":0:1"...)
		default:
			b = append(b, ":0:0"...)
		}
		c.Set("uber-trace-id", string(b))
	}
	for _, m := range BaggageFromContext(ctx).members {
		if !isToken(m.Key) || strings.ToLower(m.Key) != m.Key {
			continue
		}
		var b []byte
		for i := 0; i < len(m.Value); i++ {
			ch := m.Value[i]
			if ch >= 'a' && ch <= 'z' || ch >= 'A' && ch <= 'Z' || ch >= '0' && ch <= '9' || ch == '-' || ch == '.' || ch == '_' || ch == '~' {
				b = append(b, ch)
			} else {
				b = append(b, '%', upperHex[ch>>4], upperHex[ch&15])
			}
		}
		c.Set("uberctx-"+m.Key, string(b))
	}
}

// Fields returns the headers the propagator sets (baggage header names depend on the keys).
func (Jaeger) Fields() []string { return []string{"uber-trace-id"} }
