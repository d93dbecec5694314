package sampling

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log"
	"net/http"
	"net/url"
	"sync"
	"sync/atomic"
	"time"
)

// Strategy is a parsed Jaeger sampling strategy (api_v2 SamplingStrategyResponse, JSON form).
type Strategy struct {
	// Kind is "operation", "probabilistic" or "rate_limiting".
	Kind               string
	SamplingRate       float64
	MaxTracesPerSec    float64
	DefaultProbability float64
	DefaultLowerBound  float64
	PerOperation       []OperationStrategy
}

// OperationStrategy is one perOperationStrategies entry.
type OperationStrategy struct {
	Operation    string
	SamplingRate float64
}

func clamp01(f float64) float64 { return min(1, max(0, f)) }

// number reads an optional JSON number member (missing is 0).
func number(m map[string]json.RawMessage, key string) (float64, error) {
	raw, ok := m[key]
	if !ok {
		return 0, nil
	}
	var f float64
	if err := json.Unmarshal(raw, &f); err != nil || bytes.HasPrefix(bytes.TrimSpace(raw), []byte(`"`)) {
		return 0, fmt.Errorf("%s is not a number: %s", key, raw)
	}
	return f, nil
}

func object(m map[string]json.RawMessage, key string) (map[string]json.RawMessage, bool, error) {
	raw, ok := m[key]
	if !ok || string(bytes.TrimSpace(raw)) == "null" {
		return nil, false, nil
	}
	var o map[string]json.RawMessage
	if err := json.Unmarshal(raw, &o); err != nil {
		return nil, false, fmt.Errorf("%s is not an object", key)
	}
	return o, true, nil
}

// ParseStrategy parses a strategy response body (spec/sampling.md "Strategy JSON").
func ParseStrategy(body []byte) (*Strategy, error) {
	var top map[string]json.RawMessage
	if err := json.Unmarshal(body, &top); err != nil {
		return nil, fmt.Errorf("strategy is not a JSON object: %w", err)
	}
	if raw, ok := top["strategyType"]; ok {
		var s string
		var n float64
		if json.Unmarshal(raw, &s) != nil && json.Unmarshal(raw, &n) != nil {
			return nil, errors.New("strategyType is neither a string nor a number")
		}
	}
	prob, hasProb, err := object(top, "probabilisticSampling")
	if err != nil {
		return nil, err
	}
	rl, hasRL, err := object(top, "rateLimitingSampling")
	if err != nil {
		return nil, err
	}
	ops, hasOps, err := object(top, "operationSampling")
	if err != nil {
		return nil, err
	}
	st := &Strategy{}
	if hasProb {
		if st.SamplingRate, err = number(prob, "samplingRate"); err != nil {
			return nil, err
		}
		st.SamplingRate = clamp01(st.SamplingRate)
	}
	if hasRL {
		if st.MaxTracesPerSec, err = number(rl, "maxTracesPerSecond"); err != nil {
			return nil, err
		}
	}
	switch {
	case hasOps:
		st.Kind = "operation"
		if st.DefaultProbability, err = number(ops, "defaultSamplingProbability"); err != nil {
			return nil, err
		}
		st.DefaultProbability = clamp01(st.DefaultProbability)
		if st.DefaultLowerBound, err = number(ops, "defaultLowerBoundTracesPerSecond"); err != nil {
			return nil, err
		}
		if raw, ok := ops["perOperationStrategies"]; ok && string(bytes.TrimSpace(raw)) != "null" {
			var entries []map[string]json.RawMessage
			if err := json.Unmarshal(raw, &entries); err != nil {
				return nil, errors.New("perOperationStrategies is not an array of objects")
			}
			for _, e := range entries {
				var op OperationStrategy
				if err := json.Unmarshal(e["operation"], &op.Operation); err != nil || e["operation"] == nil {
					return nil, errors.New("perOperationStrategies entry without a string operation")
				}
				p, ok, err := object(e, "probabilisticSampling")
				if err != nil {
					return nil, err
				}
				if ok {
					if op.SamplingRate, err = number(p, "samplingRate"); err != nil {
						return nil, err
					}
					op.SamplingRate = clamp01(op.SamplingRate)
				}
				st.PerOperation = append(st.PerOperation, op)
			}
		}
	case hasProb:
		st.Kind = "probabilistic"
	case hasRL:
		st.Kind = "rate_limiting"
	default:
		return nil, errors.New("strategy has no probabilisticSampling, rateLimitingSampling or operationSampling")
	}
	return st, nil
}

