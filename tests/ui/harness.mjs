// What every UI test file shares: a real `weft` (WEFT_BIN) on free ports, Debian's headless
// Chromium through playwright-core, and tracer providers of the OpenTelemetry JS SDK that export
// to that weft over OTLP/HTTP protobuf. Each test file starts its own weft and browser.
//
// Set WEFT_UI_STATIC_FILES=ui/dist to test a UI built with `npm run build` without rebuilding
// the server (weft reads it with `--ui-static-files`).

import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { mkdtempSync, mkdirSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, dirname } from "node:path";
import { createServer } from "node:net";
import { fileURLToPath } from "node:url";

import { chromium } from "playwright-core";
import { BatchSpanProcessor, TracerProvider } from "@opentelemetry/sdk-trace";
import { resourceFromAttributes } from "@opentelemetry/resources";
import { OTLPTraceExporter } from "@opentelemetry/exporter-trace-otlp-proto";

const here = dirname(fileURLToPath(import.meta.url));
/** Screenshots of each page land here. */
export const artifacts = join(here, "artifacts");
mkdirSync(artifacts, { recursive: true });
const CHROMIUM = process.env.CHROMIUM || "/usr/bin/chromium";

export function freePort() {
  return new Promise((resolve, reject) => {
    const s = createServer();
    s.unref();
    s.on("error", reject);
    s.listen(0, "127.0.0.1", () => {
      const { port } = s.address();
      s.close(() => resolve(port));
    });
  });
}

/**
 * Starts weft on free ports with an empty data directory (every other receiver off) and waits
 * until it is ready. Returns `{ base, otlpHttp, stop }`; `args` and `env` are added.
 */
export async function startWeft({ args = [], env = {} } = {}) {
  const bin = process.env.WEFT_BIN;
  assert.ok(bin, "WEFT_BIN names the weft binary");
  const dataDir = mkdtempSync(join(tmpdir(), "weft-ui-"));
  const [http, grpc, otlp] = [await freePort(), await freePort(), await freePort()];
  const base = `http://127.0.0.1:${http}`;
  const otlpHttp = `http://127.0.0.1:${otlp}/v1/traces`;
  const weft = spawn(bin, ["--data-dir", join(dataDir, "data"), "--http-port", `${http}`,
    "--otlp-grpc-port", `${grpc}`, "--otlp-http-port", `${otlp}`, ...args], {
    stdio: ["ignore", "ignore", "inherit"],
    env: {
      ...process.env, WEFT_ZIPKIN_PORT: "0", WEFT_JAEGER_HTTP_PORT: "0", WEFT_JAEGER_GRPC_PORT: "0",
      WEFT_JAEGER_QUERY_PORT: "0", WEFT_XRAY_PORT: "0", WEFT_JAEGER_COMPACT_PORT: "0",
      WEFT_JAEGER_BINARY_PORT: "0", WEFT_SAMPLING_HTTP_PORT: "0", WEFT_SAMPLING_GRPC_PORT: "0",
      WEFT_SAMPLING_INTERVAL: "1", ...env,
    },
  });
  for (let i = 0; ; i++) {
    try {
      if ((await fetch(`${base}/ready`)).ok) break;
    } catch { /* not up yet */ }
    assert.ok(i < 200, "weft became ready");
    await new Promise((r) => setTimeout(r, 100));
  }
  return {
    base,
    otlpHttp,
    stop: () => {
      weft.kill("SIGTERM");
      rmSync(dataDir, { recursive: true, force: true });
    },
  };
}

/** Debian's Chromium, headless. */
export function launchBrowser() {
  return chromium.launch({
    executablePath: CHROMIUM,
    args: ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run", "--disable-background-networking",
      "--disable-component-update", "--disable-sync"],
  });
}

/** A tracer provider for `service`, exporting to `otlpHttp` with the real OTLP/HTTP protobuf exporter. */
export function provider(otlpHttp, service, { idGenerator = undefined, headers = undefined } = {}) {
  return new TracerProvider({
    idGenerator,
    resource: resourceFromAttributes({ "service.name": service, "deployment.environment": "e2e" }),
    spanProcessors: [new BatchSpanProcessor({
      exporter: new OTLPTraceExporter({ url: otlpHttp, headers }),
      maxQueueSize: 250_000, maxExportBatchSize: 4096, scheduledDelayMillis: 50,
    })],
  });
}

/** OpenTelemetry's HrTime ([seconds, nanoseconds]) of epoch milliseconds; exact for whole ms. */
export function hrTime(ms) {
  return [Math.floor(ms / 1000), Math.round((ms % 1000) * 1e6)];
}

/**
 * Milliseconds, measured in the page with performance.now(), from clicking `clickSelector` until
 * `readySelector` matches and the next frame has been painted.
 */
export async function timeInPage(page, clickSelector, readySelector, timeoutMs = 30_000) {
  return page.evaluate(async ([click, ready, timeout]) => {
    const t0 = performance.now();
    document.querySelector(click).click();
    while (!document.querySelector(ready)) {
      if (performance.now() - t0 > timeout) throw new Error(`${ready} did not appear`);
      await new Promise((r) => setTimeout(r, 0));
    }
    await new Promise((r) => requestAnimationFrame(() => setTimeout(r, 0)));
    return performance.now() - t0;
  }, [clickSelector, readySelector, timeoutMs]);
}
