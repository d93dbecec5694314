package weft_test

import (
	"bytes"
	"context"
	"encoding/hex"
	"encoding/json"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"

	otelprop "go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"weft.dev/sdk/go/id"
	"weft.dev/sdk/go/propagation"
)

// vectorDir is the repository's shared vector directory (spec/vectors).
const vectorDir = "../../spec/vectors"

type vectorFile struct {
	Version int      `json:"version"`
	Vectors []vector `json:"vectors"`
}

type vector struct {
	Name      string          `json:"name"`
	Operation string          `json:"operation"`
	Input     json.RawMessage `json:"input"`
	Expected  json.RawMessage `json:"expected"`
}

// runners maps each vector file to its runner. A file without a runner fails the suite.
var runners = map[string]func(t *testing.T, v vector){
	"ids.json":         runIDs,
	"traceparent.json": runPropagation,
	"tracestate.json":  runPropagation,
	"baggage.json":     runPropagation,
	"b3.json":          runPropagation,
	"xray.json":        runPropagation,
	"jaeger.json":      runPropagation,
	"composite.json":   runPropagation,
}

func TestVectors(t *testing.T) {
	files, err := filepath.Glob(filepath.Join(vectorDir, "*.json"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no vector files in %s: %v", vectorDir, err)
	}
	for _, f := range files {
		base := filepath.Base(f)
		t.Run(base, func(t *testing.T) {
			run, ok := runners[base]
			if !ok {
				t.Fatalf("%s has no runner in vectors_test.go", base)
			}
			raw, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			var vf vectorFile
			if err := json.Unmarshal(raw, &vf); err != nil {
				t.Fatalf("%s: %v", base, err)
			}
			if vf.Version != 1 {
				t.Fatalf("%s: vector format version %d is not known to this runner", base, vf.Version)
			}
			if len(vf.Vectors) == 0 {
				t.Fatalf("%s: no vectors", base)
			}
			for _, v := range vf.Vectors {
				t.Run(v.Name, func(t *testing.T) { run(t, v) })
			}
		})
	}
}

func mustUnmarshal(t *testing.T, raw json.RawMessage, v any) {
	t.Helper()
	if err := json.Unmarshal(raw, v); err != nil {
		t.Fatalf("vector: %v", err)
	}
}

// ---- ids.json

type scripted struct {
	draws []uint64
	used  int
}

func (s *scripted) Uint64() uint64 {
	v := s.draws[s.used]
	s.used++
	return v
}

func parseDraws(t *testing.T, ds []string) *scripted {
	s := &scripted{}
	for _, d := range ds {
		v, err := strconv.ParseUint(d, 16, 64)
		if err != nil {
			t.Fatal(err)
		}
		s.draws = append(s.draws, v)
	}
	return s
}

func runIDs(t *testing.T, v vector) {
	var in struct {
		Bytes            []int    `json:"bytes"`
		Kind             string   `json:"kind"`
		Hex              string   `json:"hex"`
		Draws            []string `json:"draws"`
		ParentTraceFlags *string  `json:"parent_trace_flags"`
		Sampled          bool     `json:"sampled"`
		UnixNanos        string   `json:"unix_nanos"`
		Seed             string   `json:"seed"`
		Count            int      `json:"count"`
	}
	var ex struct {
		Hex        string   `json:"hex"`
		Valid      bool     `json:"valid"`
		ID         string   `json:"id"`
		DrawsUsed  int      `json:"draws_used"`
		TraceFlags string   `json:"trace_flags"`
		TraceID    string   `json:"trace_id"`
		XrayRoot   string   `json:"xray_root"`
		Outputs    []string `json:"outputs"`
	}
	mustUnmarshal(t, v.Input, &in)
	mustUnmarshal(t, v.Expected, &ex)
	switch v.Operation {
	case "hex_encode":
		b := make([]byte, len(in.Bytes))
		for i, x := range in.Bytes {
			b[i] = byte(x)
		}
		if got := string(id.AppendHex(nil, b)); got != ex.Hex {
			t.Fatalf("hex %q, want %q", got, ex.Hex)
		}
	case "validate":
		var valid bool
		switch in.Kind {
		case "trace_id":
			var tid trace.TraceID
			valid = id.ParseHex(tid[:], in.Hex) && tid.IsValid()
		case "span_id":
			var sid trace.SpanID
			valid = id.ParseHex(sid[:], in.Hex) && sid.IsValid()
		default:
			t.Fatalf("unknown kind %q", in.Kind)
		}
		if valid != ex.Valid {
			t.Fatalf("valid = %v, want %v", valid, ex.Valid)
		}
	case "generate":
		switch in.Kind {
		case "trace_id":
			src := parseDraws(t, in.Draws)
			tid := id.TraceIDFrom(src)
			if tid.String() != ex.ID || src.used != ex.DrawsUsed {
				t.Fatalf("got %s after %d draws, want %s after %d", tid, src.used, ex.ID, ex.DrawsUsed)
			}
		case "span_id":
			src := parseDraws(t, in.Draws)
			sid := id.SpanIDFrom(src)
			if sid.String() != ex.ID || src.used != ex.DrawsUsed {
				t.Fatalf("got %s after %d draws, want %s after %d", sid, src.used, ex.ID, ex.DrawsUsed)
			}
		case "trace_flags":
			var parent trace.TraceFlags
			if in.ParentTraceFlags != nil {
				b, _ := hex.DecodeString(*in.ParentTraceFlags)
				parent = trace.TraceFlags(b[0])
			}
			f := id.NewTraceFlags(parent, in.ParentTraceFlags != nil, in.Sampled)
			if got := hex.EncodeToString([]byte{byte(f)}); got != ex.TraceFlags {
				t.Fatalf("flags %s, want %s", got, ex.TraceFlags)
			}
		default:
			t.Fatalf("unknown kind %q", in.Kind)
		}
	case "generate_xray":
		ns, err := strconv.ParseUint(in.UnixNanos, 10, 64)
		if err != nil {
			t.Fatal(err)
		}
		tid := id.XrayTraceIDFrom(parseDraws(t, in.Draws), uint32(ns/1e9))
		s := tid.String()
		if s != ex.TraceID || "1-"+s[:8]+"-"+s[8:] != ex.XrayRoot {
			t.Fatalf("got %s, want %s / %s", s, ex.TraceID, ex.XrayRoot)
		}
	case "prng_wyrand":
		seed, err := strconv.ParseUint(strings.TrimPrefix(in.Seed, "0x"), 16, 64)
		if err != nil {
			seed, err = strconv.ParseUint(in.Seed, 10, 64)
			if err != nil {
				t.Fatalf("seed %q: %v", in.Seed, err)
			}
		}
		w := id.NewWyrand(seed)
		for i := 0; i < in.Count; i++ {
			got := strconv.FormatUint(w.Uint64(), 16)
			got = strings.Repeat("0", 16-len(got)) + got
			if got != strings.TrimPrefix(ex.Outputs[i], "0x") {
				t.Fatalf("output %d: %s, want %s", i, got, ex.Outputs[i])
			}
		}
	default:
		t.Fatalf("unknown operation %q", v.Operation)
	}
}

// ---- propagation vectors

type propConfig struct {
	Name           string `json:"name"`
	InjectEncoding string `json:"inject_encoding"`
}

func propagatorOf(t *testing.T, raw json.RawMessage) otelprop.TextMapPropagator {
	t.Helper()
	var one propConfig
	if json.Unmarshal(raw, &one) == nil && one.Name != "" {
		if one.Name == "b3" && one.InjectEncoding == "multi" {
			return propagation.B3{Encoding: propagation.B3Multi}
		}
		p, ok := propagation.ByName(one.Name)
		if !ok {
			t.Fatalf("unknown propagator %q", one.Name)
		}
		return p
	}
	var names []string
	mustUnmarshal(t, raw, &names)
	c, unknown := propagation.FromNames(names)
	if len(unknown) > 0 {
		t.Fatalf("unknown propagators %v", unknown)
	}
	return c
}

// orderedHeaders reads a vector's headers object keeping member order (spec/README.md:
// harnesses must not sort keys).
func orderedHeaders(t *testing.T, raw json.RawMessage) propagation.HeaderCarrier {
	t.Helper()
	h := propagation.HeaderCarrier{}
	if len(raw) == 0 {
		return h
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	if _, err := dec.Token(); err != nil {
		t.Fatal(err)
	}
	for dec.More() {
		k, err := dec.Token()
		if err != nil {
			t.Fatal(err)
		}
		var vals []string
		if err := dec.Decode(&vals); err != nil {
			t.Fatal(err)
		}
		for _, val := range vals {
			h.Add(k.(string), val)
		}
	}
	return h
}

type vecContext struct {
	Valid       *bool   `json:"valid"`
	TraceID     string  `json:"trace_id"`
	SpanID      string  `json:"span_id"`
	TraceFlags  string  `json:"trace_flags"`
	IsRemote    *bool   `json:"is_remote"`
	Tracestate  *string `json:"tracestate"`
	B3Debug     bool    `json:"b3_debug"`
	JaegerDebug bool    `json:"jaeger_debug"`
	XrayLineage string  `json:"xray_lineage"`
}

type vecMember struct {
	Key      string `json:"key"`
	Value    string `json:"value"`
	Metadata string `json:"metadata"`
}

func runPropagation(t *testing.T, v vector) {
	var in struct {
		Propagator  json.RawMessage `json:"propagator"`
		Propagators json.RawMessage `json:"propagators"`
		Headers     json.RawMessage `json:"headers"`
		Context     *vecContext     `json:"context"`
		Baggage     []vecMember     `json:"baggage"`
	}
	mustUnmarshal(t, v.Input, &in)
	cfg := in.Propagator
	if len(cfg) == 0 {
		cfg = in.Propagators
	}
	p := propagatorOf(t, cfg)
	switch v.Operation {
	case "extract":
		var ex struct {
			vecContext
			Baggage  []vecMember       `json:"baggage"`
			Reinject map[string]string `json:"reinject"`
		}
		mustUnmarshal(t, v.Expected, &ex)
		ctx := p.Extract(context.Background(), orderedHeaders(t, in.Headers))
		sc, e := propagation.FromContext(ctx)
		if *ex.Valid != sc.IsValid() {
			t.Fatalf("valid = %v, want %v", sc.IsValid(), *ex.Valid)
		}
		if sc.IsValid() {
			got := vecContext{
				TraceID: sc.TraceID().String(), SpanID: sc.SpanID().String(),
				TraceFlags: hex.EncodeToString([]byte{byte(sc.TraceFlags())}),
				B3Debug:    e.B3Debug, JaegerDebug: e.JaegerDebug, XrayLineage: e.XrayLineage,
			}
			want := ex.vecContext
			if got.TraceID != want.TraceID || got.SpanID != want.SpanID || got.TraceFlags != want.TraceFlags ||
				got.B3Debug != want.B3Debug || got.JaegerDebug != want.JaegerDebug || got.XrayLineage != want.XrayLineage {
				t.Fatalf("extracted %+v, want %+v", got, want)
			}
			if !sc.IsRemote() {
				t.Fatal("extracted context is not remote")
			}
			if want.Tracestate != nil && e.Tracestate != *want.Tracestate {
				t.Fatalf("tracestate %q, want %q", e.Tracestate, *want.Tracestate)
			}
		}
		checkBaggage(t, propagation.BaggageFromContext(ctx), ex.Baggage)
		if ex.Reinject != nil {
			out := propagation.HeaderCarrier{}
			p.Inject(propagation.ContextWithBaggage(ctx, propagation.Baggage{}), out)
			checkHeaders(t, out, ex.Reinject)
		}
	case "inject":
		var ex struct {
			Headers map[string]string `json:"headers"`
		}
		mustUnmarshal(t, v.Expected, &ex)
		ctx := context.Background()
		if c := in.Context; c != nil {
			var cfg trace.SpanContextConfig
			if !id.ParseHex(cfg.TraceID[:], c.TraceID) || !id.ParseHex(cfg.SpanID[:], c.SpanID) {
				// An invalid context in an inject vector: it must inject nothing.
				cfg = trace.SpanContextConfig{}
			}
			f, _ := hex.DecodeString(c.TraceFlags)
			if len(f) == 1 {
				cfg.TraceFlags = trace.TraceFlags(f[0])
			}
			cfg.Remote = true
			ts := ""
			if c.Tracestate != nil {
				ts = *c.Tracestate
			}
			ctx = propagation.ContextWithRemote(ctx, trace.NewSpanContext(cfg), propagation.Extras{
				Tracestate: ts, B3Debug: c.B3Debug, JaegerDebug: c.JaegerDebug, XrayLineage: c.XrayLineage})
		}
		if len(in.Baggage) > 0 {
			var ms []propagation.Member
			for _, m := range in.Baggage {
				ms = append(ms, propagation.Member{Key: m.Key, Value: m.Value, Metadata: m.Metadata})
			}
			ctx = propagation.ContextWithBaggage(ctx, propagation.NewBaggage(ms...))
		}
		out := propagation.HeaderCarrier{}
		p.Inject(ctx, out)
		checkHeaders(t, out, ex.Headers)
	default:
		t.Fatalf("unknown operation %q", v.Operation)
	}
}

func checkBaggage(t *testing.T, b propagation.Baggage, want []vecMember) {
	t.Helper()
	got := []vecMember{}
	for _, m := range b.Members() {
		got = append(got, vecMember{m.Key, m.Value, m.Metadata})
	}
	if want == nil {
		want = []vecMember{}
	}
	g, _ := json.Marshal(got)
	w, _ := json.Marshal(want)
	if !bytes.Equal(g, w) {
		t.Fatalf("baggage %s, want %s", g, w)
	}
}

func checkHeaders(t *testing.T, got propagation.HeaderCarrier, want map[string]string) {
	t.Helper()
	g := map[string]string{}
	for k, vs := range got {
		if len(vs) != 1 {
			t.Fatalf("header %s set %d times", k, len(vs))
		}
		g[k] = vs[0]
	}
	if want == nil {
		want = map[string]string{}
	}
	gk, wk := keys(g), keys(want)
	gj, _ := json.Marshal(g)
	wj, _ := json.Marshal(want)
	if strings.Join(gk, ",") != strings.Join(wk, ",") || !bytes.Equal(gj, wj) {
		t.Fatalf("headers %s, want %s", gj, wj)
	}
}

func keys(m map[string]string) []string {
	ks := make([]string, 0, len(m))
	for k := range m {
		ks = append(ks, k)
	}
	sort.Strings(ks)
	return ks
}
