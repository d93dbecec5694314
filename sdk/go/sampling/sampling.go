// Package sampling implements the weft samplers (spec/sampling.md): AlwaysOn, AlwaysOff,
// TraceIDRatio, ConsistentProbability (OTEP 235), ParentBased, RateLimiting and JaegerRemote.
package sampling

import (
	"encoding/binary"
	"fmt"
	"math"
	"strconv"
	"strings"
	"sync"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"weft.dev/sdk/go/propagation"
)

// Decision is a sampling decision.
type Decision int

const (
	// Drop records nothing.
	Drop Decision = iota
	// RecordOnly records without sampling (no weft sampler returns it).
	RecordOnly
	// RecordAndSample records and exports.
	RecordAndSample
)

func (d Decision) String() string {
	switch d {
	case Drop:
		return "DROP"
	case RecordOnly:
		return "RECORD_ONLY"
	}
	return "RECORD_AND_SAMPLE"
}

// Params is what a sampler is asked about a new span.
type Params struct {
	// Parent is the parent span context; invalid for a root span.
	Parent trace.SpanContext
	// ParentTracestate is the parent's tracestate in canonical form ("" for a root).
	ParentTracestate string
	TraceID          trace.TraceID
	Name             string
	Kind             trace.SpanKind
	Attributes       []attribute.KeyValue
	Links            []trace.Link
}

// Result is a sampler's answer: the decision and the new span's tracestate.
type Result struct {
	Decision   Decision
	Tracestate string
}

// Sampler decides whether a new span is sampled. Implementations are safe for concurrent use.
type Sampler interface {
	ShouldSample(p Params) Result
	Description() string
}

type alwaysOn struct{}

// AlwaysOn samples every span.
func AlwaysOn() Sampler { return alwaysOn{} }

func (alwaysOn) ShouldSample(p Params) Result {
	return Result{RecordAndSample, p.ParentTracestate}
}
func (alwaysOn) Description() string { return "AlwaysOnSampler" }

type alwaysOff struct{}

// AlwaysOff samples nothing.
func AlwaysOff() Sampler { return alwaysOff{} }

func (alwaysOff) ShouldSample(p Params) Result { return Result{Drop, p.ParentTracestate} }
func (alwaysOff) Description() string          { return "AlwaysOffSampler" }

// RatioBound returns B = trunc(r × 2^63) and whether r samples everything.
func RatioBound(r float64) (bound uint64, all bool) {
	if r >= 1 {
		return 0, true
	}
	if !(r > 0) {
		return 0, false
	}
	return uint64(r * 9223372036854775808.0), false
}

type traceIDRatio struct {
	ratio float64
	bound uint64
	all   bool
}

// TraceIDRatio samples by the low 64 bits of the trace ID (the OTel Go and Rust rule).
func TraceIDRatio(r float64) Sampler {
	b, all := RatioBound(r)
	return &traceIDRatio{ratio: r, bound: b, all: all}
}

func (s *traceIDRatio) ShouldSample(p Params) Result {
	x := binary.BigEndian.Uint64(p.TraceID[8:]) >> 1
	if s.all || x < s.bound {
		return Result{RecordAndSample, eraseTh(p.ParentTracestate)}
	}
	return Result{Drop, p.ParentTracestate}
}

func (s *traceIDRatio) Description() string {
	return "TraceIdRatioBased{" + strconv.FormatFloat(s.ratio, 'g', -1, 64) + "}"
}

// ---- consistent probability

// EncodeThreshold converts a probability to its `th` value and 56-bit threshold (precision 4).
func EncodeThreshold(p float64) (th string, threshold uint64) {
	if p >= 1 {
		return "0", 0
	}
	_, e := math.Frexp(p)
	prec := 4 + int(math.Floor(float64(-e)/4))
	prec = max(1, min(12, prec))
	q := 2.0 - p
	q += math.Ldexp(1, -4*prec-1)
	var digits string
	if q >= 2.0 {
		digits = "fffffffffffff"
	} else {
		frac := math.Float64bits(q) & (1<<52 - 1)
		digits = fmt.Sprintf("%013x", frac)
	}
	th = strings.TrimRight(digits[:prec], "0")
	if th == "" {
		th = "0"
	}
	threshold, _ = ParseThreshold(th)
	return th, threshold
}

