// Samples root spans with @opentelemetry/sampler-jaeger-remote polling weft's /sampling, and
// prints how many of each operation it sampled, as JSON.
//
//   node remote.mjs http://127.0.0.1:5778 SERVICE N OP...
import { ROOT_CONTEXT, SpanKind } from "@opentelemetry/api";
import { JaegerRemoteSampler } from "@opentelemetry/sampler-jaeger-remote";
import { SamplingDecision, TraceIdRatioBasedSampler } from "@opentelemetry/sdk-trace";
import { randomBytes } from "node:crypto";

const [endpoint, service, n, ...ops] = process.argv.slice(2);
const sampler = new JaegerRemoteSampler({
  endpoint, serviceName: service, initialSampler: new TraceIdRatioBasedSampler(0.5), poolingInterval: 100,
});
const initial = sampler.toString();
const deadline = Date.now() + 15_000;
while (sampler.toString() === initial) {
  if (Date.now() > deadline) {
    console.error(`no strategy fetched within 15 s from ${endpoint}: ${initial}`);
    process.exit(2);
  }
  await new Promise((r) => setTimeout(r, 20));
}
const sampled = {};
for (const op of ops) {
  let count = 0;
  for (let i = 0; i < Number(n); i++) {
    const traceId = randomBytes(16).toString("hex");
    const d = sampler.shouldSample(ROOT_CONTEXT, traceId, op, SpanKind.SERVER, {}, []).decision;
    if (d === SamplingDecision.RECORD_AND_SAMPLED) count++;
  }
  sampled[op] = count;
}
console.log(JSON.stringify({ sampled }));
process.exit(0);
