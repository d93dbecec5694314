// Package id generates trace and span IDs (spec/ids.md).
//
// IDs come from wyrand, a fast non-cryptographic PRNG. Each generator state lives in a
// sync.Pool, so a goroutine draws from a state cached on its P: no lock and no shared atomic
// on the hot path. Every state is seeded once from crypto/rand when the pool creates it.
//
// Fork without exec is not supported (Go programs do not fork).
package id

import (
	"crypto/rand"
	"encoding/binary"
	"math/bits"
	"sync"
	"time"

	"go.opentelemetry.io/otel/trace"
)

// Source is a stream of 64-bit draws. Tests inject scripted sources.
type Source interface {
	Uint64() uint64
}

// Wyrand is the weft wyrand reference PRNG (spec/ids.md "PRNG requirements").
type Wyrand struct{ state uint64 }

// NewWyrand returns a wyrand stream starting from seed.
func NewWyrand(seed uint64) *Wyrand { return &Wyrand{state: seed} }

// Uint64 returns the next draw.
func (w *Wyrand) Uint64() uint64 {
	w.state += 0xa0761d6478bd642f
	hi, lo := bits.Mul64(w.state, w.state^0xe7037ed1a0b428db)
	return hi ^ lo
}

// NewSeededWyrand returns a wyrand stream seeded from crypto/rand.
func NewSeededWyrand() *Wyrand { return seeded() }

func seeded() *Wyrand {
	var b [8]byte
	if _, err := rand.Read(b[:]); err != nil {
		// crypto/rand.Read never fails on supported platforms (Go 1.24+ panics instead).
		panic("weft: crypto/rand: " + err.Error())
	}
	return &Wyrand{state: binary.LittleEndian.Uint64(b[:])}
}

var pool = sync.Pool{New: func() any { return seeded() }}

// TraceIDFrom draws a valid trace ID from src: two draws, big-endian, redrawn while all zero.
func TraceIDFrom(src Source) (t trace.TraceID) {
	for {
		hi, lo := src.Uint64(), src.Uint64()
		if hi|lo != 0 {
			binary.BigEndian.PutUint64(t[:8], hi)
			binary.BigEndian.PutUint64(t[8:], lo)
			return t
		}
	}
}

// SpanIDFrom draws a valid span ID from src, redrawn while zero.
func SpanIDFrom(src Source) (s trace.SpanID) {
	for {
		if v := src.Uint64(); v != 0 {
			binary.BigEndian.PutUint64(s[:], v)
			return s
		}
	}
}

// XrayTraceIDFrom draws a trace ID as TraceIDFrom does and puts unixSeconds in bytes 0-3.
func XrayTraceIDFrom(src Source, unixSeconds uint32) trace.TraceID {
	for {
		t := TraceIDFrom(src)
		binary.BigEndian.PutUint32(t[:4], unixSeconds)
		if t.IsValid() {
			return t
		}
	}
}

// Generator makes new IDs. Implementations are safe for concurrent use.
type Generator interface {
	NewTraceID() trace.TraceID
	NewSpanID() trace.SpanID
}

// Random is the default generator: pooled, entropy-seeded wyrand states.
type Random struct{}

// NewTraceID returns a new random trace ID.
func (Random) NewTraceID() trace.TraceID {
	w := pool.Get().(*Wyrand)
	t := TraceIDFrom(w)
	pool.Put(w)
	return t
}

// NewSpanID returns a new random span ID.
func (Random) NewSpanID() trace.SpanID {
	w := pool.Get().(*Wyrand)
	s := SpanIDFrom(w)
	pool.Put(w)
	return s
}

// NewIDs returns a new trace ID and span ID with one visit to the state pool.
func (Random) NewIDs() (trace.TraceID, trace.SpanID) {
	w := pool.Get().(*Wyrand)
	t, sp := TraceIDFrom(w), SpanIDFrom(w)
	pool.Put(w)
	return t, sp
}

// Xray puts the current Unix time in seconds in the first 4 bytes of each trace ID, as AWS X-Ray
// requires; span IDs are those of Random.
type Xray struct{}

// NewTraceID returns a new X-Ray compatible trace ID.
func (Xray) NewTraceID() trace.TraceID {
	w := pool.Get().(*Wyrand)
	t := XrayTraceIDFrom(w, uint32(time.Now().Unix()))
	pool.Put(w)
	return t
}

// NewSpanID returns a new random span ID.
func (Xray) NewSpanID() trace.SpanID { return Random{}.NewSpanID() }

// NewTraceFlags returns the trace flags of a new span: a root gets the random flag (0x02), a
// child copies its parent's random flag; sampled sets 0x01.
func NewTraceFlags(parent trace.TraceFlags, hasParent, sampled bool) trace.TraceFlags {
	f := trace.TraceFlags(0x02)
	if hasParent {
		f = parent & 0x02
	}
	if sampled {
		f |= 0x01
	}
	return f
}

const hexDigits = "0123456789abcdef"

// AppendHex appends the lowercase hex of b to dst.
func AppendHex(dst []byte, b []byte) []byte {
	for _, c := range b {
		dst = append(dst, hexDigits[c>>4], hexDigits[c&15])
	}
	return dst
}

// ParseHex decodes lowercase hex into dst (len(hex) == 2*len(dst)); it reports false on any
// other character.
func ParseHex(dst []byte, hex string) bool {
	if len(hex) != 2*len(dst) {
		return false
	}
	bad := byte(0)
	for i := range dst {
		hi, lo := unhex[hex[2*i]], unhex[hex[2*i+1]]
		bad |= hi | lo
		dst[i] = hi<<4 | lo&0x0f
	}
	return bad&0xf0 == 0
}

// unhex maps a lowercase hex digit to its value and every other byte to 0xff.
var unhex = func() (t [256]byte) {
	for i := range t {
		t[i] = 0xff
	}
	for c := '0'; c <= '9'; c++ {
		t[c] = byte(c - '0')
	}
	for c := 'a'; c <= 'f'; c++ {
		t[c] = byte(c-'a') + 10
	}
	return t
}()
