package io.weft.sdk.propagation;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertInstanceOf;
import static org.junit.jupiter.api.Assertions.assertNotNull;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertSame;

import io.opentelemetry.api.baggage.Baggage;
import io.opentelemetry.api.trace.Span;
import io.opentelemetry.api.trace.SpanContext;
import io.opentelemetry.api.trace.TraceFlags;
import io.opentelemetry.api.trace.TraceState;
import io.opentelemetry.context.Context;
import io.opentelemetry.context.ContextKey;
import io.opentelemetry.context.Scope;
import io.weft.sdk.TestCarrier;
import org.junit.jupiter.api.Test;

/**
 * An extract into the root context returns one small object ({@link RemoteParentContext}) that
 * must answer as {@code Context.root().with(span)} does, through every part of the API a caller
 * uses next.
 */
class RemoteParentContextTest {
  static final String TP = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
  static final ContextKey<String> OTHER = ContextKey.named("other");

  static Context extract(Context into) {
    return W3CTraceContextPropagator.getInstance().extract(into,
        new TestCarrier().add("traceparent", TP), TestCarrier.GETTER);
  }

  @Test
  void anExtractIntoTheRootIsOneObjectThatAnswersAsTheRootWithTheSpan() {
    assertNotNull(RemoteParentContext.ROOT, "the API's own root is in use here");
    Context ctx = extract(Context.root());
    assertInstanceOf(RemoteParentContext.class, ctx);
    SpanContext sc = Span.fromContext(ctx).getSpanContext();
    assertEquals("4bf92f3577b34da6a3ce929d0e0e4736", sc.getTraceId());
    assertEquals("00f067aa0ba902b7", sc.getSpanId());
    assertEquals(true, sc.isRemote());
    assertNull(ctx.get(OTHER));
    assertNull(Baggage.fromContextOrNull(ctx));
    Context same = Context.root().with(Span.fromContext(ctx));
    assertEquals(same.toString(), ctx.toString());

    // Another value: both are kept.
    Context more = ctx.with(OTHER, "x");
    assertEquals("x", more.get(OTHER));
    assertSame(Span.fromContext(ctx), Span.fromContext(more));
    assertNull(ctx.get(OTHER), "contexts are immutable");

    // A new span (the server span a caller starts under it) replaces the remote one.
    Span child = Span.wrap(SpanContext.create("4bf92f3577b34da6a3ce929d0e0e4736",
        "1111111111111111", TraceFlags.getSampled(), TraceState.getDefault()));
    Context withChild = ctx.with(child);
    assertSame(child, Span.fromContext(withChild));
    assertNull(withChild.get(OTHER));
    assertSame(child, Span.fromContext(more.with(child)));
    assertEquals("x", more.with(child).get(OTHER));

    // Made current and closed, as any context.
    try (Scope ignored = ctx.makeCurrent()) {
      assertSame(ctx, Context.current());
      assertEquals(sc, Span.current().getSpanContext());
    }
    assertSame(Context.root(), Context.current());
  }

  @Test
  void anExtractIntoAnyOtherContextKeepsItsValues() {
    Context base = Context.root().with(OTHER, "kept");
    Context ctx = extract(base);
    assertEquals("kept", ctx.get(OTHER));
    assertEquals("00f067aa0ba902b7", Span.fromContext(ctx).getSpanContext().getSpanId());
    // ... and into a context made by the extract: its span replaced, nothing else changed.
    Context again = extract(extract(Context.root()).with(OTHER, "y"));
    assertEquals("y", again.get(OTHER));
    assertEquals("00f067aa0ba902b7", Span.fromContext(again).getSpanContext().getSpanId());
  }
}
