// The OpenTelemetry JS SDK's Zipkin exporter sending one trace to every endpoint given
// (`.../api/v2/spans`): a server root with attributes of every type and an event, a failing
// client child with `peer.service`, and an internal span. Prints the trace ID.
//
// Usage: node report.mjs http://host:port/api/v2/spans [more endpoints...]
import { SpanKind, SpanStatusCode, context, trace } from '@opentelemetry/api';
import { ZipkinExporter } from '@opentelemetry/exporter-zipkin';
import { resourceFromAttributes } from '@opentelemetry/resources';
import { BasicTracerProvider, SimpleSpanProcessor } from '@opentelemetry/sdk-trace-base';

const exporters = process.argv.slice(2).map((url) => new ZipkinExporter({ url }));
const provider = new BasicTracerProvider({
  resource: resourceFromAttributes({ 'service.name': 'shop-js', 'host.name': 'h-3' }),
  spanProcessors: exporters.map((e) => new SimpleSpanProcessor(e)),
});
const tracer = provider.getTracer('shop.instrumentation', '4.0');
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

const root = tracer.startSpan('POST /cart', { kind: SpanKind.SERVER });
root.setAttributes({ 'http.method': 'POST', items: 3, ratio: 0.5, cached: true });
root.addEvent('validated', { rule: 'max-items' });
const ctx = trace.setSpan(context.active(), root);
const db = tracer.startSpan('INSERT cart', { kind: SpanKind.CLIENT }, ctx);
db.setAttribute('peer.service', 'postgres');
db.setStatus({ code: SpanStatusCode.ERROR, message: 'deadlock' });
await sleep(2);
db.end();
const local = tracer.startSpan('render', {}, ctx);
await sleep(1);
local.end();
root.end();
await provider.forceFlush();
await provider.shutdown();
console.log(root.spanContext().traceId);
