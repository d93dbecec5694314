package propagation

import (
	"context"
	"log"
	"os"
	"strings"

	otelprop "go.opentelemetry.io/otel/propagation"
)

// Composite runs its propagators in order (spec/propagation.md "Composite propagator").
type Composite []otelprop.TextMapPropagator

var _ otelprop.TextMapPropagator = Composite(nil)

// ByName returns the propagator of an OTEL_PROPAGATORS name.
func ByName(name string) (otelprop.TextMapPropagator, bool) {
	switch name {
	case "tracecontext":
		return TraceContext{}, true
	case "baggage":
		return W3CBaggage{}, true
	case "b3":
		return B3{Encoding: B3Single}, true
	case "b3multi":
		return B3{Encoding: B3Multi}, true
	case "xray":
		return Xray{}, true
	case "jaeger":
		return Jaeger{}, true
	}
	return nil, false
}

// FromNames builds a composite from names; a repeated name is used once, `none` contributes
// nothing, and unknown names are returned in unknown (and otherwise ignored).
func FromNames(names []string) (c Composite, unknown []string) {
	seen := map[string]bool{}
	for _, n := range names {
		n = strings.ToLower(strings.TrimSpace(n))
		if n == "" || n == "none" || seen[n] {
			continue
		}
		seen[n] = true
		if p, ok := ByName(n); ok {
			c = append(c, p)
		} else {
			unknown = append(unknown, n)
		}
	}
	return c, unknown
}

// FromEnv builds the composite named by OTEL_PROPAGATORS (default "tracecontext,baggage"),
// logging unknown names.
func FromEnv() Composite {
	v := os.Getenv("OTEL_PROPAGATORS")
	if strings.TrimSpace(v) == "" {
		v = "tracecontext,baggage"
	}
	c, unknown := FromNames(strings.Split(v, ","))
	for _, u := range unknown {
		log.Printf("weft: OTEL_PROPAGATORS: unknown propagator %q ignored", u)
	}
	return c
}

// Extract runs every propagator in order, each on the previous one's context.
func (c Composite) Extract(ctx context.Context, carrier otelprop.TextMapCarrier) context.Context {
	for _, p := range c {
		ctx = p.Extract(ctx, carrier)
	}
	return ctx
}

// Inject runs every propagator in order.
func (c Composite) Inject(ctx context.Context, carrier otelprop.TextMapCarrier) {
	for _, p := range c {
		p.Inject(ctx, carrier)
	}
}

// Fields returns the union of the members' fields, in order.
func (c Composite) Fields() []string {
	var out []string
	seen := map[string]bool{}
	for _, p := range c {
		for _, f := range p.Fields() {
			if !seen[f] {
				seen[f] = true
				out = append(out, f)
			}
		}
	}
	return out
}
