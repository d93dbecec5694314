// Package tempoconformance checks weft's Tempo-compatible API the way Tempo's Go clients read
// it: every JSON reply is decoded with protojson into the tempopb message it must be, with
// unknown fields refused (as Grafana's backend and tempo-cli decode search and instant
// metrics), trace by ID is decoded as protobuf, and tempopb.StreamingQuerier is driven with
// grpc-go.
//
// The tempopb messages are built here at run time from Tempo 3's field numbers, names and
// types (the wire contract, written down in spec/tempo-streaming.md and
// tests/integration/test_tempo_shapes.py). Tempo's own Go package is AGPL-licensed and is not
// a dependency of this project.
package tempoconformance

import (
	"fmt"
	"strings"

	"google.golang.org/protobuf/reflect/protodesc"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"
	"google.golang.org/protobuf/types/descriptorpb"
	"google.golang.org/protobuf/types/dynamicpb"

	_ "go.opentelemetry.io/proto/otlp/common/v1"
	_ "go.opentelemetry.io/proto/otlp/trace/v1"
)

type field struct {
	name     string
	number   int32
	typ      string // a scalar type name, or ".package.Message"
	repeated bool
	mapOf    string // for map<string, X>: X
}

const kv = ".opentelemetry.proto.common.v1.KeyValue"

