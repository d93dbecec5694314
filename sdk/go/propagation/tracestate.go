package propagation

import "strings"

// MaxTracestateMembers is the W3C member limit.
const MaxTracestateMembers = 32

// ParseTracestate parses the tracestate header values (spec/propagation.md "tracestate
// extract") and returns the canonical tracestate; ok is false when the whole tracestate is
// discarded.
func ParseTracestate(vals []string) (canonical string, ok bool) {
	if len(vals) == 0 {
		return "", true
	}
	if len(vals) == 1 {
		return parseTracestate(vals[0])
	}
	return parseTracestate(strings.Join(vals, ","))
}

func parseTracestate(s string) (string, bool) {
	// Fast path: a header that is already canonical is returned as is.
	var out []byte
	var keys []string
	canonical := true
	n := 0
	rest := s
	for {
		var piece string
		i := strings.IndexByte(rest, ',')
		if i < 0 {
			piece, rest = rest, ""
		} else {
			piece, rest = rest[:i], rest[i+1:]
		}
		t := trimOWS(piece)
		if t != piece {
			canonical = false
		}
		if t != "" {
			n++
			if n > MaxTracestateMembers {
				return "", false
			}
			eq := strings.IndexByte(t, '=')
			if eq < 0 || !validTSKey(t[:eq]) || !validTSValue(t[eq+1:]) {
				return "", false
			}
			key := t[:eq]
			dup := false
			for _, k := range keys {
				if k == key {
					dup = true
					break
				}
			}
			if dup {
				canonical = false
			} else {
				keys = append(keys, key)
				if len(out) > 0 {
					out = append(out, ',')
				}
				out = append(out, t...)
			}
		} else {
			canonical = false
		}
		if i < 0 {
			break
		}
	}
	if canonical {
		return s, true
	}
	return string(out), true
}

func validTSKey(k string) bool {
	if len(k) < 1 || len(k) > 256 {
		return false
	}
	c := k[0]
	if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9') {
		return false
	}
	for i := 1; i < len(k); i++ {
		c := k[i]
		if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '_' || c == '-' || c == '*' || c == '/' || c == '@') {
			return false
		}
	}
	return true
}

func validTSValue(v string) bool {
	if len(v) < 1 || len(v) > 256 || v[len(v)-1] == ' ' {
		return false
	}
	for i := 0; i < len(v); i++ {
		c := v[i]
		if c < 0x20 || c > 0x7e || c == ',' || c == '=' {
			return false
		}
	}
	return true
}

// TruncateTracestate applies the 512-character inject rule to a canonical tracestate.
func TruncateTracestate(ts string) string {
	if len(ts) <= 512 {
		return ts
	}
	members := strings.Split(ts, ",")
	total := len(ts)
	for total > 512 {
		idx := -1
		for i := len(members) - 1; i >= 0; i-- {
			if len(members[i]) > 128 {
				idx = i
				break
			}
		}
		if idx < 0 {
			break
		}
		total -= len(members[idx]) + 1
		members = append(members[:idx], members[idx+1:]...)
	}
	for total > 512 && len(members) > 0 {
		total -= len(members[len(members)-1]) + 1
		members = members[:len(members)-1]
	}
	return strings.Join(members, ",")
}

// TracestateGet returns the value of key in a canonical tracestate.
func TracestateGet(ts, key string) (string, bool) {
	for ts != "" {
		var m string
		if i := strings.IndexByte(ts, ','); i >= 0 {
			m, ts = ts[:i], ts[i+1:]
		} else {
			m, ts = ts, ""
		}
		if len(m) > len(key) && m[len(key)] == '=' && m[:len(key)] == key {
			return m[len(key)+1:], true
		}
	}
	return "", false
}

// TracestateSet puts key=value at the front of a canonical tracestate, removing the key's old
// member; if that makes 33 members the right-most is dropped. An empty value removes the key.
func TracestateSet(ts, key, value string) string {
	var b strings.Builder
	n := 0
	if value != "" {
		b.WriteString(key)
		b.WriteByte('=')
		b.WriteString(value)
		n = 1
	}
	for ts != "" {
		var m string
		if i := strings.IndexByte(ts, ','); i >= 0 {
			m, ts = ts[:i], ts[i+1:]
		} else {
			m, ts = ts, ""
		}
		if len(m) > len(key) && m[len(key)] == '=' && m[:len(key)] == key {
			continue
		}
		if n == MaxTracestateMembers {
			break
		}
		if n > 0 {
			b.WriteByte(',')
		}
		b.WriteString(m)
		n++
	}
	return b.String()
}