// ParseThreshold reads a `th` value: 1 to 14 hex digits, padded with zeros to 14.
func ParseThreshold(th string) (uint64, bool) {
	if len(th) < 1 || len(th) > 14 {
		return 0, false
	}
	v, err := strconv.ParseUint(th+strings.Repeat("0", 14-len(th)), 16, 64)
	return v, err == nil
}

// otSubkey returns the first `key:` piece of the ot member's value.
func otSubkey(ot, key string) (string, bool) {
	for _, piece := range strings.Split(ot, ";") {
		if strings.HasPrefix(piece, key+":") {
			return piece[len(key)+1:], true
		}
	}
	return "", false
}

func setOt(ts, newOt, oldOt string, hadOt bool) string {
	if hadOt && newOt == oldOt {
		return ts
	}
	if len(newOt) > 256 {
		return ts
	}
	return propagation.TracestateSet(ts, "ot", newOt)
}

// setTh sets the th sub-key of the ot member (spec/sampling.md "The ot member").
func setTh(ts, th string) string {
	old, had := propagation.TracestateGet(ts, "ot")
	pieces := []string{"th:" + th}
	if had {
		for _, piece := range strings.Split(old, ";") {
			if !strings.HasPrefix(piece, "th:") {
				pieces = append(pieces, piece)
			}
		}
	}
	return setOt(ts, strings.Join(pieces, ";"), old, had)
}

// eraseTh removes the th sub-key of the ot member.
func eraseTh(ts string) string {
	if ts == "" || !strings.Contains(ts, "th:") {
		return ts
	}
	old, had := propagation.TracestateGet(ts, "ot")
	if !had {
		return ts
	}
	var pieces []string
	for _, piece := range strings.Split(old, ";") {
		if !strings.HasPrefix(piece, "th:") {
			pieces = append(pieces, piece)
		}
	}
	return setOt(ts, strings.Join(pieces, ";"), old, had)
}

// randomness returns R: the ot rv sub-key when valid, else the low 56 bits of the trace ID.
func randomness(ts string, tid trace.TraceID) uint64 {
	if ot, ok := propagation.TracestateGet(ts, "ot"); ok {
		if rv, ok := otSubkey(ot, "rv"); ok && len(rv) == 14 {
			if v, err := strconv.ParseUint(rv, 16, 64); err == nil {
				return v
			}
		}
	}
	return binary.BigEndian.Uint64(tid[8:]) & (1<<56 - 1)
}

type consistent struct {
	p         float64
	th        string
	threshold uint64
	off       bool
}

// ConsistentProbability samples with probability p consistently across a trace (OTEP 235).
func ConsistentProbability(p float64) Sampler {
	if math.IsNaN(p) || p <= 0 {
		return &consistent{p: p, off: true}
	}
	th, t := EncodeThreshold(min(p, 1))
	return &consistent{p: p, th: th, threshold: t}
}

func (s *consistent) ShouldSample(p Params) Result {
	if s.off {
		return Result{Drop, p.ParentTracestate}
	}
	if randomness(p.ParentTracestate, p.TraceID) >= s.threshold {
		return Result{RecordAndSample, setTh(p.ParentTracestate, s.th)}
	}
	return Result{Drop, p.ParentTracestate}
}

func (s *consistent) Description() string {
	return "ConsistentProbability{" + strconv.FormatFloat(s.p, 'g', -1, 64) + "}"
}

// ---- parent based

