package weft_test

import (
	"encoding/hex"
	"encoding/json"
	"fmt"
	"strconv"
	"testing"

	"go.opentelemetry.io/otel/trace"

	"weft.dev/sdk/go/id"
	"weft.dev/sdk/go/sampling"
)

func init() { runners["sampling.json"] = runSampling }

type samplerConfig struct {
	Type                   string         `json:"type"`
	Ratio                  float64        `json:"ratio"`
	Probability            float64        `json:"probability"`
	Root                   *samplerConfig `json:"root"`
	RemoteParentSampled    *samplerConfig `json:"remote_parent_sampled"`
	RemoteParentNotSampled *samplerConfig `json:"remote_parent_not_sampled"`
	LocalParentSampled     *samplerConfig `json:"local_parent_sampled"`
	LocalParentNotSampled  *samplerConfig `json:"local_parent_not_sampled"`
}

func buildSampler(t *testing.T, c *samplerConfig) sampling.Sampler {
	t.Helper()
	if c == nil {
		return nil
	}
	switch c.Type {
	case "always_on":
		return sampling.AlwaysOn()
	case "always_off":
		return sampling.AlwaysOff()
	case "trace_id_ratio":
		return sampling.TraceIDRatio(c.Ratio)
	case "consistent_probability":
		return sampling.ConsistentProbability(c.Probability)
	case "parent_based":
		return sampling.ParentBased(buildSampler(t, c.Root), sampling.ParentBasedConfig{
			RemoteParentSampled: buildSampler(t, c.RemoteParentSampled), RemoteParentNotSampled: buildSampler(t, c.RemoteParentNotSampled),
			LocalParentSampled: buildSampler(t, c.LocalParentSampled), LocalParentNotSampled: buildSampler(t, c.LocalParentNotSampled)})
	}
	t.Fatalf("unknown sampler %q", c.Type)
	return nil
}

func runSampling(t *testing.T, v vector) {
	switch v.Operation {
	case "trace_id_ratio_bound":
		var in struct{ Ratio float64 }
		var ex struct {
			Bound     string `json:"bound"`
			SampleAll bool   `json:"sample_all"`
		}
		mustUnmarshal(t, v.Input, &in)
		mustUnmarshal(t, v.Expected, &ex)
		b, all := sampling.RatioBound(in.Ratio)
		if all != ex.SampleAll || !all && fmt.Sprintf("%016x", b) != ex.Bound {
			t.Fatalf("bound %016x all=%v, want %s all=%v", b, all, ex.Bound, ex.SampleAll)
		}
	case "threshold_encode":
		var in struct{ Probability float64 }
		var ex struct{ Th, Threshold string }
		mustUnmarshal(t, v.Input, &in)
		mustUnmarshal(t, v.Expected, &ex)
		th, thr := sampling.EncodeThreshold(in.Probability)
		if th != ex.Th || fmt.Sprintf("%014x", thr) != ex.Threshold {
			t.Fatalf("th %s %014x, want %s %s", th, thr, ex.Th, ex.Threshold)
		}
	case "should_sample":
		var in struct {
			Sampler samplerConfig `json:"sampler"`
			TraceID string        `json:"trace_id"`
			Name    string        `json:"name"`
			Parent  *struct {
				TraceID    string `json:"trace_id"`
				SpanID     string `json:"span_id"`
				TraceFlags string `json:"trace_flags"`
				IsRemote   bool   `json:"is_remote"`
				Tracestate string `json:"tracestate"`
			} `json:"parent"`
		}
		var ex struct{ Decision, Tracestate string }
		mustUnmarshal(t, v.Input, &in)
		mustUnmarshal(t, v.Expected, &ex)
		p := sampling.Params{Name: in.Name}
		if !id.ParseHex(p.TraceID[:], in.TraceID) {
			t.Fatalf("trace id %q", in.TraceID)
		}
		if in.Parent != nil {
			var cfg trace.SpanContextConfig
			id.ParseHex(cfg.TraceID[:], in.Parent.TraceID)
			id.ParseHex(cfg.SpanID[:], in.Parent.SpanID)
			f, _ := hex.DecodeString(in.Parent.TraceFlags)
			cfg.TraceFlags = trace.TraceFlags(f[0])
			cfg.Remote = in.Parent.IsRemote
			p.Parent = trace.NewSpanContext(cfg)
			p.ParentTracestate = in.Parent.Tracestate
		}
		r := buildSampler(t, &in.Sampler).ShouldSample(p)
		if r.Decision.String() != ex.Decision || r.Tracestate != ex.Tracestate {
			t.Fatalf("%s %q, want %s %q", r.Decision, r.Tracestate, ex.Decision, ex.Tracestate)
		}
	case "rate_limit_sequence":
		var in struct {
			SpansPerSecond float64  `json:"spans_per_second"`
			CreatedNs      string   `json:"created_ns"`
			CallsNs        []string `json:"calls_ns"`
		}
		var ex struct{ Sampled []bool }
		mustUnmarshal(t, v.Input, &in)
		mustUnmarshal(t, v.Expected, &ex)
		now, _ := strconv.ParseInt(in.CreatedNs, 10, 64)
		rl := sampling.NewRateLimiter(in.SpansPerSecond, func() int64 { return now })
		for i, c := range in.CallsNs {
			now, _ = strconv.ParseInt(c, 10, 64)
			got := rl.ShouldSample(sampling.Params{}).Decision == sampling.RecordAndSample
			if got != ex.Sampled[i] {
				t.Fatalf("call %d at %s: sampled %v, want %v", i, c, got, ex.Sampled[i])
			}
		}
	case "jaeger_remote_resolve":
		var in struct {
			Body       string   `json:"body"`
			Operations []string `json:"operations"`
		}
		var ex struct {
			Valid    bool `json:"valid"`
			Samplers map[string]struct {
				Type           string  `json:"type"`
				Ratio          float64 `json:"ratio"`
				SpansPerSecond float64 `json:"spans_per_second"`
				LowerBound     float64 `json:"lower_bound"`
			} `json:"samplers"`
		}
		mustUnmarshal(t, v.Input, &in)
		mustUnmarshal(t, v.Expected, &ex)
		st, err := sampling.ParseStrategy([]byte(in.Body))
		if (err == nil) != ex.Valid {
			t.Fatalf("valid = %v (%v), want %v", err == nil, err, ex.Valid)
		}
		if err != nil {
			return
		}
		for _, op := range in.Operations {
			got := st.SpecFor(op, true)
			want := ex.Samplers[op]
			if got.Type != want.Type || got.Ratio != want.Ratio || got.SpansPerSecond != want.SpansPerSecond || got.LowerBound != want.LowerBound {
				j, _ := json.Marshal(want)
				t.Fatalf("%s: %+v, want %s", op, got, j)
			}
		}
	default:
		t.Fatalf("unknown operation %q", v.Operation)
	}
}
