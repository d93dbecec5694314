package propagation_test

import (
	"context"
	"testing"

	"go.opentelemetry.io/otel/baggage"
	otelprop "go.opentelemetry.io/otel/propagation"

	"weft.dev/sdk/go/propagation"
)

// Extracted baggage is where the OpenTelemetry baggage API looks for it.
func TestExtractedBaggageIsOtelBaggage(t *testing.T) {
	for _, c := range []struct {
		name string
		p    otelprop.TextMapPropagator
		h    propagation.HeaderCarrier
	}{
		{"w3c", propagation.W3CBaggage{}, propagation.HeaderCarrier{"baggage": {"user=alice%20b;ttl=60;secret, tenant=t1"}}},
		{"jaeger", propagation.Jaeger{}, propagation.HeaderCarrier{"uberctx-user": {"alice%20b"}, "uberctx-tenant": {"t1"}}},
	} {
		t.Run(c.name, func(t *testing.T) {
			b := baggage.FromContext(c.p.Extract(context.Background(), c.h))
			if b.Len() != 2 || b.Member("user").Value() != "alice b" || b.Member("tenant").Value() != "t1" {
				t.Fatalf("otel baggage %q", b.String())
			}
			if c.name == "w3c" {
				props := b.Member("user").Properties()
				if len(props) != 2 || props[0].Key() != "ttl" || props[1].Key() != "secret" {
					t.Fatalf("properties %v", props)
				}
				if v, _ := props[0].Value(); v != "60" {
					t.Fatalf("ttl %q", v)
				}
			}
		})
	}
}

// Baggage set with the OpenTelemetry baggage API is injected, and weft's order survives an
// otel change to one member.
func TestOtelBaggageIsInjected(t *testing.T) {
	m1, _ := baggage.NewMemberRaw("user", "alice b")
	ttl, _ := baggage.NewKeyValueProperty("ttl", "60")
	m2, _ := baggage.NewMemberRaw("tenant", "t1", ttl)
	b, err := baggage.New(m1, m2)
	if err != nil {
		t.Fatal(err)
	}
	ctx := baggage.ContextWithBaggage(context.Background(), b)

	h := propagation.HeaderCarrier{}
	propagation.W3CBaggage{}.Inject(ctx, h)
	if got, want := h.Get("baggage"), "tenant=t1;ttl=60,user=alice%20b"; got != want {
		t.Fatalf("baggage %q, want %q", got, want)
	}
	h = propagation.HeaderCarrier{}
	propagation.Jaeger{}.Inject(ctx, h)
	if h.Get("uberctx-user") != "alice%20b" || h.Get("uberctx-tenant") != "t1" {
		t.Fatalf("jaeger headers %v", h)
	}

	// Extracted order is kept, a member changed through the otel API keeps its place and a new
	// one comes last.
	ctx = propagation.W3CBaggage{}.Extract(context.Background(), propagation.HeaderCarrier{"baggage": {"z=1,a=2,m=3"}})
	ob := baggage.FromContext(ctx)
	ma, _ := baggage.NewMemberRaw("a", "changed")
	ob, _ = ob.SetMember(ma)
	mb, _ := baggage.NewMemberRaw("b", "new")
	ob, _ = ob.SetMember(mb)
	ctx = baggage.ContextWithBaggage(ctx, ob)
	h = propagation.HeaderCarrier{}
	propagation.W3CBaggage{}.Inject(ctx, h)
	if got, want := h.Get("baggage"), "z=1,a=changed,m=3,b=new"; got != want {
		t.Fatalf("baggage %q, want %q", got, want)
	}
	// Removed through the otel API: nothing is injected.
	h = propagation.HeaderCarrier{}
	propagation.W3CBaggage{}.Inject(baggage.ContextWithoutBaggage(ctx), h)
	if got := h.Get("baggage"); got != "" {
		t.Fatalf("baggage %q after ContextWithoutBaggage", got)
	}
}

// More members than the otel baggage.New limit (64) up to weft's 180 all travel.
func TestManyBaggageMembersSurvive(t *testing.T) {
	var ms []propagation.Member
	for i := range 100 {
		ms = append(ms, propagation.Member{Key: "k" + string(rune('a'+i/26)) + string(rune('a'+i%26)), Value: "v"})
	}
	ctx := propagation.ContextWithBaggage(context.Background(), propagation.NewBaggage(ms...))
	if n := baggage.FromContext(ctx).Len(); n != 100 {
		t.Fatalf("otel baggage has %d members, want 100", n)
	}
	if n := propagation.BaggageFromContext(ctx).Len(); n != 100 {
		t.Fatalf("weft baggage has %d members, want 100", n)
	}
}
