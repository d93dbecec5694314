package weft

import (
	"context"
	"testing"
	"time"

	"weft.dev/sdk/go/export"
)

type deadlineExporter struct{ deadlines chan bool }

func (d *deadlineExporter) Export(ctx context.Context, _ *export.Resource, _ []*export.SpanData) error {
	_, ok := ctx.Deadline()
	d.deadlines <- ok
	return ctx.Err()
}

func (d *deadlineExporter) Shutdown(context.Context) error { return nil }

// Invalid OTEL_BSP_* values keep the defaults (sizes and delay must be positive), a batch size
// above the queue size is clamped, and an export timeout of 0 means no timeout.
func TestBSPEnvironmentIsValidated(t *testing.T) {
	for _, c := range []struct {
		name, key, value         string
		queue, batch             int
		delay, timeout           time.Duration
		exportHasDeadlineWithEnv bool
	}{
		{"negative queue", "OTEL_BSP_MAX_QUEUE_SIZE", "-5", 2048, 512, 5 * time.Second, 30 * time.Second, true},
		{"zero queue", "OTEL_BSP_MAX_QUEUE_SIZE", "0", 2048, 512, 5 * time.Second, 30 * time.Second, true},
		{"small queue", "OTEL_BSP_MAX_QUEUE_SIZE", "100", 100, 100, 5 * time.Second, 30 * time.Second, true},
		{"negative batch", "OTEL_BSP_MAX_EXPORT_BATCH_SIZE", "-1", 2048, 512, 5 * time.Second, 30 * time.Second, true},
		{"zero batch", "OTEL_BSP_MAX_EXPORT_BATCH_SIZE", "0", 2048, 512, 5 * time.Second, 30 * time.Second, true},
		{"batch above queue", "OTEL_BSP_MAX_EXPORT_BATCH_SIZE", "4096", 2048, 512, 5 * time.Second, 30 * time.Second, true},
		{"zero delay", "OTEL_BSP_SCHEDULE_DELAY", "0", 2048, 512, 5 * time.Second, 30 * time.Second, true},
		{"negative delay", "OTEL_BSP_SCHEDULE_DELAY", "-10", 2048, 512, 5 * time.Second, 30 * time.Second, true},
		{"delay", "OTEL_BSP_SCHEDULE_DELAY", "250", 2048, 512, 250 * time.Millisecond, 30 * time.Second, true},
		{"zero timeout", "OTEL_BSP_EXPORT_TIMEOUT", "0", 2048, 512, 5 * time.Second, 0, false},
		{"negative timeout", "OTEL_BSP_EXPORT_TIMEOUT", "-3", 2048, 512, 5 * time.Second, 30 * time.Second, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Setenv("OTEL_TRACES_EXPORTER", "none")
			t.Setenv(c.key, c.value)
			d := &deadlineExporter{deadlines: make(chan bool, 1)}
			tp, err := NewTracerProvider(WithEnv(), WithExporter(d))
			if err != nil {
				t.Fatal(err)
			}
			p := tp.pipe
			if p.batchSize != c.batch || p.delay != c.delay || p.timeout != c.timeout || len(p.q.slots) < c.queue || len(p.q.slots) >= 2*c.queue {
				t.Fatalf("queue %d slots, batch %d, delay %v, timeout %v; want queue %d, batch %d, delay %v, timeout %v",
					len(p.q.slots), p.batchSize, p.delay, p.timeout, c.queue, c.batch, c.delay, c.timeout)
			}
			// The export goroutine runs: a span is exported, with a deadline unless the timeout is 0.
			_, s := tp.Tracer("t").Start(context.Background(), "s")
			s.End()
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			if err := tp.ForceFlush(ctx); err != nil {
				t.Fatal(err)
			}
			if got := <-d.deadlines; got != c.exportHasDeadlineWithEnv {
				t.Fatalf("export context has a deadline: %v, want %v", got, c.exportHasDeadlineWithEnv)
			}
			tp.Shutdown(ctx)
		})
	}
}