// Spec describes the sampler a strategy selects for one operation.
type Spec struct {
	Type           string // trace_id_ratio, rate_limiting, guaranteed_throughput
	Ratio          float64
	SpansPerSecond float64
	LowerBound     float64
}

// SpecFor returns the sampler the strategy selects for operation name; tracked says whether
// the operation is (or would become) tracked under the max-operations limit.
func (st *Strategy) SpecFor(name string, tracked bool) Spec {
	switch st.Kind {
	case "probabilistic":
		return Spec{Type: "trace_id_ratio", Ratio: st.SamplingRate}
	case "rate_limiting":
		return Spec{Type: "rate_limiting", SpansPerSecond: st.MaxTracesPerSec}
	}
	for _, op := range st.PerOperation {
		if op.Operation == name {
			return Spec{Type: "guaranteed_throughput", Ratio: op.SamplingRate, LowerBound: st.DefaultLowerBound}
		}
	}
	if tracked {
		return Spec{Type: "guaranteed_throughput", Ratio: st.DefaultProbability, LowerBound: st.DefaultLowerBound}
	}
	return Spec{Type: "trace_id_ratio", Ratio: st.DefaultProbability}
}

type guaranteed struct {
	spec  Spec
	ratio Sampler
	rl    *RateLimiter
}

func (g *guaranteed) ShouldSample(p Params) Result {
	if r := g.ratio.ShouldSample(p); r.Decision == RecordAndSample {
		g.rl.Take()
		return r
	}
	return g.rl.ShouldSample(p)
}

func (g *guaranteed) Description() string {
	return fmt.Sprintf("GuaranteedThroughput{%g,%g}", g.spec.Ratio, g.spec.LowerBound)
}

func build(spec Spec, clock Clock) Sampler {
	switch spec.Type {
	case "trace_id_ratio":
		return TraceIDRatio(spec.Ratio)
	case "rate_limiting":
		return NewRateLimiter(spec.SpansPerSecond, clock)
	}
	return &guaranteed{spec: spec, ratio: TraceIDRatio(spec.Ratio), rl: NewRateLimiter(spec.LowerBound, clock)}
}

// JaegerRemoteConfig configures JaegerRemote; zero fields take the defaults of spec/sampling.md.
type JaegerRemoteConfig struct {
	Endpoint        string
	PollingInterval time.Duration
	InitialSampler  Sampler
	ServiceName     string
	MaxOperations   int
	Clock           Clock
	Client          *http.Client
}

type remoteState struct {
	st   *Strategy
	mu   sync.Mutex
	ops  map[string]Sampler
	opSp map[string]Spec
	top  Sampler
}

// JaegerRemote is a sampler whose strategy is polled from a Jaeger sampling endpoint.
type JaegerRemote struct {
	cfg    JaegerRemoteConfig
	state  atomic.Pointer[remoteState]
	stop   chan struct{}
	done   chan struct{}
	ctx    context.Context // cancelled by Close/Shutdown: interrupts a fetch under way
	cancel context.CancelFunc
	once   sync.Once
}

// NewJaegerRemote starts polling (a background goroutine) and returns the sampler. Close
// stops the polling.
func NewJaegerRemote(cfg JaegerRemoteConfig) *JaegerRemote {
	if cfg.Endpoint == "" {
		cfg.Endpoint = "http://localhost:5778/sampling"
	}
	if cfg.PollingInterval <= 0 {
		cfg.PollingInterval = 60 * time.Second
	}
	if cfg.InitialSampler == nil {
		cfg.InitialSampler = TraceIDRatio(0.001)
	}
	if cfg.MaxOperations <= 0 {
		cfg.MaxOperations = 2000
	}
	if cfg.Clock == nil {
		start := time.Now()
		cfg.Clock = func() int64 { return int64(time.Since(start)) }
	}
	if cfg.Client == nil {
		cfg.Client = &http.Client{Timeout: 10 * time.Second}
	}
	j := &JaegerRemote{cfg: cfg, stop: make(chan struct{}), done: make(chan struct{})}
	j.ctx, j.cancel = context.WithCancel(context.Background())
	go j.poll()
	return j
}

