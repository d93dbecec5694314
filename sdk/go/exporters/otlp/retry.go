package otlp

import (
	"encoding/binary"
	"errors"
	"math"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// Outcome classifies an export attempt (spec/otlp.md "Retry").
type Outcome int

const (
	// Success: the batch was accepted (perhaps partly).
	Success Outcome = iota
	// Retryable: try again after a delay.
	Retryable
	// Permanent: drop the batch.
	Permanent
)

func (o Outcome) String() string {
	return [...]string{"success", "retryable", "permanent"}[o]
}

// MaxAttempts is the number of attempts per batch (the first and 4 retries).
const MaxAttempts = 5

// ClassifyHTTP classifies an HTTP status; delay is the server-requested delay (Retry-After on
// 429 and 503), or -1.
func ClassifyHTTP(status int, h http.Header, now time.Time) (Outcome, time.Duration) {
	switch {
	case status >= 200 && status < 300:
		return Success, -1
	case status == 429 || status == 502 || status == 503 || status == 504:
		if status == 429 || status == 503 {
			if vs := h.Values("Retry-After"); len(vs) > 0 {
				if d, ok := ParseRetryAfter(vs[0], now); ok {
					return Retryable, d
				}
			}
		}
		return Retryable, -1
	}
	return Permanent, -1
}

// ClassifyGRPC classifies a gRPC status code by name; retryInfo says whether the status
// carried google.rpc.RetryInfo.
func ClassifyGRPC(code string, retryInfo bool) Outcome {
	switch code {
	case "OK":
		return Success
	case "CANCELLED", "DEADLINE_EXCEEDED", "ABORTED", "OUT_OF_RANGE", "UNAVAILABLE", "DATA_LOSS":
		return Retryable
	case "RESOURCE_EXHAUSTED":
		if retryInfo {
			return Retryable
		}
	}
	return Permanent
}

// BackoffRange returns the bounds of the sleep before retry k (k >= 1): [c/2, c] with
// c = min(5 s, 1 s × 1.5^(k−1)); give up when k >= MaxAttempts.
func BackoffRange(k int) (lo, hi time.Duration, giveUp bool) {
	if k < 1 || k >= MaxAttempts {
		return 0, 0, true
	}
	c := math.Min(5, math.Pow(1.5, float64(k-1)))
	return time.Duration(c / 2 * float64(time.Second)), time.Duration(c * float64(time.Second)), false
}

// ParseRetryAfter reads a Retry-After value: non-negative integer seconds, or an HTTP-date
// (0 if past). ok is false for anything else.
func ParseRetryAfter(v string, now time.Time) (time.Duration, bool) {
	v = strings.TrimSpace(v)
	if v == "" {
		return 0, false
	}
	if v[0] >= '0' && v[0] <= '9' {
		n, err := strconv.ParseUint(v, 10, 32)
		if err != nil {
			return 0, false
		}
		return time.Duration(n) * time.Second, true
	}
	t, err := http.ParseTime(v)
	if err != nil {
		return 0, false
	}
	d := t.Sub(now)
	if d < 0 {
		d = 0
	}
	return d, true
}

// PartialSuccess is the partial_success of an ExportTraceServiceResponse.
type PartialSuccess struct {
	RejectedSpans int64
	ErrorMessage  string
}

var errMalformed = errors.New("malformed ExportTraceServiceResponse")

// DecodeResponse reads an ExportTraceServiceResponse (empty means full success).
func DecodeResponse(b []byte) (PartialSuccess, error) {
	var ps PartialSuccess
	err := walk(b, func(field int, wt int, v uint64, data []byte) error {
		if field == 1 && wt == wtLen {
			return walk(data, func(f int, wt int, v uint64, d []byte) error {
				switch {
				case f == 1 && wt == wtVarint:
					ps.RejectedSpans = int64(v)
				case f == 2 && wt == wtLen:
					ps.ErrorMessage = string(d)
				}
				return nil
			})
		}
		return nil
	})
	return ps, err
}

// walk calls fn for every field of a protobuf message, skipping unknown wire types safely.
func walk(b []byte, fn func(field, wt int, v uint64, data []byte) error) error {
	for len(b) > 0 {
		key, n := binary.Uvarint(b)
		if n <= 0 {
			return errMalformed
		}
		b = b[n:]
		field, wt := int(key>>3), int(key&7)
		var v uint64
		var data []byte
		switch wt {
		case wtVarint:
			v, n = binary.Uvarint(b)
			if n <= 0 {
				return errMalformed
			}
			b = b[n:]
		case wtFixed64:
			if len(b) < 8 {
				return errMalformed
			}
			v, b = binary.LittleEndian.Uint64(b), b[8:]
		case wtFixed32:
			if len(b) < 4 {
				return errMalformed
			}
			v, b = uint64(binary.LittleEndian.Uint32(b)), b[4:]
		case wtLen:
			l, n := binary.Uvarint(b)
			if n <= 0 || l > uint64(len(b)-n) {
				return errMalformed
			}
			data, b = b[n:n+int(l)], b[n+int(l):]
		default:
			return errMalformed
		}
		if field == 0 {
			return errMalformed
		}
		if err := fn(field, wt, v, data); err != nil {
			return err
		}
	}
	return nil
}
