package propagation

import (
	"context"
	"sort"
	"strings"
	"unicode/utf8"

	"go.opentelemetry.io/otel/baggage"
	otelprop "go.opentelemetry.io/otel/propagation"
)

// Baggage limits (spec/propagation.md "Limits").
const (
	MaxBaggageMembers = 180
	MaxBaggageBytes   = 8192
)

// Member is one baggage entry. Value is decoded; Metadata is the canonical property list.
type Member struct {
	Key, Value, Metadata string
}

// Baggage is an immutable, ordered list of members with distinct keys.
type Baggage struct{ members []Member }

// NewBaggage returns a baggage of the given members (a repeated key replaces the earlier value
// and keeps its position), with the limits applied.
func NewBaggage(ms ...Member) Baggage { return Baggage{}.Merge(ms) }

// Members returns a copy of the members in order.
func (b Baggage) Members() []Member { return append([]Member(nil), b.members...) }

// Len returns the number of members.
func (b Baggage) Len() int { return len(b.members) }

// Merge returns b with ms merged in (existing keys take the new value and metadata in place,
// new keys are appended), with the limits applied.
func (b Baggage) Merge(ms []Member) Baggage {
	if len(ms) == 0 {
		return b
	}
	out := append([]Member(nil), b.members...)
next:
	for _, m := range ms {
		for i := range out {
			if out[i].Key == m.Key {
				out[i].Value, out[i].Metadata = m.Value, m.Metadata
				continue next
			}
		}
		out = append(out, m)
	}
	return Baggage{members: applyBaggageLimits(out)}
}

func applyBaggageLimits(ms []Member) []Member {
	kept := ms[:0:0]
	size := 0
	for _, m := range ms {
		n := len(encodeMember(nil, m))
		if len(kept) > 0 {
			n++ // comma
		}
		if len(kept)+1 > MaxBaggageMembers || size+n > MaxBaggageBytes {
			continue
		}
		size += n
		kept = append(kept, m)
	}
	return kept
}

type baggageKey struct{}

// ContextWithBaggage returns ctx holding b, where the OpenTelemetry baggage API
// (go.opentelemetry.io/otel/baggage.FromContext) finds it too. Members the otel baggage
// rejects (a key or value that is not valid UTF-8) are left out of it. weft keeps b itself
// beside the otel baggage for its member order.
func ContextWithBaggage(ctx context.Context, b Baggage) context.Context {
	ctx = baggage.ContextWithBaggage(ctx, toOtel(b))
	return context.WithValue(ctx, baggageKey{}, b)
}

// BaggageFromContext returns the baggage in ctx: the OpenTelemetry baggage
// (go.opentelemetry.io/otel/baggage.FromContext), in the order weft last stored it with
// members the otel API added since appended in key order.
func BaggageFromContext(ctx context.Context) Baggage {
	ob := baggage.FromContext(ctx)
	cached, _ := ctx.Value(baggageKey{}).(Baggage)
	if ob.Len() == 0 {
		return Baggage{}
	}
	if sameBaggage(cached, ob) {
		return cached
	}
	out := make([]Member, 0, ob.Len())
	seen := make(map[string]bool, len(cached.members))
	for _, m := range cached.members {
		if om := ob.Member(m.Key); om.Key() != "" {
			out = append(out, fromOtelMember(om))
			seen[m.Key] = true
		}
	}
	start := len(out)
	for _, om := range ob.Members() {
		if !seen[om.Key()] {
			out = append(out, fromOtelMember(om))
		}
	}
	added := out[start:]
	sort.Slice(added, func(i, j int) bool { return added[i].Key < added[j].Key })
	return Baggage{members: out}
}

// sameBaggage reports whether b and ob hold the same members (b's order aside).
func sameBaggage(b Baggage, ob baggage.Baggage) bool {
	if len(b.members) != ob.Len() {
		return false
	}
	for _, m := range b.members {
		om := ob.Member(m.Key)
		if om.Key() != m.Key || om.Value() != m.Value || otelMetadata(om) != m.Metadata {
			return false
		}
	}
	return true
}

func otelMetadata(om baggage.Member) string {
	props := om.Properties()
	if len(props) == 0 {
		return ""
	}
	var sb strings.Builder
	for i, p := range props {
		if i > 0 {
			sb.WriteByte(';')
		}
		sb.WriteString(p.Key())
		if v, ok := p.Value(); ok {
			sb.WriteByte('=')
			sb.WriteString(v)
		}
	}
	return sb.String()
}

func fromOtelMember(om baggage.Member) Member {
	return Member{Key: om.Key(), Value: om.Value(), Metadata: otelMetadata(om)}
}

// otelMaxMembers is the otel baggage.New member limit; weft's is MaxBaggageMembers, so the
// members past it are added with SetMember, which does not truncate.
const otelMaxMembers = 64

func toOtel(b Baggage) baggage.Baggage {
	ms := make([]baggage.Member, 0, len(b.members))
	for _, m := range b.members {
		var props []baggage.Property
		if m.Metadata != "" {
			for _, p := range strings.Split(m.Metadata, ";") {
				k, v, hasV := strings.Cut(p, "=")
				var prop baggage.Property
				var err error
				if hasV {
					prop, err = baggage.NewKeyValuePropertyRaw(k, v)
				} else {
					prop, err = baggage.NewKeyProperty(k)
				}
				if err == nil {
					props = append(props, prop)
				}
			}
		}
		if om, err := baggage.NewMemberRaw(m.Key, m.Value, props...); err == nil {
			ms = append(ms, om)
		}
	}
	n := min(len(ms), otelMaxMembers)
	ob, _ := baggage.New(ms[:n]...)
	for _, om := range ms[n:] {
		ob, _ = ob.SetMember(om)
	}
	return ob
}

