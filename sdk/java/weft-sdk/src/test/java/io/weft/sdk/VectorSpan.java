package io.weft.sdk;

import io.opentelemetry.api.trace.SpanKind;
import io.opentelemetry.api.trace.StatusCode;
import io.weft.sdk.trace.AttributeList;
import io.weft.sdk.trace.InstrumentationScope;
import io.weft.sdk.trace.ReadableSpan;
import io.weft.sdk.trace.WeftSpanContext;
import java.util.List;

/** A span as an otlp.json vector describes it (input data for the encoder). */
final class VectorSpan implements ReadableSpan {
  WeftSpanContext context;
  long parentSpanId;
  boolean parentRemote;
  String name;
  SpanKind kind;
  long start;
  long end;
  AttributeList attributes;
  List<SpanEvent> events = List.of();
  int droppedEvents;
  List<SpanLink> links = List.of();
  int droppedLinks;
  StatusCode statusCode = StatusCode.UNSET;
  String statusMessage = "";
  InstrumentationScope scope;

  @Override
  public WeftSpanContext spanContext() {
    return context;
  }

  @Override
  public long traceIdHigh() {
    return context.traceIdHigh();
  }

  @Override
  public long traceIdLow() {
    return context.traceIdLow();
  }

  @Override
  public long spanId() {
    return context.spanIdLong();
  }

  @Override
  public byte traceFlags() {
    return context.flags();
  }

  @Override
  public io.weft.sdk.trace.WeftTraceState traceState() {
    return context.weftTraceState();
  }

  @Override
  public long parentSpanId() {
    return parentSpanId;
  }

  @Override
  public boolean parentRemote() {
    return parentRemote;
  }

  @Override
  public String name() {
    return name;
  }

  @Override
  public SpanKind kind() {
    return kind;
  }

  @Override
  public long startEpochNanos() {
    return start;
  }

  @Override
  public long endEpochNanos() {
    return end;
  }

  @Override
  public AttributeList attributes() {
    return attributes;
  }

  @Override
  public int eventCount() {
    return events.size();
  }

  @Override
  public String eventName(int i) {
    return events.get(i).name();
  }

  @Override
  public long eventEpochNanos(int i) {
    return events.get(i).epochNanos();
  }

  @Override
  public AttributeList eventAttributes(int i) {
    return events.get(i).attributes();
  }

  @Override
  public int droppedEvents() {
    return droppedEvents;
  }

  @Override
  public int linkCount() {
    return links.size();
  }

  @Override
  public WeftSpanContext linkContext(int i) {
    return links.get(i).context();
  }

  @Override
  public AttributeList linkAttributes(int i) {
    return links.get(i).attributes();
  }

  @Override
  public int droppedLinks() {
    return droppedLinks;
  }

  @Override
  public StatusCode statusCode() {
    return statusCode;
  }

  @Override
  public String statusMessage() {
    return statusMessage;
  }

  @Override
  public InstrumentationScope scope() {
    return scope;
  }
}