// messages are tempopb's messages as Tempo 3.0 defines them.
var messages = []struct {
	name   string
	fields []field
}{
	{"SearchRequest", []field{{"Tags", 1, "", false, "string"}, {"MinDurationMs", 2, "uint32", false, ""},
		{"MaxDurationMs", 3, "uint32", false, ""}, {"Limit", 4, "uint32", false, ""}, {"start", 5, "uint32", false, ""},
		{"end", 6, "uint32", false, ""}, {"Query", 8, "string", false, ""}, {"SpansPerSpanSet", 9, "uint32", false, ""}}},
	{"ServiceStats", []field{{"spanCount", 1, "uint32", false, ""}, {"errorCount", 2, "uint32", false, ""}}},
	{"Span", []field{{"spanID", 1, "string", false, ""}, {"name", 2, "string", false, ""},
		{"startTimeUnixNano", 3, "uint64", false, ""}, {"durationNanos", 4, "uint64", false, ""}, {"attributes", 5, kv, true, ""}}},
	{"SpanSet", []field{{"spans", 1, ".tempopb.Span", true, ""}, {"matched", 2, "uint32", false, ""}, {"attributes", 3, kv, true, ""}}},
	{"TraceSearchMetadata", []field{{"traceID", 1, "string", false, ""}, {"rootServiceName", 2, "string", false, ""},
		{"rootTraceName", 3, "string", false, ""}, {"startTimeUnixNano", 4, "uint64", false, ""}, {"durationMs", 5, "uint32", false, ""},
		{"spanSet", 6, ".tempopb.SpanSet", false, ""}, {"spanSets", 7, ".tempopb.SpanSet", true, ""},
		{"serviceStats", 8, "", false, ".tempopb.ServiceStats"}}},
	{"SearchMetrics", []field{{"inspectedTraces", 1, "uint32", false, ""}, {"inspectedBytes", 2, "uint64", false, ""},
		{"totalBlocks", 3, "uint32", false, ""}, {"completedJobs", 4, "uint32", false, ""}, {"totalJobs", 5, "uint32", false, ""},
		{"totalBlockBytes", 6, "uint64", false, ""}, {"inspectedSpans", 7, "uint64", false, ""}}},
	{"SearchResponse", []field{{"traces", 1, ".tempopb.TraceSearchMetadata", true, ""}, {"metrics", 2, ".tempopb.SearchMetrics", false, ""}}},
	{"MetadataMetrics", []field{{"inspectedBytes", 1, "uint64", false, ""}, {"totalJobs", 2, "uint32", false, ""},
		{"completedJobs", 3, "uint32", false, ""}, {"totalBlocks", 4, "uint32", false, ""}, {"totalBlockBytes", 5, "uint64", false, ""}}},
	{"SearchTagsRequest", []field{{"scope", 1, "string", false, ""}, {"query", 2, "string", false, ""}, {"start", 3, "uint32", false, ""},
		{"end", 4, "uint32", false, ""}, {"maxTagsPerScope", 5, "uint32", false, ""}, {"staleValuesThreshold", 6, "uint32", false, ""}}},
	{"SearchTagValuesRequest", []field{{"tagName", 1, "string", false, ""}, {"query", 2, "string", false, ""}, {"start", 4, "uint32", false, ""},
		{"end", 5, "uint32", false, ""}, {"maxTagValues", 6, "uint32", false, ""}, {"staleValueThreshold", 7, "uint32", false, ""}}},
	{"SearchTagsResponse", []field{{"tagNames", 1, "string", true, ""}, {"metrics", 2, ".tempopb.MetadataMetrics", false, ""}}},
	{"SearchTagsV2Scope", []field{{"name", 1, "string", false, ""}, {"tags", 2, "string", true, ""}}},
	{"SearchTagsV2Response", []field{{"scopes", 1, ".tempopb.SearchTagsV2Scope", true, ""}, {"metrics", 2, ".tempopb.MetadataMetrics", false, ""}}},
	{"SearchTagValuesResponse", []field{{"tagValues", 1, "string", true, ""}, {"metrics", 2, ".tempopb.MetadataMetrics", false, ""}}},
	{"TagValue", []field{{"type", 1, "string", false, ""}, {"value", 2, "string", false, ""}}},
	{"SearchTagValuesV2Response", []field{{"tagValues", 1, ".tempopb.TagValue", true, ""}, {"metrics", 2, ".tempopb.MetadataMetrics", false, ""}}},
	{"Sample", []field{{"value", 1, "double", false, ""}, {"timestamp_ms", 2, "int64", false, ""}}},
	{"Exemplar", []field{{"labels", 1, kv, true, ""}, {"value", 2, "double", false, ""}, {"timestamp_ms", 3, "int64", false, ""}}},
	{"TimeSeries", []field{{"labels", 1, kv, true, ""}, {"samples", 2, ".tempopb.Sample", true, ""}, {"exemplars", 4, ".tempopb.Exemplar", true, ""}}},
	{"QueryRangeRequest", []field{{"query", 1, "string", false, ""}, {"start", 2, "uint64", false, ""}, {"end", 3, "uint64", false, ""},
		{"step", 4, "uint64", false, ""}, {"exemplars", 16, "uint32", false, ""}}},
	{"QueryRangeResponse", []field{{"series", 1, ".tempopb.TimeSeries", true, ""}, {"metrics", 2, ".tempopb.SearchMetrics", false, ""},
		{"status", 3, ".tempopb.PartialStatus", false, ""}, {"message", 4, "string", false, ""}}},
	{"InstantSeries", []field{{"labels", 1, kv, true, ""}, {"value", 2, "double", false, ""}}},
	{"QueryInstantRequest", []field{{"query", 1, "string", false, ""}, {"start", 2, "uint64", false, ""}, {"end", 3, "uint64", false, ""}}},
	{"QueryInstantResponse", []field{{"series", 1, ".tempopb.InstantSeries", true, ""}, {"metrics", 2, ".tempopb.SearchMetrics", false, ""},
		{"status", 3, ".tempopb.PartialStatus", false, ""}, {"message", 4, "string", false, ""}}},
	{"Trace", []field{{"batches", 1, ".opentelemetry.proto.trace.v1.ResourceSpans", true, ""}}},
	{"TraceByIDMetrics", []field{{"inspectedBytes", 1, "uint64", false, ""}}},
	{"TraceByIDResponse", []field{{"trace", 1, ".tempopb.TraceV2", false, ""}, {"metrics", 2, ".tempopb.TraceByIDMetrics", false, ""},
		{"status", 3, ".tempopb.PartialStatus", false, ""}, {"message", 4, "string", false, ""}}},
	// TraceByIDResponse.trace is a tempopb.Trace whose JSON name is resourceSpans in v2.
	{"TraceV2", []field{{"resourceSpans", 1, ".opentelemetry.proto.trace.v1.ResourceSpans", true, ""}}},
}

var scalar = map[string]descriptorpb.FieldDescriptorProto_Type{
	"string": descriptorpb.FieldDescriptorProto_TYPE_STRING, "uint32": descriptorpb.FieldDescriptorProto_TYPE_UINT32,
	"uint64": descriptorpb.FieldDescriptorProto_TYPE_UINT64, "int64": descriptorpb.FieldDescriptorProto_TYPE_INT64,
	"double": descriptorpb.FieldDescriptorProto_TYPE_DOUBLE,
}

