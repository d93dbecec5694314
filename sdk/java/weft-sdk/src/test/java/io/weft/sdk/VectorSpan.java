package io.weft.sdk;

import io.opentelemetry.api.trace.SpanKind;
import io.opentelemetry.api.trace.StatusCode;
import io.weft.sdk.trace.AttributeList;
import io.weft.sdk.trace.InstrumentationScope;
import io.weft.sdk.trace.ReadableSpan;
import io.weft.sdk.trace.SpanEvent;
import io.weft.sdk.trace.SpanLink;
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
  public List<SpanEvent> events() {
    return events;
  }

  @Override
  public int droppedEvents() {
    return droppedEvents;
  }

  @Override
  public List<SpanLink> links() {
    return links;
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