// Apply installs a strategy, keeping the state of samplers whose parameters did not change.
func (j *JaegerRemote) Apply(st *Strategy) {
	old := j.state.Load()
	ns := &remoteState{st: st, ops: map[string]Sampler{}, opSp: map[string]Spec{}}
	if st.Kind != "operation" {
		spec := st.SpecFor("", false)
		if old != nil && old.top != nil && old.st.Kind == st.Kind && old.st.SpecFor("", false) == spec {
			ns.top = old.top
		} else {
			ns.top = build(spec, j.cfg.Clock)
		}
	} else if old != nil {
		old.mu.Lock()
		for name, sp := range old.opSp {
			spec := st.SpecFor(name, true)
			if spec == sp {
				ns.ops[name], ns.opSp[name] = old.ops[name], sp
			} else {
				ns.ops[name], ns.opSp[name] = build(spec, j.cfg.Clock), spec
			}
		}
		old.mu.Unlock()
	}
	j.state.Store(ns)
}

// ShouldSample asks the sampler the current strategy selects for the span's name.
func (j *JaegerRemote) ShouldSample(p Params) Result {
	s := j.state.Load()
	if s == nil {
		return j.cfg.InitialSampler.ShouldSample(p)
	}
	if s.top != nil {
		return s.top.ShouldSample(p)
	}
	s.mu.Lock()
	smp, ok := s.ops[p.Name]
	if !ok {
		tracked := len(s.ops) < j.cfg.MaxOperations
		spec := s.st.SpecFor(p.Name, tracked)
		smp = build(spec, j.cfg.Clock)
		if tracked || spec.Type == "guaranteed_throughput" {
			s.ops[p.Name], s.opSp[p.Name] = smp, spec
		}
	}
	s.mu.Unlock()
	return smp.ShouldSample(p)
}

// Description names the sampler.
func (j *JaegerRemote) Description() string { return "JaegerRemoteSampler{" + j.cfg.Endpoint + "}" }

// Close stops polling; a fetch under way is cancelled, so Close returns promptly.
func (j *JaegerRemote) Close() { _ = j.Shutdown(context.Background()) }

// Shutdown stops polling, cancelling a fetch under way, and waits for the polling goroutine
// until ctx ends.
func (j *JaegerRemote) Shutdown(ctx context.Context) error {
	j.once.Do(func() {
		j.cancel()
		close(j.stop)
	})
	select {
	case <-j.done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (j *JaegerRemote) poll() {
	defer close(j.done)
	var lastLog time.Time
	t := time.NewTicker(j.cfg.PollingInterval)
	defer t.Stop()
	for {
		if err := j.fetch(); err != nil && time.Since(lastLog) > time.Minute {
			lastLog = time.Now()
			log.Printf("weft: jaeger remote sampling: %v", err)
		}
		select {
		case <-j.stop:
			return
		case <-t.C:
		}
	}
}

func (j *JaegerRemote) fetch() error {
	u := j.cfg.Endpoint + "?service=" + url.QueryEscape(j.cfg.ServiceName)
	ctx, cancel := context.WithTimeout(j.ctx, 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return err
	}
	resp, err := j.cfg.Client.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 4<<20))
	if err != nil {
		return err
	}
	if resp.StatusCode/100 != 2 {
		return fmt.Errorf("GET %s: status %d", u, resp.StatusCode)
	}
	st, err := ParseStrategy(body)
	if err != nil {
		return fmt.Errorf("GET %s: %w", u, err)
	}
	j.Apply(st)
	return nil
}