var file protoreflect.FileDescriptor

func init() {
	fd := &descriptorpb.FileDescriptorProto{
		Name:       ptr("weft_conformance/tempopb.proto"),
		Package:    ptr("tempopb"),
		Syntax:     ptr("proto3"),
		Dependency: []string{"opentelemetry/proto/common/v1/common.proto", "opentelemetry/proto/trace/v1/trace.proto"},
		EnumType: []*descriptorpb.EnumDescriptorProto{{
			Name: ptr("PartialStatus"),
			Value: []*descriptorpb.EnumValueDescriptorProto{
				{Name: ptr("COMPLETE"), Number: ptr(int32(0))}, {Name: ptr("PARTIAL"), Number: ptr(int32(1))},
			},
		}},
	}
	for _, m := range messages {
		md := &descriptorpb.DescriptorProto{Name: ptr(m.name)}
		for _, f := range m.fields {
			fp := &descriptorpb.FieldDescriptorProto{Name: ptr(f.name), Number: ptr(f.number), JsonName: ptr(jsonName(f.name))}
			label := descriptorpb.FieldDescriptorProto_LABEL_OPTIONAL
			if f.repeated {
				label = descriptorpb.FieldDescriptorProto_LABEL_REPEATED
			}
			switch {
			case f.mapOf != "":
				entry := strings.ToUpper(f.name[:1]) + f.name[1:] + "Entry"
				value := &descriptorpb.FieldDescriptorProto{Name: ptr("value"), Number: ptr(int32(2)), JsonName: ptr("value"),
					Label: descriptorpb.FieldDescriptorProto_LABEL_OPTIONAL.Enum()}
				if t, ok := scalar[f.mapOf]; ok {
					value.Type = t.Enum()
				} else {
					value.Type = descriptorpb.FieldDescriptorProto_TYPE_MESSAGE.Enum()
					value.TypeName = ptr(f.mapOf)
				}
				md.NestedType = append(md.NestedType, &descriptorpb.DescriptorProto{
					Name: ptr(entry),
					Field: []*descriptorpb.FieldDescriptorProto{
						{Name: ptr("key"), Number: ptr(int32(1)), JsonName: ptr("key"), Label: descriptorpb.FieldDescriptorProto_LABEL_OPTIONAL.Enum(),
							Type: descriptorpb.FieldDescriptorProto_TYPE_STRING.Enum()},
						value,
					},
					Options: &descriptorpb.MessageOptions{MapEntry: ptr(true)},
				})
				label = descriptorpb.FieldDescriptorProto_LABEL_REPEATED
				fp.Type = descriptorpb.FieldDescriptorProto_TYPE_MESSAGE.Enum()
				fp.TypeName = ptr(".tempopb." + m.name + "." + entry)
			case f.typ == ".tempopb.PartialStatus":
				fp.Type = descriptorpb.FieldDescriptorProto_TYPE_ENUM.Enum()
				fp.TypeName = ptr(f.typ)
			case f.typ[0] == '.':
				fp.Type = descriptorpb.FieldDescriptorProto_TYPE_MESSAGE.Enum()
				fp.TypeName = ptr(f.typ)
			default:
				fp.Type = scalar[f.typ].Enum()
			}
			fp.Label = label.Enum()
			md.Field = append(md.Field, fp)
		}
		fd.MessageType = append(fd.MessageType, md)
	}
	var err error
	file, err = protodesc.NewFile(fd, protoregistry.GlobalFiles)
	if err != nil {
		panic(fmt.Sprintf("building the tempopb descriptors: %v", err))
	}
}

// newMessage returns an empty tempopb message by name.
func newMessage(name string) *dynamicpb.Message {
	md := file.Messages().ByName(protoreflect.Name(name))
	if md == nil {
		panic("no message " + name)
	}
	return dynamicpb.NewMessage(md)
}

func ptr[T any](v T) *T { return &v }

// jsonName is protoc's JSON name of a field: underscores dropped, the next letter upper-cased.
func jsonName(name string) string {
	var b strings.Builder
	up := false
	for _, c := range name {
		if c == '_' {
			up = true
			continue
		}
		if up {
			b.WriteString(strings.ToUpper(string(c)))
		} else {
			b.WriteRune(c)
		}
		up = false
	}
	return b.String()
}
