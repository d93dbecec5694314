package otlp

import (
	"testing"
	"time"
)

// Decoders of server replies have fuzz targets; the seeds run as ordinary tests.

func FuzzDecodeResponse(f *testing.F) {
	f.Add([]byte{})
	f.Add([]byte{0x0a, 0x0b, 0x08, 0x05, 0x12, 0x07, 't', 'o', 'o', ' ', 'o', 'l', 'd'})
	f.Add([]byte{0x0a, 0xff, 0xff, 0xff, 0xff, 0x0f})
	f.Fuzz(func(t *testing.T, b []byte) {
		ps, err := DecodeResponse(b)
		if err == nil && ps.RejectedSpans < 0 && len(b) < 11 {
			t.Fatalf("negative count from %x", b)
		}
	})
}

func FuzzParseRetryAfter(f *testing.F) {
	for _, s := range []string{"0", "120", "Tue, 14 Nov 2023 22:13:27 GMT", "-1", "1.5", "99999999999", ""} {
		f.Add(s)
	}
	now := time.Date(2023, 11, 14, 22, 13, 20, 0, time.UTC)
	f.Fuzz(func(t *testing.T, s string) {
		if d, ok := ParseRetryAfter(s, now); ok && d < 0 {
			t.Fatalf("%q gave a negative delay %v", s, d)
		}
	})
}