// W3CBaggage is the W3C baggage propagator.
type W3CBaggage struct{}

var _ otelprop.TextMapPropagator = W3CBaggage{}

// Extract merges the baggage header's members into the context's baggage.
func (W3CBaggage) Extract(ctx context.Context, c otelprop.TextMapCarrier) context.Context {
	vs := values(c, "baggage")
	if len(vs) == 0 {
		return ctx
	}
	ms := ParseBaggage(strings.Join(vs, ","))
	if len(ms) == 0 {
		return ctx
	}
	return ContextWithBaggage(ctx, BaggageFromContext(ctx).Merge(ms))
}

// ParseBaggage parses a baggage header value; invalid members are skipped and a repeated key
// replaces the earlier value in place.
func ParseBaggage(s string) []Member {
	var out []Member
next:
	for _, piece := range strings.Split(s, ",") {
		piece = trimOWS(piece)
		if piece == "" {
			continue
		}
		parts := strings.Split(piece, ";")
		eq := strings.IndexByte(parts[0], '=')
		if eq < 0 {
			continue
		}
		key, raw := trimOWS(parts[0][:eq]), trimOWS(parts[0][eq+1:])
		if !isToken(key) || !isBaggageOctets(raw) {
			continue
		}
		val, ok := percentDecode(raw, false)
		if !ok {
			continue
		}
		meta, ok := canonicalProperties(parts[1:])
		if !ok {
			continue
		}
		for i := range out {
			if out[i].Key == key {
				out[i].Value, out[i].Metadata = val, meta
				continue next
			}
		}
		out = append(out, Member{Key: key, Value: val, Metadata: meta})
	}
	return out
}

func canonicalProperties(props []string) (string, bool) {
	var b strings.Builder
	for _, p := range props {
		p = trimOWS(p)
		if p == "" {
			continue
		}
		var k, v string
		hasV := false
		if eq := strings.IndexByte(p, '='); eq >= 0 {
			k, v, hasV = trimOWS(p[:eq]), trimOWS(p[eq+1:]), true
		} else {
			k = p
		}
		if !isToken(k) || hasV && (v == "" || !isBaggageOctets(v)) {
			return "", false
		}
		if b.Len() > 0 {
			b.WriteByte(';')
		}
		b.WriteString(k)
		if hasV {
			b.WriteByte('=')
			b.WriteString(v)
		}
	}
	return b.String(), true
}

func isToken(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' {
			continue
		}
		if !strings.ContainsRune("!#$%&'*+-.^_`|~", rune(c)) {
			return false
		}
	}
	return true
}

func isBaggageOctet(c byte) bool {
	return c == 0x21 || c >= 0x23 && c <= 0x2b || c >= 0x2d && c <= 0x3a || c >= 0x3c && c <= 0x5b || c >= 0x5d && c <= 0x7e
}

func isBaggageOctets(s string) bool {
	for i := 0; i < len(s); i++ {
		if !isBaggageOctet(s[i]) {
			return false
		}
	}
	return true
}

func unhex(c byte) (byte, bool) {
	switch {
	case c >= '0' && c <= '9':
		return c - '0', true
	case c >= 'a' && c <= 'f':
		return c - 'a' + 10, true
	case c >= 'A' && c <= 'F':
		return c - 'A' + 10, true
	}
	return 0, false
}

// percentDecode decodes %XX (and '+' as a space when plusSpace), then replaces each byte that
// is not part of well-formed UTF-8 with U+FFFD.
func percentDecode(s string, plusSpace bool) (string, bool) {
	if !strings.ContainsAny(s, "%+") && utf8.ValidString(s) {
		return s, true
	}
	b := make([]byte, 0, len(s))
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c == '%':
			if i+2 >= len(s) {
				return "", false
			}
			hi, ok1 := unhex(s[i+1])
			lo, ok2 := unhex(s[i+2])
			if !ok1 || !ok2 {
				return "", false
			}
			b = append(b, hi<<4|lo)
			i += 2
		case c == '+' && plusSpace:
			b = append(b, ' ')
		default:
			b = append(b, c)
		}
	}
	if utf8.Valid(b) {
		return string(b), true
	}
	var out strings.Builder
	for len(b) > 0 {
		r, n := utf8.DecodeRune(b)
		out.WriteRune(r) // RuneError for each invalid byte
		b = b[n:]
	}
	return out.String(), true
}

const upperHex = "0123456789ABCDEF"

func encodeMember(dst []byte, m Member) []byte {
	dst = append(dst, m.Key...)
	dst = append(dst, '=')
	for i := 0; i < len(m.Value); i++ {
		c := m.Value[i]
		if isBaggageOctet(c) && c != '%' {
			dst = append(dst, c)
		} else {
			dst = append(dst, '%', upperHex[c>>4], upperHex[c&15])
		}
	}
	if m.Metadata != "" {
		if meta, ok := canonicalProperties(strings.Split(m.Metadata, ";")); ok && meta != "" {
			dst = append(dst, ';')
			dst = append(dst, meta...)
		}
	}
	return dst
}

// Inject writes the context's baggage, if any.
func (W3CBaggage) Inject(ctx context.Context, c otelprop.TextMapCarrier) {
	b := BaggageFromContext(ctx)
	var out []byte
	for _, m := range applyBaggageLimits(b.members) {
		if !isToken(m.Key) {
			continue
		}
		if len(out) > 0 {
			out = append(out, ',')
		}
		out = encodeMember(out, m)
	}
	if len(out) > 0 {
		c.Set("baggage", string(out))
	}
}

// Fields returns the headers the propagator sets.
func (W3CBaggage) Fields() []string { return []string{"baggage"} }
