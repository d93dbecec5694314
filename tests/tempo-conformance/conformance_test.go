package tempoconformance

import (
	"bytes"
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/dynamicpb"
)

// weft is a running weft binary on free ports.
type weft struct {
	http, otlpHTTP string
	cmd            *exec.Cmd
}

func freePort(t *testing.T) string {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return fmt.Sprint(l.Addr().(*net.TCPAddr).Port)
}

func start(t *testing.T) *weft {
	bin := os.Getenv("WEFT_BIN")
	if bin == "" {
		bin = "../../target/debug/weft"
	}
	bin, _ = filepath.Abs(bin)
	if _, err := os.Stat(bin); err != nil {
		t.Fatalf("weft binary not found at %s: build it with cargo build or set WEFT_BIN", bin)
	}
	w := &weft{http: freePort(t), otlpHTTP: freePort(t)}
	dir := t.TempDir()
	w.cmd = exec.Command(bin, "--data-dir", filepath.Join(dir, "data"), "--http-port", w.http,
		"--otlp-http-port", w.otlpHTTP, "--otlp-grpc-port", freePort(t), "--block-max-age", "1")
	w.cmd.Env = append(os.Environ(), "WEFT_ZIPKIN_PORT=0", "WEFT_JAEGER_HTTP_PORT=0", "WEFT_JAEGER_GRPC_PORT=0", "WEFT_JAEGER_QUERY_PORT=0", "WEFT_XRAY_PORT=0", "WEFT_JAEGER_COMPACT_PORT=0",
		"WEFT_JAEGER_BINARY_PORT=0", "WEFT_SAMPLING_HTTP_PORT=0", "WEFT_SAMPLING_GRPC_PORT=0")
	log, _ := os.Create(filepath.Join(dir, "weft.log"))
	w.cmd.Stdout, w.cmd.Stderr = log, log
	if err := w.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = w.cmd.Process.Signal(os.Interrupt)
		_ = w.cmd.Wait()
	})
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		if r, err := http.Get("http://127.0.0.1:" + w.http + "/ready"); err == nil {
			r.Body.Close()
			if r.StatusCode == 200 {
				return w
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatal("weft did not become ready within 30s")
	return nil
}

// send posts OTLP/JSON: traces of a root and four children, service svc-(i%2).
func (w *weft) send(t *testing.T, now time.Time, n int) []string {
	var ids []string
	for i := 0; i < n; i++ {
		id := fmt.Sprintf("%032x", time.Now().UnixNano()+int64(i)*7919)
		root := fmt.Sprintf("%016x", i+1)
		start := now.Add(-time.Minute).UnixNano() + int64(i)*1000
		spans := []string{fmt.Sprintf(`{"traceId":%q,"spanId":%q,"name":"op-%d","kind":2,"startTimeUnixNano":"%d","endTimeUnixNano":"%d","attributes":[{"key":"http.route","value":{"stringValue":"/r%d"}}]}`,
			id, root, i%3, start, start+int64(200*time.Millisecond), i%3)}
		for k := 0; k < 4; k++ {
			spans = append(spans, fmt.Sprintf(`{"traceId":%q,"spanId":"%016x","parentSpanId":%q,"name":"child","startTimeUnixNano":"%d","endTimeUnixNano":"%d"}`,
				id, 1000*(i+1)+k, root, start+int64(k), start+int64(k)+1000000))
		}
		body := fmt.Sprintf(`{"resourceSpans":[{"resource":{"attributes":[{"key":"service.name","value":{"stringValue":"svc-%d"}}]},"scopeSpans":[{"spans":[%s]}]}]}`,
			i%2, strings.Join(spans, ","))
		r, err := http.Post("http://127.0.0.1:"+w.otlpHTTP+"/v1/traces", "application/json", strings.NewReader(body))
		if err != nil || r.StatusCode != 200 {
			t.Fatalf("export: %v %v", err, r)
		}
		r.Body.Close()
		ids = append(ids, id)
	}
	return ids
}

// getStrict decodes a JSON reply into message `name`, refusing unknown fields as Grafana's
// backend and tempo-cli do.
func (w *weft) getStrict(t *testing.T, path string, params url.Values, name string) *dynamicpb.Message {
	t.Helper()
	u := "http://127.0.0.1:" + w.http + path
	if params != nil {
		u += "?" + params.Encode()
	}
	r, err := http.Get(u)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Body.Close()
	body, _ := io.ReadAll(r.Body)
	if r.StatusCode != 200 {
		t.Fatalf("GET %s: %d %s", u, r.StatusCode, body)
	}
	m := newMessage(name)
	if err := (protojson.UnmarshalOptions{DiscardUnknown: false}).Unmarshal(body, m); err != nil {
		t.Fatalf("GET %s: not a tempopb.%s: %v\n%s", path, name, err, body)
	}
	return m
}

func list(m protoreflect.Message, field string) protoreflect.List {
	return m.Get(m.Descriptor().Fields().ByName(protoreflect.Name(field))).List()
}

func get(m protoreflect.Message, field string) protoreflect.Value {
	return m.Get(m.Descriptor().Fields().ByName(protoreflect.Name(field)))
}

func TestTempoClientsDecodeEveryReply(t *testing.T) {
	w := start(t)
	now := time.Now()
	ids := w.send(t, now, 8)
	window := url.Values{"start": {fmt.Sprint(now.Add(-10 * time.Minute).Unix())}, "end": {fmt.Sprint(now.Add(time.Minute).Unix())}}
	for _, stage := range []string{"head", "blocks"} {
		if stage == "blocks" {
			time.Sleep(2500 * time.Millisecond) // --block-max-age 1
		}
		q := url.Values{"q": {"{ }"}, "limit": {"20"}, "spss": {"0"}}
		for k, v := range window {
			q[k] = v
		}
		m := w.getStrict(t, "/api/search", q, "SearchResponse")
		if n := list(m, "traces").Len(); n != len(ids) {
			t.Fatalf("%s: search found %d traces, want %d", stage, n, len(ids))
		}
		first := list(m, "traces").Get(0).Message()
		if n := list(get(first, "spanSet").Message(), "spans").Len(); n != 5 {
			t.Fatalf("%s: spss=0 returned %d spans of 5", stage, n)
		}
		w.getStrict(t, "/api/search", url.Values{"tags": {"service.name=svc-1"}, "limit": {"5"}}, "SearchResponse")
		w.getStrict(t, "/api/search/tags", nil, "SearchTagsResponse")
		m = w.getStrict(t, "/api/v2/search/tags", nil, "SearchTagsV2Response")
		if list(m, "scopes").Len() < 3 {
			t.Fatalf("%s: tags v2 has %d scopes", stage, list(m, "scopes").Len())
		}
		m = w.getStrict(t, "/api/search/tag/http.route/values", nil, "SearchTagValuesResponse")
		if list(m, "tagValues").Len() != 3 {
			t.Fatalf("%s: want 3 routes, got %v", stage, m)
		}
		w.getStrict(t, "/api/v2/search/tag/resource.service.name/values", nil, "SearchTagValuesV2Response")
		w.getStrict(t, "/api/v2/search/tag/rootName/values", nil, "SearchTagValuesV2Response")
		mw := url.Values{"start": {fmt.Sprint(now.Add(-10 * time.Minute).UnixNano())}, "end": {fmt.Sprint(now.Add(time.Minute).UnixNano())}}
		mq := url.Values{"q": {"{ } | rate() by (resource.service.name)"}, "step": {"60s"}, "start": mw["start"], "end": mw["end"]}
		m = w.getStrict(t, "/api/metrics/query_range", mq, "QueryRangeResponse")
		if list(m, "series").Len() != 2 {
			t.Fatalf("%s: query_range series: %v", stage, m)
		}
		mq = url.Values{"q": {"{ } | count_over_time()"}, "start": mw["start"], "end": mw["end"]}
		m = w.getStrict(t, "/api/metrics/query", mq, "QueryInstantResponse")
		if v := get(list(m, "series").Get(0).Message(), "value").Float(); v != 40 {
			t.Fatalf("%s: count_over_time = %v, want 40", stage, v)
		}
		// Trace by ID as protobuf (what Grafana reads): v1 a tempopb.Trace.
		req, _ := http.NewRequest("GET", "http://127.0.0.1:"+w.http+"/api/traces/"+ids[0], nil)
		req.Header.Set("Accept", "application/protobuf")
		r, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(r.Body)
		r.Body.Close()
		tr := newMessage("Trace")
		if err := proto.Unmarshal(body, tr); err != nil {
			t.Fatalf("%s: trace by ID is not a tempopb.Trace: %v", stage, err)
		}
		spans := 0
		batches := list(tr, "batches")
		for i := 0; i < batches.Len(); i++ {
			ss := list(batches.Get(i).Message(), "scope_spans")
			for j := 0; j < ss.Len(); j++ {
				spans += list(ss.Get(j).Message(), "spans").Len()
			}
		}
		if spans != 5 {
			t.Fatalf("%s: trace by ID returned %d spans of 5", stage, spans)
		}
		want, _ := hex.DecodeString(ids[0])
		got := get(list(list(batches.Get(0).Message(), "scope_spans").Get(0).Message(), "spans").Get(0).Message(), "trace_id").Bytes()
		if !bytes.Equal(got, want) {
			t.Fatalf("%s: trace ID %x, want %x", stage, got, want)
		}
	}
}

// grpc-go's default proto codec sends and receives the dynamicpb messages.
func TestStreamingQuerierWithGrpcGo(t *testing.T) {
	w := start(t)
	now := time.Now()
	ids := w.send(t, now, 6)
	conn, err := grpc.NewClient("127.0.0.1:"+w.http, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	call := func(method string, req proto.Message, reply string) ([]*dynamicpb.Message, error) {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		s, err := conn.NewStream(ctx, &grpc.StreamDesc{ServerStreams: true}, "/tempopb.StreamingQuerier/"+method)
		if err != nil {
			return nil, err
		}
		if err := s.SendMsg(req); err != nil {
			return nil, err
		}
		if err := s.CloseSend(); err != nil {
			return nil, err
		}
		var out []*dynamicpb.Message
		for {
			m := newMessage(reply)
			if err := s.RecvMsg(m); errors.Is(err, io.EOF) {
				return out, nil
			} else if err != nil {
				return out, err
			}
			out = append(out, m)
		}
	}
	req := newMessage("SearchRequest")
	set := func(m *dynamicpb.Message, f string, v protoreflect.Value) {
		m.Set(m.Descriptor().Fields().ByName(protoreflect.Name(f)), v)
	}
	set(req, "Query", protoreflect.ValueOfString("{ }"))
	set(req, "Limit", protoreflect.ValueOfUint32(20))
	set(req, "SpansPerSpanSet", protoreflect.ValueOfUint32(3))
	set(req, "start", protoreflect.ValueOfUint32(uint32(now.Add(-10*time.Minute).Unix())))
	set(req, "end", protoreflect.ValueOfUint32(uint32(now.Add(time.Minute).Unix())))
	replies, err := call("Search", req, "SearchResponse")
	if err != nil || len(replies) == 0 {
		t.Fatalf("Search: %v (%d replies)", err, len(replies))
	}
	seen := map[string]bool{}
	for _, r := range replies {
		traces := list(r, "traces")
		for i := 0; i < traces.Len(); i++ {
			seen[get(traces.Get(i).Message(), "traceID").String()] = true
		}
	}
	if len(seen) != len(ids) {
		t.Fatalf("Search streamed %d traces, want %d", len(seen), len(ids))
	}
	last := replies[len(replies)-1]
	if get(get(last, "metrics").Message(), "inspectedSpans").Uint() < 30 {
		t.Fatalf("the final Search reply has no metrics: %v", last)
	}

	mreq := newMessage("QueryRangeRequest")
	set(mreq, "query", protoreflect.ValueOfString("{ } | count_over_time() by (resource.service.name)"))
	set(mreq, "start", protoreflect.ValueOfUint64(uint64(now.Add(-10*time.Minute).UnixNano())))
	set(mreq, "end", protoreflect.ValueOfUint64(uint64(now.Add(time.Minute).UnixNano())))
	set(mreq, "step", protoreflect.ValueOfUint64(uint64(time.Minute)))
	mreplies, err := call("MetricsQueryRange", mreq, "QueryRangeResponse")
	if err != nil || len(mreplies) == 0 || list(mreplies[len(mreplies)-1], "series").Len() != 2 {
		t.Fatalf("MetricsQueryRange: %v %v", err, mreplies)
	}
	ireq := newMessage("QueryInstantRequest")
	set(ireq, "query", protoreflect.ValueOfString("{ } | count_over_time()"))
	set(ireq, "start", protoreflect.ValueOfUint64(uint64(now.Add(-10*time.Minute).UnixNano())))
	set(ireq, "end", protoreflect.ValueOfUint64(uint64(now.Add(time.Minute).UnixNano())))
	ireplies, err := call("MetricsQueryInstant", ireq, "QueryInstantResponse")
	if err != nil || len(ireplies) == 0 {
		t.Fatalf("MetricsQueryInstant: %v", err)
	}
	if v := get(list(ireplies[len(ireplies)-1], "series").Get(0).Message(), "value").Float(); v != 30 {
		t.Fatalf("MetricsQueryInstant count = %v, want 30", v)
	}
	set(req, "Query", protoreflect.ValueOfString("{ .a = }"))
	if _, err := call("Search", req, "SearchResponse"); status.Code(err) != codes.InvalidArgument {
		t.Fatalf("a bad query: %v, want InvalidArgument", err)
	}

	// The tag lookups, as tempo-cli's `query api search-tags` and `search-tag-values` call
	// them with --use-grpc: one reply each.
	start, end := uint32(now.Add(-10*time.Minute).Unix()), uint32(now.Add(time.Minute).Unix())
	treq := newMessage("SearchTagsRequest")
	set(treq, "start", protoreflect.ValueOfUint32(start))
	set(treq, "end", protoreflect.ValueOfUint32(end))
	treplies, err := call("SearchTagsV2", treq, "SearchTagsV2Response")
	if err != nil || len(treplies) != 1 || list(treplies[0], "scopes").Len() < 3 {
		t.Fatalf("SearchTagsV2: %v %v", err, treplies)
	}
	if treplies, err = call("SearchTags", treq, "SearchTagsResponse"); err != nil || len(treplies) != 1 ||
		list(treplies[0], "tagNames").Len() == 0 {
		t.Fatalf("SearchTags: %v %v", err, treplies)
	}
	vreq := newMessage("SearchTagValuesRequest")
	set(vreq, "tagName", protoreflect.ValueOfString("http.route"))
	set(vreq, "start", protoreflect.ValueOfUint32(start))
	set(vreq, "end", protoreflect.ValueOfUint32(end))
	vreplies, err := call("SearchTagValues", vreq, "SearchTagValuesResponse")
	if err != nil || len(vreplies) != 1 || list(vreplies[0], "tagValues").Len() != 3 {
		t.Fatalf("SearchTagValues: want 3 routes: %v %v", err, vreplies)
	}
	set(vreq, "tagName", protoreflect.ValueOfString("resource.service.name"))
	vreplies, err = call("SearchTagValuesV2", vreq, "SearchTagValuesV2Response")
	if err != nil || len(vreplies) != 1 || list(vreplies[0], "tagValues").Len() == 0 {
		t.Fatalf("SearchTagValuesV2: %v %v", err, vreplies)
	}
	if ty := get(list(vreplies[0], "tagValues").Get(0).Message(), "type").String(); ty != "string" {
		t.Fatalf("SearchTagValuesV2: a service name typed %q", ty)
	}
	set(treq, "scope", protoreflect.ValueOfString("spam"))
	if _, err := call("SearchTagsV2", treq, "SearchTagsV2Response"); status.Code(err) != codes.InvalidArgument {
		t.Fatalf("a bad scope: %v, want InvalidArgument", err)
	}
}
