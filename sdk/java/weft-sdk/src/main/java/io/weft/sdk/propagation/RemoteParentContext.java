package io.weft.sdk.propagation;

import io.opentelemetry.api.trace.Span;
import io.opentelemetry.context.Context;
import io.opentelemetry.context.ContextKey;
import io.weft.sdk.trace.WeftSpanContext;

/**
 * What an extract into the root context returns: the root with one entry, the remote span
 * context as the context's span. It answers {@code get} and {@code with} exactly as
 * {@code Context.root().with(span)} would.
 *
 * <p>Why not {@code Context.root().with(span)}: that is two objects, the API's context and a new
 * entries array, and a copy. This is one object of 16 bytes (traceparent_extract (weft_api):
 * 96 → 72 B, 4–5 ns side by side). A server extracts once per request, and usually only adds
 * its own span to the result, which {@link #with} gives in one step, as before. Any other value
 * (baggage) takes one step more than before: the root with the span, then the value.
 *
 * <p>Used only when the root is the API's own ({@link #ROOT}), not one a context bridge put in
 * its place (the OpenTelemetry Java agent returns its own root from {@code Context.root()} and
 * expects contexts built from it), and only when the span's key could be found ({@link #SPAN_KEY}).
 */
final class RemoteParentContext implements Context {
  /** The API's key for a context's span (package-private there), or null when not found. */
  private static final ContextKey<Span> SPAN_KEY = spanKey();

  /** The root this stands on, or null when this class is not used. */
  static final Context ROOT = usableRoot();

  private final WeftSpanContext span;

  private RemoteParentContext(WeftSpanContext span) {
    this.span = span;
  }

  /** {@code ctx.with(span)}, as one object when {@code ctx} is the root. */
  static Context with(Context ctx, WeftSpanContext span) {
    return ctx == ROOT && ROOT != null ? new RemoteParentContext(span) : ctx.with(span);
  }

  @Override
  @SuppressWarnings("unchecked")
  public <V> V get(ContextKey<V> key) {
    return key == SPAN_KEY ? (V) span : null;
  }

  @Override
  public <V> Context with(ContextKey<V> key, V value) {
    // A new span replaces this one, as in the API's context: straight from the root.
    return key == SPAN_KEY ? ROOT.with(key, value) : ROOT.with(span).with(key, value);
  }

  @Override
  public String toString() {
    return "{" + SPAN_KEY + "=" + span + "}";
  }

  /** Asks a span to store itself in a context that records the key it is given. */
  @SuppressWarnings("unchecked")
  private static ContextKey<Span> spanKey() {
    ContextKey<?>[] seen = new ContextKey<?>[1];
    Context recorder = new Context() {
      @Override
      public <V> V get(ContextKey<V> key) {
        return null;
      }

      @Override
      public <V> Context with(ContextKey<V> key, V value) {
        seen[0] = key;
        return this;
      }
    };
    try {
      Span.getInvalid().storeInContext(recorder);
    } catch (RuntimeException e) {
      return null;
    }
    return (ContextKey<Span>) seen[0];
  }

  /** The root, when it is the API's own and stores a span under {@link #SPAN_KEY}. */
  private static Context usableRoot() {
    try {
      Context root = Context.root();
      if (SPAN_KEY == null || !root.getClass().getName().startsWith("io.opentelemetry.context.")) {
        return null;
      }
      Span probe = Span.wrap(WeftSpanContext.create(1, 1, 1, (byte) 1,
          io.weft.sdk.trace.WeftTraceState.EMPTY));
      Context c = root.with(probe);
      return Span.fromContextOrNull(c) == probe && c.get(SPAN_KEY) == probe ? root : null;
    } catch (RuntimeException e) {
      return null;
    }
  }
}
