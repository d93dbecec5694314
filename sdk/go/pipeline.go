package weft

import (
	"context"
	"errors"
	"log"
	"runtime"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/codes"

	"weft.dev/sdk/go/export"
)

// pipeline moves ended spans from application goroutines to the exporter without blocking:
// End pushes the record into a bounded lock-free queue (one CAS) or, when the queue is full,
// drops it and counts the drop. One export goroutine drains the queue in batches.
//
// Memory stays bounded when the backend is down: the queue holds at most its capacity, the
// export goroutine holds one batch while it retries, and records are reused through a free
// list whose ring (the queue's capacity plus a batch, rounded up to a power of two) bounds how
// many are kept.
//
// A record is allocated only when the free list is empty, in practice when more spans wait in
// the queue than ever before: the number of records grows to the deepest the queue has been
// and stays there, the steady state BenchmarkSpanStartEnd measures (warmUpWeft).
type pipeline struct {
	q         *queue
	exp       export.Exporter
	res       *export.Resource
	batchSize int
	delay     time.Duration
	timeout   time.Duration

	wake    chan struct{}
	flushes chan flushReq
	stop    chan struct{}
	done    chan struct{}

	// inflight counts enqueue calls under way; it is raised before closed is read, so once
	// shutdown has set closed and seen inflight at zero, no push can land in the queue.
	inflight atomic.Int64
	// Shutdown runs once; later calls wait for it and return its result.
	shutting     atomic.Bool
	shutdownDone chan struct{}
	shutdownErr  error

	base       context.Context // cancelled when a shutdown's own deadline passes
	cancelBase context.CancelFunc

	// free holds cleared records for reuse: the export goroutine pushes a record after its
	// batch is encoded, Start pops one (one CAS each way). Unlike a sync.Pool it is not emptied
	// by the GC and does not move records between Ps, and its capacity bounds what is kept.
	free    *queue
	closed  atomic.Bool
	dropped atomic.Int64
	queued  atomic.Int64
	failed  atomic.Int64
	lastLog atomic.Int64
}

func newPipeline(exp export.Exporter, res *export.Resource, o *options) *pipeline {
	p := &pipeline{
		q: newQueue(o.queueSize), exp: exp, res: res, batchSize: o.batchSize, delay: o.scheduleDelay,
		timeout: o.exportTimeout, wake: make(chan struct{}, 1), flushes: make(chan flushReq),
		stop: make(chan struct{}), done: make(chan struct{}), shutdownDone: make(chan struct{}),
	}
	p.base, p.cancelBase = context.WithCancel(context.Background())
	p.free = newQueue(o.queueSize + o.batchSize)
	if exp == nil {
		close(p.done)
		return p
	}
	go p.run()
	return p
}

func (p *pipeline) getRecord() *export.SpanData {
	if r := p.free.popShared(); r != nil {
		return r
	}
	return &export.SpanData{}
}

// putRecord clears a record (keeping its slices' capacity) and returns it to the pool.
func (p *pipeline) putRecord(r *export.SpanData) {
	clear(r.Attributes)
	attrs := r.Attributes[:0]
	for i := range r.Events {
		clear(r.Events[i].Attributes)
		r.Events[i].Attributes = r.Events[i].Attributes[:0]
		r.Events[i].Name = ""
	}
	events := r.Events[:0]
	for i := range r.Links {
		clear(r.Links[i].Attributes)
		r.Links[i].Attributes = r.Links[i].Attributes[:0]
		r.Links[i].Tracestate = ""
	}
	links := r.Links[:0]
	*r = export.SpanData{Attributes: attrs, Events: events, Links: links, StatusCode: codes.Unset}
	p.free.push(r) // when the free list is full the record is left to the GC
}

func (p *pipeline) enqueue(r *export.SpanData) {
	p.inflight.Add(1)
	defer p.inflight.Add(-1)
	if p.closed.Load() {
		p.drop(1, "the tracer provider is shut down")
		p.putRecord(r)
		return
	}
	if p.exp == nil || !p.q.push(r) {
		if p.exp != nil {
			p.drop(1, "the export queue is full")
		}
		p.putRecord(r)
		return
	}
	p.queued.Add(1)
	if p.q.len() >= p.batchSize {
		select {
		case p.wake <- struct{}{}:
		default:
		}
	}
}

// drop counts dropped spans and logs at most once a minute.
func (p *pipeline) drop(n int64, why string) {
	total := p.dropped.Add(n)
	now := time.Now().UnixNano()
	last := p.lastLog.Load()
	if now-last > int64(time.Minute) && p.lastLog.CompareAndSwap(last, now) {
		log.Printf("weft: %s: spans dropped (%d so far)", why, total)
	}
}

// flushReq asks the export goroutine to export every record pushed before position target.
type flushReq struct {
	target uint64
	done   chan struct{}
}

