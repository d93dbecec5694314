package io.weft.bench;

import io.weft.sdk.id.IdGenerator;
import io.weft.sdk.id.WyRand;
import java.util.concurrent.TimeUnit;
import org.openjdk.jmh.annotations.Benchmark;
import org.openjdk.jmh.annotations.BenchmarkMode;
import org.openjdk.jmh.annotations.Mode;
import org.openjdk.jmh.annotations.OutputTimeUnit;
import org.openjdk.jmh.annotations.Scope;
import org.openjdk.jmh.annotations.State;

/**
 * ID generation. weft draws from this thread's wyrand into a reused holder (IDs stay numbers
 * until hex is asked for); the OpenTelemetry Java SDK's {@code IdGenerator} returns hex strings.
 */
@BenchmarkMode(Mode.AverageTime)
@OutputTimeUnit(TimeUnit.NANOSECONDS)
@State(Scope.Thread)
public class IdBench {
  final IdGenerator weft = IdGenerator.random();
  final IdGenerator.TraceId holder = new IdGenerator.TraceId();
  final io.opentelemetry.sdk.trace.IdGenerator otel =
      io.opentelemetry.sdk.trace.IdGenerator.random();

  @Benchmark
  public long id_trace_id_weft() {
    IdGenerator.TraceId t = weft.nextTraceId(WyRand.current(), holder);
    return t.high ^ t.low;
  }

  @Benchmark
  public String id_trace_id_otel() {
    return otel.generateTraceId();
  }

  @Benchmark
  public long id_span_id_weft() {
    return weft.nextSpanId(WyRand.current());
  }

  @Benchmark
  public String id_span_id_otel() {
    return otel.generateSpanId();
  }
}