// ParentBasedConfig holds ParentBased's delegates; nil slots take their defaults.
type ParentBasedConfig struct {
	RemoteParentSampled, RemoteParentNotSampled Sampler
	LocalParentSampled, LocalParentNotSampled   Sampler
}

type parentBased struct {
	root                                             Sampler
	remoteSampled, remoteNot, localSampled, localNot Sampler
}

// ParentBased follows the parent's decision, asking root for root spans.
func ParentBased(root Sampler, cfg ParentBasedConfig) Sampler {
	or := func(s, d Sampler) Sampler {
		if s == nil {
			return d
		}
		return s
	}
	return &parentBased{root, or(cfg.RemoteParentSampled, AlwaysOn()), or(cfg.RemoteParentNotSampled, AlwaysOff()),
		or(cfg.LocalParentSampled, AlwaysOn()), or(cfg.LocalParentNotSampled, AlwaysOff())}
}

func (s *parentBased) ShouldSample(p Params) Result {
	var d Sampler
	switch {
	case !p.Parent.IsValid():
		d = s.root
	case p.Parent.IsRemote() && p.Parent.IsSampled():
		d = s.remoteSampled
	case p.Parent.IsRemote():
		d = s.remoteNot
	case p.Parent.IsSampled():
		d = s.localSampled
	default:
		d = s.localNot
	}
	r := d.ShouldSample(p)
	if r.Decision == RecordAndSample && r.Tracestate != "" && strings.Contains(r.Tracestate, "th:") {
		if ot, ok := propagation.TracestateGet(r.Tracestate, "ot"); ok {
			if th, ok := otSubkey(ot, "th"); ok {
				if t, ok := ParseThreshold(th); ok && randomness(r.Tracestate, p.TraceID) < t {
					r.Tracestate = eraseTh(r.Tracestate)
				}
			}
		}
	}
	return r
}

func (s *parentBased) Description() string {
	return fmt.Sprintf("ParentBased{root:%s,remoteParentSampled:%s,remoteParentNotSampled:%s,localParentSampled:%s,localParentNotSampled:%s}",
		s.root.Description(), s.remoteSampled.Description(), s.remoteNot.Description(), s.localSampled.Description(), s.localNot.Description())
}

// ---- rate limiting

// Clock returns monotonic integer nanoseconds.
type Clock func() int64

// RateLimiter is the Jaeger token bucket (spec/sampling.md "RateLimiting").
type RateLimiter struct {
	mu         sync.Mutex
	rate, max  float64
	balance    float64
	last       int64
	clock      Clock
	off        bool
	rateForDsc float64
}

// NewRateLimiter returns a bucket of rate spans per second created at clock().
func NewRateLimiter(rate float64, clock Clock) *RateLimiter {
	r := &RateLimiter{rateForDsc: rate, clock: clock}
	if math.IsNaN(rate) || rate <= 0 {
		r.off = true
		return r
	}
	r.rate, r.max = rate, math.Max(1, rate)
	r.balance, r.last = r.max, clock()
	return r
}

// Take takes one token if there is one.
func (r *RateLimiter) Take() bool {
	if r.off {
		return false
	}
	now := r.clock()
	r.mu.Lock()
	defer r.mu.Unlock()
	if now > r.last {
		elapsed := float64(now-r.last) / 1e9
		r.balance = math.Min(r.max, r.balance+elapsed*r.rate)
		r.last = now
	}
	if r.balance >= 1.0 {
		r.balance -= 1.0
		return true
	}
	return false
}

// ShouldSample samples when a token is available.
func (r *RateLimiter) ShouldSample(p Params) Result {
	if r.Take() {
		return Result{RecordAndSample, eraseTh(p.ParentTracestate)}
	}
	return Result{Drop, p.ParentTracestate}
}

// Description names the sampler.
func (r *RateLimiter) Description() string {
	return "RateLimitingSampler{" + strconv.FormatFloat(r.rateForDsc, 'g', -1, 64) + "}"
}
