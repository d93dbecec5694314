package weft

import (
	"sync/atomic"

	"weft.dev/sdk/go/export"
)

// queue is a bounded lock-free multi-producer queue (Vyukov's bounded MPMC ring, used here
// with one consumer). Push never blocks: it fails when the ring is full. One CAS per push.
type queue struct {
	_     [64]byte
	tail  atomic.Uint64 // next slot to push
	_     [56]byte
	head  atomic.Uint64 // next slot to pop
	_     [56]byte
	mask  uint64
	slots []slot
}

type slot struct {
	seq atomic.Uint64
	rec *export.SpanData
}

func newQueue(capacity int) *queue {
	n := 1
	for n < capacity {
		n <<= 1
	}
	q := &queue{mask: uint64(n - 1), slots: make([]slot, n)}
	for i := range q.slots {
		q.slots[i].seq.Store(uint64(i))
	}
	return q
}

// push appends r; it returns false when the queue is full.
func (q *queue) push(r *export.SpanData) bool {
	pos := q.tail.Load()
	for {
		s := &q.slots[pos&q.mask]
		seq := s.seq.Load()
		switch diff := int64(seq) - int64(pos); {
		case diff == 0:
			if q.tail.CompareAndSwap(pos, pos+1) {
				s.rec = r
				s.seq.Store(pos + 1)
				return true
			}
			pos = q.tail.Load()
		case diff < 0:
			return false
		default:
			pos = q.tail.Load()
		}
	}
}

// pop removes the oldest record, or returns nil when none is ready. One consumer only.
func (q *queue) pop() *export.SpanData {
	pos := q.head.Load()
	s := &q.slots[pos&q.mask]
	if s.seq.Load() != pos+1 {
		return nil
	}
	r := s.rec
	s.rec = nil
	q.head.Store(pos + 1)
	s.seq.Store(pos + q.mask + 1)
	return r
}

// len is the number of records pushed and not yet popped (approximate under concurrency).
func (q *queue) len() int {
	return int(q.tail.Load() - q.head.Load())
}

// popShared is pop for several consumers: it claims the slot with a CAS on head.
func (q *queue) popShared() *export.SpanData {
	pos := q.head.Load()
	for {
		s := &q.slots[pos&q.mask]
		seq := s.seq.Load()
		switch diff := int64(seq) - int64(pos+1); {
		case diff == 0:
			if q.head.CompareAndSwap(pos, pos+1) {
				r := s.rec
				s.rec = nil
				s.seq.Store(pos + q.mask + 1)
				return r
			}
			pos = q.head.Load()
		case diff < 0:
			return nil
		default:
			pos = q.head.Load()
		}
	}
}
