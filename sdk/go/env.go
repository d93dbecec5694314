package weft

import (
	"context"
	"fmt"
	"log"
	"net/url"
	"os"
	"strconv"
	"strings"
	"time"

	"go.opentelemetry.io/otel/attribute"

	"weft.dev/sdk/go/exporters/otlp"
	"weft.dev/sdk/go/sampling"
)

// applyEnv reads the standard variables:
//
//	OTEL_SDK_DISABLED, OTEL_SERVICE_NAME, OTEL_RESOURCE_ATTRIBUTES,
//	OTEL_TRACES_SAMPLER, OTEL_TRACES_SAMPLER_ARG,
//	OTEL_ATTRIBUTE_COUNT_LIMIT, OTEL_ATTRIBUTE_VALUE_LENGTH_LIMIT,
//	OTEL_SPAN_ATTRIBUTE_COUNT_LIMIT, OTEL_SPAN_ATTRIBUTE_VALUE_LENGTH_LIMIT,
//	OTEL_SPAN_EVENT_COUNT_LIMIT, OTEL_SPAN_LINK_COUNT_LIMIT,
//	OTEL_EVENT_ATTRIBUTE_COUNT_LIMIT, OTEL_LINK_ATTRIBUTE_COUNT_LIMIT,
//	OTEL_BSP_MAX_QUEUE_SIZE, OTEL_BSP_MAX_EXPORT_BATCH_SIZE, OTEL_BSP_SCHEDULE_DELAY,
//	OTEL_BSP_EXPORT_TIMEOUT, OTEL_TRACES_EXPORTER (otlp or none),
//	OTEL_EXPORTER_OTLP_{,TRACES_}{ENDPOINT,PROTOCOL,HEADERS,COMPRESSION,TIMEOUT,INSECURE,
//	CERTIFICATE,CLIENT_CERTIFICATE,CLIENT_KEY}.
//
// OTEL_PROPAGATORS is read by propagation.FromEnv.
func applyEnv(o *options) {
	env := func(k string) string { return strings.TrimSpace(os.Getenv(k)) }
	intVar := func(k string, dst *int) {
		if v := env(k); v != "" {
			if n, err := strconv.Atoi(v); err == nil {
				*dst = n
			} else {
				log.Printf("weft: %s=%q is not an integer; ignored", k, v)
			}
		}
	}
	msVar := func(k string, dst *time.Duration) {
		if v := env(k); v != "" {
			if n, err := strconv.Atoi(v); err == nil && n >= 0 {
				*dst = time.Duration(n) * time.Millisecond
			} else {
				log.Printf("weft: %s=%q is not a number of milliseconds; ignored", k, v)
			}
		}
	}
	if strings.EqualFold(env("OTEL_SDK_DISABLED"), "true") {
		o.sampler = sampling.AlwaysOff()
		o.exporter, o.otlp = nil, nil
		return
	}
	if v := env("OTEL_RESOURCE_ATTRIBUTES"); v != "" {
		for _, kv := range strings.Split(v, ",") {
			k, val, ok := strings.Cut(kv, "=")
			if !ok {
				continue
			}
			k, _ = url.PathUnescape(strings.TrimSpace(k))
			val, _ = url.PathUnescape(strings.TrimSpace(val))
			o.resource = append(o.resource, attribute.String(k, val))
		}
	}
	if v := env("OTEL_SERVICE_NAME"); v != "" {
		o.serviceName = v
	}
	if s, err := samplerFromEnv(env("OTEL_TRACES_SAMPLER"), env("OTEL_TRACES_SAMPLER_ARG"), o); err != nil {
		o.envErr = err
	} else if s != nil {
		o.sampler = s
	}
	intVar("OTEL_ATTRIBUTE_COUNT_LIMIT", &o.limits.AttributeCount)
	intVar("OTEL_ATTRIBUTE_VALUE_LENGTH_LIMIT", &o.limits.AttributeValueLength)
	intVar("OTEL_SPAN_ATTRIBUTE_COUNT_LIMIT", &o.limits.AttributeCount)
	intVar("OTEL_SPAN_ATTRIBUTE_VALUE_LENGTH_LIMIT", &o.limits.AttributeValueLength)
	intVar("OTEL_SPAN_EVENT_COUNT_LIMIT", &o.limits.EventCount)
	intVar("OTEL_SPAN_LINK_COUNT_LIMIT", &o.limits.LinkCount)
	intVar("OTEL_EVENT_ATTRIBUTE_COUNT_LIMIT", &o.limits.EventAttributeCount)
	intVar("OTEL_LINK_ATTRIBUTE_COUNT_LIMIT", &o.limits.LinkAttributeCount)
	// Sizes and the schedule delay must be positive: an invalid value keeps the default (a
	// negative size used to panic the export goroutine, a zero delay made it spin). An export
	// timeout of 0 means no timeout.
	posVar := func(k string, dst *int) {
		n := *dst
		intVar(k, &n)
		if n > 0 {
			*dst = n
		} else if n != *dst {
			log.Printf("weft: %s=%d is not positive; using %d", k, n, *dst)
		}
	}
	posVar("OTEL_BSP_MAX_QUEUE_SIZE", &o.queueSize)
	posVar("OTEL_BSP_MAX_EXPORT_BATCH_SIZE", &o.batchSize)
	delay := o.scheduleDelay
	msVar("OTEL_BSP_SCHEDULE_DELAY", &delay)
	if delay > 0 {
		o.scheduleDelay = delay
	} else {
		log.Printf("weft: OTEL_BSP_SCHEDULE_DELAY=0 is not positive; using %v", o.scheduleDelay)
	}
	if v := env("OTEL_BSP_EXPORT_TIMEOUT"); v != "" {
		if n, err := strconv.Atoi(v); err == nil && n >= 0 {
			o.exportTimeout = time.Duration(n) * time.Millisecond // 0: no timeout
		} else {
			log.Printf("weft: OTEL_BSP_EXPORT_TIMEOUT=%q is not a number of milliseconds; ignored", v)
		}
	}

	switch exp := env("OTEL_TRACES_EXPORTER"); exp {
	case "none":
		o.exporter, o.otlp = nil, nil
		return
	case "", "otlp":
	default:
		log.Printf("weft: OTEL_TRACES_EXPORTER=%q is not supported (otlp, none); using otlp", exp)
	}
	cfg := otlp.Config{}
	first := func(keys ...string) string {
		for _, k := range keys {
			if v := env(k); v != "" {
				return v
			}
		}
		return ""
	}
	cfg.Protocol = first("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "OTEL_EXPORTER_OTLP_PROTOCOL")
	if cfg.Protocol == "" {
		cfg.Protocol = otlp.HTTPProtobuf
	}
	if v := env("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"); v != "" {
		cfg.Endpoint = v
	} else if v := env("OTEL_EXPORTER_OTLP_ENDPOINT"); v != "" {
		cfg.Endpoint = v
		if cfg.Protocol == otlp.HTTPProtobuf {
			cfg.Endpoint = strings.TrimRight(v, "/") + "/v1/traces"
		}
	}
	if v := first("OTEL_EXPORTER_OTLP_TRACES_HEADERS", "OTEL_EXPORTER_OTLP_HEADERS"); v != "" {
		cfg.Headers = map[string]string{}
		for _, kv := range strings.Split(v, ",") {
			if k, val, ok := strings.Cut(kv, "="); ok {
				k, _ = url.PathUnescape(strings.TrimSpace(k))
				val, _ = url.PathUnescape(strings.TrimSpace(val))
				cfg.Headers[k] = val
			}
		}
	}
	cfg.Compression = first("OTEL_EXPORTER_OTLP_TRACES_COMPRESSION", "OTEL_EXPORTER_OTLP_COMPRESSION")
	if v := first("OTEL_EXPORTER_OTLP_TRACES_TIMEOUT", "OTEL_EXPORTER_OTLP_TIMEOUT"); v != "" {
		if n, err := strconv.Atoi(v); err == nil && n > 0 {
			cfg.Timeout = time.Duration(n) * time.Millisecond
		}
	}
	cfg.CertificateFile = first("OTEL_EXPORTER_OTLP_TRACES_CERTIFICATE", "OTEL_EXPORTER_OTLP_CERTIFICATE")
	cfg.ClientCertificateFile = first("OTEL_EXPORTER_OTLP_TRACES_CLIENT_CERTIFICATE", "OTEL_EXPORTER_OTLP_CLIENT_CERTIFICATE")
	cfg.ClientKeyFile = first("OTEL_EXPORTER_OTLP_TRACES_CLIENT_KEY", "OTEL_EXPORTER_OTLP_CLIENT_KEY")
	if v := first("OTEL_EXPORTER_OTLP_TRACES_INSECURE", "OTEL_EXPORTER_OTLP_INSECURE"); v != "" {
		cfg.Insecure = strings.EqualFold(v, "true")
		if !cfg.Insecure && !strings.EqualFold(v, "false") {
			log.Printf("weft: OTEL_EXPORTER_OTLP_INSECURE=%q is not true or false; using false", v)
		}
	}
	o.otlp, o.exporter = &cfg, nil
}

func samplerFromEnv(name, arg string, o *options) (sampling.Sampler, error) {
	ratio := func(def float64) float64 {
		if arg == "" {
			return def
		}
		f, err := strconv.ParseFloat(arg, 64)
		if err != nil {
			log.Printf("weft: OTEL_TRACES_SAMPLER_ARG=%q is not a number; using %g", arg, def)
			return def
		}
		return f
	}
	pb := func(root sampling.Sampler) sampling.Sampler {
		return sampling.ParentBased(root, sampling.ParentBasedConfig{})
	}
	jaeger := func() sampling.Sampler {
		cfg := sampling.JaegerRemoteConfig{}
		for _, kv := range strings.Split(arg, ",") {
			k, v, _ := strings.Cut(strings.TrimSpace(kv), "=")
			switch k {
			case "endpoint":
				cfg.Endpoint = v
			case "pollingIntervalMs":
				if n, err := strconv.Atoi(v); err == nil {
					cfg.PollingInterval = time.Duration(n) * time.Millisecond
				}
			case "initialSamplingRate":
				if f, err := strconv.ParseFloat(v, 64); err == nil {
					cfg.InitialSampler = sampling.TraceIDRatio(f)
				}
			}
		}
		// The service name is known once every option has run: NewTracerProvider starts it.
		l := &lazySampler{start: func(service string) (sampling.Sampler, func(context.Context) error) {
			cfg.ServiceName = service
			j := sampling.NewJaegerRemote(cfg)
			return j, j.Shutdown
		}}
		o.lazy = append(o.lazy, l)
		return l
	}
	clock := func() int64 { return monoNow() }
	if name != "" {
		o.lazy = nil // a sampler set earlier is replaced
	}
	switch name {
	case "":
		return nil, nil
	case "always_on":
		return sampling.AlwaysOn(), nil
	case "always_off":
		return sampling.AlwaysOff(), nil
	case "traceidratio":
		return sampling.TraceIDRatio(ratio(1)), nil
	case "parentbased_always_on":
		return pb(sampling.AlwaysOn()), nil
	case "parentbased_always_off":
		return pb(sampling.AlwaysOff()), nil
	case "parentbased_traceidratio":
		return pb(sampling.TraceIDRatio(ratio(1))), nil
	case "consistent_probability":
		return sampling.ConsistentProbability(ratio(1)), nil
	case "parentbased_consistent_probability":
		return pb(sampling.ConsistentProbability(ratio(1))), nil
	case "rate_limiting":
		return sampling.NewRateLimiter(ratio(100), clock), nil
	case "parentbased_rate_limiting":
		return pb(sampling.NewRateLimiter(ratio(100), clock)), nil
	case "jaeger_remote":
		return jaeger(), nil
	case "parentbased_jaeger_remote":
		return pb(jaeger()), nil
	}
	return nil, fmt.Errorf("weft: OTEL_TRACES_SAMPLER=%q is not a known sampler", name)
}

// lazySampler is a sampler built by NewTracerProvider once every option has run (the Jaeger
// remote sampler needs the final service name).
type lazySampler struct {
	start func(service string) (sampling.Sampler, func(context.Context) error)
	s     sampling.Sampler
}

func (l *lazySampler) ShouldSample(p sampling.Params) sampling.Result { return l.s.ShouldSample(p) }

func (l *lazySampler) Description() string {
	if l.s == nil {
		return "JaegerRemoteSampler"
	}
	return l.s.Description()
}
