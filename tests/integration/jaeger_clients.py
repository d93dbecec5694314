"""Real Jaeger clients (and the OpenTelemetry Zipkin protobuf exporter, which needs the same
older dependencies) sending one trace each, run with the interpreter of .venv-jaeger.

Usage: python jaeger_clients.py MODE ARGS... -> prints the trace ID (32 hex) on stdout.
  otel-udp HOST PORT        OpenTelemetry Jaeger thrift exporter, agent mode (compact thrift, UDP)
  otel-http URL...          OpenTelemetry Jaeger thrift exporter, collector mode (binary, HTTP),
                            the same spans to every URL
  jaeger-client HOST PORT   jaeger-client (Python) to the agent port (compact thrift, UDP)
  jaeger-binary HOST PORT   jaeger-client's own thrift types, emitBatch in the binary protocol
                            over UDP (the agent's port 6832)
  otel-zipkin-proto URL...  OpenTelemetry Zipkin exporter, protobuf over HTTP, the same spans
                            to every URL
  jaeger-remote HOST SAMPLING_PORT SERVICE N OP...
                            jaeger-client's remote sampler polling /sampling: prints the sampled
                            count of N root spans of each OP, as JSON
Each trace: a server root with tags of every type and a log, and a failing client child.
"""
import socket
import sys
import time


def otel(mode, *args):
    from opentelemetry.exporter.jaeger.thrift import JaegerExporter
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.trace import SpanKind, Status, StatusCode

    if mode == "otel-zipkin-proto":
        from opentelemetry.exporter.zipkin.proto.http import ZipkinExporter
        exps = [ZipkinExporter(endpoint=url) for url in args]
    elif mode == "otel-udp":
        exps = [JaegerExporter(agent_host_name=args[0], agent_port=int(args[1]))]
    else:
        # One exporter per collector URL: the same spans to each (weft and the real Jaeger).
        exps = [JaegerExporter(collector_endpoint=url) for url in args]
    p = TracerProvider(resource=Resource.create({"service.name": f"shop-{mode}", "host.name": "h-1"}))
    for exp in exps:
        p.add_span_processor(SimpleSpanProcessor(exp))
    t = p.get_tracer("shop.instrumentation", "2.1")
    with t.start_as_current_span("POST /cart", kind=SpanKind.SERVER) as r:
        r.set_attribute("http.method", "POST")
        r.set_attribute("items", 3)
        r.set_attribute("ratio", 0.5)
        r.set_attribute("cached", True)
        r.add_event("validated", {"rule": "max-items"})
        with t.start_as_current_span("INSERT cart", kind=SpanKind.CLIENT) as c:
            c.set_attribute("peer.service", "postgres")
            c.set_status(Status(StatusCode.ERROR, "deadlock"))
    p.shutdown()
    return format(r.get_span_context().trace_id, "032x")


def jaeger_client(host, port):
    from jaeger_client import Config

    cfg = Config(config={"sampler": {"type": "const", "param": 1},
                         "local_agent": {"reporting_host": host, "reporting_port": int(port)},
                         "logging": False}, service_name="legacy-api", validate=True)
    tracer = cfg.initialize_tracer()
    with tracer.start_span("GET /orders", tags={"span.kind": "server", "http.status_code": 200}) as s:
        s.log_kv({"event": "cache miss", "key": "orders:42"})
        with tracer.start_span("redis GET", child_of=s, tags={"span.kind": "client"}) as c:
            c.set_tag("error", True)
        tid = format(s.trace_id, "032x")
    time.sleep(0.3)
    tracer.close()
    time.sleep(1.0)
    return tid


def jaeger_binary(host, port):
    """emitBatch in the binary protocol, built with jaeger-client's generated thrift types."""
    import random

    from jaeger_client.thrift_gen.agent import Agent
    from jaeger_client.thrift_gen.jaeger import ttypes as j
    from thrift.protocol import TBinaryProtocol
    from thrift.Thrift import TMessageType
    from thrift.transport import TTransport

    tid_low, sid = random.getrandbits(63), random.getrandbits(63)
    now = int(time.time() * 1e6)
    span = j.Span(traceIdLow=tid_low, traceIdHigh=0, spanId=sid, parentSpanId=0, operationName="binary op",
                  flags=1, startTime=now, duration=1234,
                  tags=[j.Tag(key="span.kind", vType=j.TagType.STRING, vStr="producer"),
                        j.Tag(key="bytes", vType=j.TagType.LONG, vLong=42)])
    batch = j.Batch(process=j.Process(serviceName="binary-svc", tags=[
        j.Tag(key="hostname", vType=j.TagType.STRING, vStr="node-7")]), spans=[span])
    buf = TTransport.TMemoryBuffer()
    proto = TBinaryProtocol.TBinaryProtocol(buf)
    proto.writeMessageBegin("emitBatch", TMessageType.ONEWAY, 0)
    Agent.emitBatch_args(batch=batch).write(proto)
    proto.writeMessageEnd()
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.sendto(buf.getvalue(), (host, int(port)))
    return format(tid_low, "032x")


def jaeger_remote(host, sampling_port, service, n, *ops):
    """jaeger-client's remote-controlled sampler polling weft's /sampling: after a few polls,
    starts n root spans of each operation, spread evenly over one second, and prints
    {op: sampled} as JSON. (Its rate limiter starts with a random balance below its rate, so
    a burst could find it empty; over a second it earns the rate.)"""
    import json

    from jaeger_client import Config

    cfg = Config(config={"local_agent": {"sampling_host": host, "sampling_port": int(sampling_port),
                                         "reporting_host": host, "reporting_port": 9},
                         "sampling_refresh_interval": 0.2, "logging": False},
                 service_name=service, validate=True)
    tracer = cfg.new_tracer()
    deadline = time.time() + 15
    # The initial sampler is probabilistic 0.001; wait until a fetched strategy replaced it.
    initial = str(tracer.sampler.sampler)
    while str(tracer.sampler.sampler) == initial:
        if time.time() > deadline:
            sys.exit(f"no strategy fetched within 15 s: still {initial}")
        time.sleep(0.05)
    sampled = {}
    for op in ops:
        start, count = time.time(), 0
        for i in range(int(n)):
            time.sleep(max(0.0, start + i / int(n) - time.time()))
            count += tracer.start_span(op).is_sampled()
        sampled[op] = count
    tracer.close()
    return json.dumps({"sampled": sampled, "sampler": type(tracer.sampler.sampler).__name__})


if __name__ == "__main__":
    mode, args = sys.argv[1], sys.argv[2:]
    if mode.startswith("otel-"):
        print(otel(mode, *args))
    elif mode == "jaeger-client":
        print(jaeger_client(*args))
    elif mode == "jaeger-binary":
        print(jaeger_binary(*args))
    elif mode == "jaeger-remote":
        print(jaeger_remote(*args))
    else:
        sys.exit(f"unknown mode {mode}")