func (p *pipeline) run() {
	defer close(p.done)
	batch := make([]*export.SpanData, 0, p.batchSize)
	t := time.NewTimer(p.delay)
	defer t.Stop()
	for {
		var flush flushReq
		select {
		case <-p.wake:
		case <-t.C:
		case flush = <-p.flushes:
		case <-p.stop:
			p.drain(batch)
			return
		}
		target := flush.target
		if flush.done == nil {
			// Export what is queued now; records pushed meanwhile wait for the next turn, so a
			// sustained load cannot keep this goroutine from flushes and shutdown.
			target = p.q.tail.Load()
		}
		batch = p.exportUpTo(batch, target)
		if flush.done != nil {
			close(flush.done)
		}
		if !t.Stop() {
			select {
			case <-t.C:
			default:
			}
		}
		t.Reset(p.delay)
	}
}

// exportUpTo exports, in batches, every record pushed at a position before target. A slot that
// a producer has claimed but not yet filled is waited for (the producer is between its CAS and
// its store), never mistaken for the end of the queue.
//
// That wait is nanoseconds, unless the producer was descheduled right between the two (by Go's
// preemption or, on a busy machine, by the OS); then it lasts a time slice, milliseconds. So the
// wait yields a few times and then sleeps, with a growing back-off: spinning on Gosched burned a
// core's worth of CPU for the whole slice, the core the descheduled producer needed (on 2 shared
// cores, 60-130 such waits of about 10,000 Gosched calls each per 2 s of
// BenchmarkSpanStartEnd/sampled-0-attrs, 16 % of the process's CPU time; docs/benchmarks/go-sdk.md).
func (p *pipeline) exportUpTo(batch []*export.SpanData, target uint64) []*export.SpanData {
	waits := 0
	for int64(target-p.q.head.Load()) > 0 {
		r := p.q.pop()
		if r == nil {
			waits++
			if waits <= claimedSpins {
				runtime.Gosched()
			} else {
				time.Sleep(claimedSleep(waits - claimedSpins))
			}
			continue
		}
		waits = 0
		batch = append(batch, r)
		if len(batch) == p.batchSize {
			batch = p.exportBatch(batch)
		}
	}
	if len(batch) > 0 {
		batch = p.exportBatch(batch)
	}
	return batch
}

// claimedSpins is how many times exportUpTo yields for a claimed, unfilled slot before it sleeps.
const claimedSpins = 4

// claimedSleep is the n-th sleep (n >= 1) of exportUpTo's wait for a claimed slot: 20 µs,
// doubling up to 1 ms.
func claimedSleep(n int) time.Duration {
	if n > 6 {
		n = 6
	}
	return 20 * time.Microsecond << (n - 1)
}

func (p *pipeline) exportBatch(batch []*export.SpanData) []*export.SpanData {
	p.export(batch)
	clear(batch)
	return batch[:0]
}

func (p *pipeline) export(batch []*export.SpanData) {
	ctx, cancel := p.base, context.CancelFunc(func() {})
	if p.timeout > 0 {
		ctx, cancel = context.WithTimeout(p.base, p.timeout)
	}
	err := p.exp.Export(ctx, p.res, batch)
	cancel()
	if err != nil {
		p.failed.Add(int64(len(batch)))
	}
	for _, r := range batch {
		p.putRecord(r)
	}
}

// drain exports everything left once shutdown has closed the pipeline: it waits for the End
// calls under way (they saw closed unset and may still push), then exports up to the tail.
func (p *pipeline) drain(batch []*export.SpanData) {
	for p.inflight.Load() != 0 {
		runtime.Gosched()
	}
	p.exportUpTo(batch, p.q.tail.Load())
}

var errShutdown = errors.New("weft: tracer provider is shut down")

// flush exports everything queued before it was called (not "until empty", which a sustained
// load may never reach).
func (p *pipeline) flush(ctx context.Context) error {
	if p.exp == nil {
		return nil
	}
	req := flushReq{target: p.q.tail.Load(), done: make(chan struct{})}
	select {
	case p.flushes <- req:
	case <-p.done:
		return errShutdown
	case <-ctx.Done():
		return ctx.Err()
	}
	select {
	case <-req.done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// shutdown closes the pipeline, exports what is queued and shuts the exporter down. It runs
// once: concurrent and later calls wait for the first (or their own ctx) and return its result.
func (p *pipeline) shutdown(ctx context.Context) error {
	if !p.shutting.CompareAndSwap(false, true) {
		select {
		case <-p.shutdownDone:
			return p.shutdownErr
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	p.shutdownErr = p.doShutdown(ctx)
	close(p.shutdownDone)
	return p.shutdownErr
}

func (p *pipeline) doShutdown(ctx context.Context) error {
	p.closed.Store(true)
	close(p.stop)
	select {
	case <-p.done:
	case <-ctx.Done():
		// Interrupt a retry back-off or a slow request; the batch in flight is dropped.
		p.cancelBase()
		<-p.done
		if p.exp != nil {
			p.exp.Shutdown(context.Background())
		}
		return ctx.Err()
	}
	if p.exp != nil {
		return p.exp.Shutdown(ctx)
	}
	return nil
}
