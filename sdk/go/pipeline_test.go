package weft_test

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	weft "weft.dev/sdk/go"
	"weft.dev/sdk/go/export"
	"weft.dev/sdk/go/sampling"
)

// counter is an exporter that counts spans, and those named "marked".
type counter struct{ all, marked atomic.Int64 }

func (c *counter) Export(_ context.Context, _ *export.Resource, batch []*export.SpanData) error {
	c.all.Add(int64(len(batch)))
	for _, r := range batch {
		if r.Name == "marked" {
			c.marked.Add(1)
		}
	}
	return nil
}

func (c *counter) Shutdown(context.Context) error { return nil }

// load ends spans on n goroutines until stop is closed and returns how many it ended.
func load(tp *weft.TracerProvider, n int, stop chan struct{}) func() int64 {
	var ended atomic.Int64
	var wg sync.WaitGroup
	tr := tp.Tracer("load")
	for range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				for range 16 {
					_, s := tr.Start(context.Background(), "load")
					s.End()
					ended.Add(1)
				}
			}
		}()
	}
	return func() int64 { wg.Wait(); return ended.Load() }
}

// Every span ended while Shutdown runs is exported or counted as dropped: none is lost behind a
// claimed-but-unfilled queue slot, and no push lands after the final drain.
func TestShutdownAccountsForEverySpan(t *testing.T) {
	for i := range 30 {
		c := &counter{}
		queue := 1 << 14 // nothing dropped for a full queue: losses show
		if i%2 == 1 {
			queue = 512 // drops for a full queue too
		}
		tp, err := weft.NewTracerProvider(weft.WithExporter(c), weft.WithSampler(sampling.AlwaysOn()),
			weft.WithBatching(queue, 512, time.Millisecond, 0))
		if err != nil {
			t.Fatal(err)
		}
		stop := make(chan struct{})
		wait := load(tp, 8, stop)
		time.Sleep(time.Duration(1+i%3) * time.Millisecond)
		if err := tp.Shutdown(context.Background()); err != nil {
			t.Fatal(err)
		}
		time.Sleep(time.Millisecond) // spans ended after Shutdown are dropped and counted
		close(stop)
		ended := wait()
		exported, st := c.all.Load(), tp.Stats()
		dropped := st.Dropped
		if st.Queued != exported {
			t.Fatalf("round %d: %d queued, %d exported", i, st.Queued, exported)
		}
		if exported+dropped != ended {
			t.Fatalf("round %d: %d ended, %d exported + %d dropped = %d (%d lost)",
				i, ended, exported, dropped, exported+dropped, ended-exported-dropped)
		}
	}
}

// ForceFlush returns, under a sustained load, once every span ended before it was exported.
func TestForceFlushUnderLoad(t *testing.T) {
	c := &counter{}
	tp, err := weft.NewTracerProvider(weft.WithExporter(c), weft.WithSampler(sampling.AlwaysOn()),
		weft.WithBatching(4096, 64, time.Hour, 0))
	if err != nil {
		t.Fatal(err)
	}
	defer tp.Shutdown(context.Background())
	stop := make(chan struct{})
	wait := load(tp, 4, stop)
	defer func() { close(stop); wait() }()
	tr := tp.Tracer("t")
	for round := range 20 {
		for range 50 {
			_, s := tr.Start(context.Background(), "marked")
			s.End()
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		err := tp.ForceFlush(ctx)
		cancel()
		if err != nil {
			t.Fatalf("round %d: %v", round, err)
		}
		// Marked spans may be dropped only when the queue was full.
		if got, want := c.marked.Load()+tp.Stats().Dropped, int64(50*(round+1)); got < want {
			t.Fatalf("round %d: ForceFlush returned with %d of %d marked spans exported (%d dropped)",
				round, c.marked.Load(), want, tp.Stats().Dropped)
		}
	}
}

// Shutdown may be called from several goroutines at once: one runs, the others wait for it and
// return its result.
func TestConcurrentShutdown(t *testing.T) {
	for range 200 {
		tp, err := weft.NewTracerProvider(weft.WithExporter(&counter{}))
		if err != nil {
			t.Fatal(err)
		}
		var wg sync.WaitGroup
		start := make(chan struct{})
		errs := make(chan error, 4)
		for range 4 {
			wg.Add(1)
			go func() { defer wg.Done(); <-start; errs <- tp.Shutdown(context.Background()) }()
		}
		close(start)
		wg.Wait()
		close(errs)
		for err := range errs {
			if err != nil {
				t.Fatal(err)
			}
		}
	}
}

// slow takes 1 ms per batch.
type slow struct{ counter }

func (s *slow) Export(ctx context.Context, r *export.Resource, b []*export.SpanData) error {
	time.Sleep(time.Millisecond)
	return s.counter.Export(ctx, r, b)
}

// ForceFlush returns once what was ended before it is exported, even while spans keep coming
// faster than the exporter takes them (it used to export "until empty" and never returned).
func TestForceFlushReturnsUnderSustainedLoad(t *testing.T) {
	c := &slow{}
	tp, err := weft.NewTracerProvider(weft.WithExporter(c), weft.WithSampler(sampling.AlwaysOn()),
		weft.WithBatching(1<<16, 1, time.Hour, 0))
	if err != nil {
		t.Fatal(err)
	}
	defer tp.Shutdown(context.Background())
	stop := make(chan struct{})
	done := make(chan struct{})
	tr := tp.Tracer("t")
	go func() { // about 5 spans a millisecond, 5 times what the exporter takes
		defer close(done)
		for {
			select {
			case <-stop:
				return
			case <-time.After(200 * time.Microsecond):
			}
			_, s := tr.Start(context.Background(), "load")
			s.End()
		}
	}()
	defer func() { close(stop); <-done }()
	time.Sleep(20 * time.Millisecond)
	for range 5 {
		_, s := tr.Start(context.Background(), "marked")
		s.End()
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	if err := tp.ForceFlush(ctx); err != nil {
		t.Fatalf("ForceFlush: %v (%d exported)", err, c.all.Load())
	}
	if got := c.marked.Load(); got != 5 {
		t.Fatalf("%d of 5 marked spans exported when ForceFlush returned", got)
	}
}
