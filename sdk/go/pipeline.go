package weft

import (
	"context"
	"errors"
	"log"
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
// export goroutine holds one batch while it retries, and records come from a sync.Pool.
type pipeline struct {
	q         *queue
	exp       export.Exporter
	res       *export.Resource
	batchSize int
	delay     time.Duration
	timeout   time.Duration

	wake    chan struct{}
	flushes chan chan struct{}
	stop    chan struct{}
	done    chan struct{}

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
		timeout: o.exportTimeout, wake: make(chan struct{}, 1), flushes: make(chan chan struct{}),
		stop: make(chan struct{}), done: make(chan struct{}),
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

func (p *pipeline) run() {
	defer close(p.done)
	batch := make([]*export.SpanData, 0, p.batchSize)
	t := time.NewTimer(p.delay)
	defer t.Stop()
	for {
		var flush chan struct{}
		select {
		case <-p.wake:
		case <-t.C:
		case flush = <-p.flushes:
		case <-p.stop:
			p.drain(batch)
			return
		}
		batch = p.exportAvailable(batch, flush != nil)
		if flush != nil {
			close(flush)
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

// exportAvailable exports full batches, and the last partial one when all is set or it is
// the timer's turn.
func (p *pipeline) exportAvailable(batch []*export.SpanData, all bool) []*export.SpanData {
	for {
		for len(batch) < p.batchSize {
			r := p.q.pop()
			if r == nil {
				break
			}
			batch = append(batch, r)
		}
		if len(batch) == 0 {
			return batch
		}
		full := len(batch) == p.batchSize
		p.export(batch)
		clear(batch)
		batch = batch[:0]
		if !full {
			return batch
		}
	}
}

func (p *pipeline) export(batch []*export.SpanData) {
	ctx, cancel := context.WithTimeout(p.base, p.timeout)
	err := p.exp.Export(ctx, p.res, batch)
	cancel()
	if err != nil {
		p.failed.Add(int64(len(batch)))
	}
	for _, r := range batch {
		p.putRecord(r)
	}
}

func (p *pipeline) drain(batch []*export.SpanData) {
	p.exportAvailable(batch, true)
}

var errShutdown = errors.New("weft: tracer provider is shut down")

// flush exports everything queued before it was called.
func (p *pipeline) flush(ctx context.Context) error {
	if p.exp == nil {
		return nil
	}
	ch := make(chan struct{})
	select {
	case p.flushes <- ch:
	case <-p.done:
		return errShutdown
	case <-ctx.Done():
		return ctx.Err()
	}
	select {
	case <-ch:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (p *pipeline) shutdown(ctx context.Context) error {
	p.closed.Store(true)
	select {
	case <-p.stop:
		return nil
	default:
		close(p.stop)
	}
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
