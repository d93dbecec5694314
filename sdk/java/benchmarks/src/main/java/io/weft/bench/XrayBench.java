package io.weft.bench;

import com.amazonaws.xray.entities.TraceHeader;
import com.amazonaws.xray.entities.TraceID;
import io.weft.sdk.id.IdGenerator;
import io.weft.sdk.id.WyRand;
import io.weft.sdk.id.XrayTraceId;
import io.weft.sdk.propagation.XrayPropagator;
import io.weft.sdk.trace.WeftSpanContext;
import java.util.concurrent.TimeUnit;
import org.openjdk.jmh.annotations.Benchmark;
import org.openjdk.jmh.annotations.BenchmarkMode;
import org.openjdk.jmh.annotations.Mode;
import org.openjdk.jmh.annotations.OutputTimeUnit;
import org.openjdk.jmh.annotations.Scope;
import org.openjdk.jmh.annotations.Setup;
import org.openjdk.jmh.annotations.State;

/**
 * X-Ray trace IDs beside the AWS X-Ray SDK for Java's {@code TraceID}: create, parse
 * ({@code fromString}) and serialise ({@code toString}) of the same ID; weft's X-Ray ID generator,
 * {@link XrayTraceId} and the X-Ray header of {@link XrayPropagator}.
 */
@BenchmarkMode(Mode.AverageTime)
@OutputTimeUnit(TimeUnit.NANOSECONDS)
@State(Scope.Thread)
public class XrayBench {
  static final String ID = "1-5759e988-bd862e3fe1be46a994272793";
  static final String HEADER =
      "Root=1-5759e988-bd862e3fe1be46a994272793;Parent=53995c3f42cd8ad8;Sampled=1";

  // Inputs read from fields of the state, not the constants: C2 may fold a parse of a constant
  // string (String.value is @Stable), which would flatter whichever SDK it happens to fold.
  String id = ID;
  String header = HEADER;
  final IdGenerator xray = IdGenerator.xray();
  final IdGenerator.TraceId holder = new IdGenerator.TraceId();
  final XrayTraceId parsed = new XrayTraceId();
  final char[] idBuf = new char[XrayTraceId.LEN];
  final char[] headerBuf = new char[XrayPropagator.LEN];
  TraceID awsId;
  WeftSpanContext ctx;

  @Setup
  public void setup() {
    awsId = TraceID.fromString(ID);
    ctx = XrayPropagator.parse(HEADER);
    awsId.toString();
  }

  @Benchmark
  public TraceID xray_create_aws() {
    return TraceID.create();
  }

  @Benchmark
  public long xray_create_weft() {
    IdGenerator.TraceId t = xray.nextTraceId(WyRand.current(), holder);
    return t.high ^ t.low;
  }

  @Benchmark
  public TraceID xray_parse_aws() {
    return TraceID.fromString(id);
  }

  @Benchmark
  public long xray_parse_weft() {
    if (!parsed.parse(id, 0, id.length())) {
      throw new AssertionError();
    }
    return parsed.high ^ parsed.low;
  }

  /** The AWS SDK's parse of the whole header, the like-for-like peer of the row below. */
  @Benchmark
  public TraceHeader xray_parse_aws_header() {
    return TraceHeader.fromString(header);
  }

  @Benchmark
  public WeftSpanContext xray_parse_weft_header() {
    return XrayPropagator.parse(header);
  }

  @Benchmark
  public String xray_serialize_aws() {
    return awsId.toString();
  }

  /** The ID's string, built once per context and cached (the AWS SDK's own fix, taken further). */
  @Benchmark
  public String xray_serialize_weft() {
    return ctx.xrayTraceId();
  }

  /** Formatting into a reused buffer, every time. */
  @Benchmark
  public char[] xray_serialize_weft_buffer() {
    XrayTraceId.format(ctx.traceIdHigh(), ctx.traceIdLow(), idBuf, 0);
    return idBuf;
  }

  /** The whole X-Ray header, as the propagator injects it (cached per context). */
  @Benchmark
  public String xray_serialize_weft_header() {
    return ctx.xrayHeader(XrayPropagator::header);
  }
}
