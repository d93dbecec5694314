package io.weft.sdk.trace;

import io.weft.sdk.id.IdGenerator;
import io.weft.sdk.sampling.Sampler;

/** What every tracer of one provider shares. */
final class TracerSharedState {
  final Sampler sampler;
  final IdGenerator idGenerator;
  final SpanLimits limits;
  final SpanSink sink;
  volatile boolean shutdown;

  TracerSharedState(Sampler sampler, IdGenerator idGenerator, SpanLimits limits, SpanSink sink) {
    this.sampler = sampler;
    this.idGenerator = idGenerator;
    this.limits = limits;
    this.sink = sink;
  }
}
