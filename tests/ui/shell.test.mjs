// End-to-end tests of the UI's shell and the pages around the trace view: the search pickers'
// round trip through a shared link, the trace-ID jump, service colours, tenants, the theme, the
// service graph's zoom, and the RED view (/monitor). The real `weft` binary (WEFT_BIN), traces
// sent by the OpenTelemetry JS SDK, Debian's headless Chromium. Regression tests name the bug
// of issue 48 they pin.
//
// Run: scripts/test-ui.sh shell.test.mjs

import { test, before, after } from "node:test";
import assert from "node:assert/strict";
import { join } from "node:path";

import { context, trace, SpanKind, SpanStatusCode } from "@opentelemetry/api";
import { artifacts, launchBrowser, provider as providerFor, startWeft } from "./harness.mjs";

let weft, base, otlpHttp, browser;

before(async () => {
  weft = await startWeft();
  ({ base, otlpHttp } = weft);
  browser = await launchBrowser();
});

after(async () => {
  await browser?.close();
  weft?.stop();
});

const ms = (x) => [Math.floor(x / 1000), Math.round((x % 1000) * 1e6)]; // HrTime
const VIEW = { viewport: { width: 1400, height: 900 } };

/**
 * Sends, for each `[service, operation, child service, child operation]`, a trace of a server
 * span and one child, from `startMs` on, `everyMs` apart; returns their trace and span IDs.
 */
async function sendTraces(url, calls, { startMs = Date.now() - 120_000, everyMs = 1000, headers, error = () => false } = {}) {
  const providers = new Map();
  const tracer = (s) => {
    if (!providers.has(s)) providers.set(s, providerFor(url, s, { headers }));
    return providers.get(s).getTracer("shell");
  };
  const out = [];
  calls.forEach(([svc, op, childSvc, childOp], i) => {
    const t0 = startMs + i * everyMs;
    const root = tracer(svc).startSpan(op, { kind: SpanKind.SERVER, startTime: ms(t0) });
    let child = null;
    if (childSvc) {
      child = tracer(childSvc).startSpan(childOp, { kind: SpanKind.SERVER, startTime: ms(t0 + 5) }, trace.setSpan(context.active(), root));
      if (error(i)) child.setStatus({ code: SpanStatusCode.ERROR, message: "failed" });
      child.end(ms(t0 + 25 + (i % 7)));
    }
    if (error(i)) root.setStatus({ code: SpanStatusCode.ERROR, message: "failed" });
    root.end(ms(t0 + 40 + (i % 11)));
    out.push({ traceId: root.spanContext().traceId, spanId: root.spanContext().spanId, childSpanId: child?.spanContext().spanId });
  });
  for (const p of providers.values()) {
    await p.forceFlush();
    await p.shutdown();
  }
  return out;
}

/** The option values of a <select>. */
const options = (page, sel) => page.locator(`${sel} option`).evaluateAll((os) => os.map((o) => o.value));

let shop;

test("bug 1: a service and an operation picked, searched and shared keep their pickers after a reload", async () => {
  shop = await sendTraces(otlpHttp, [
    ["shop", "GET /cart", "stock", "Reserve"],
    ["shop", "POST /pay", "stock", "Release"],
    ["shop", "POST /pay", "stock", "Reserve"],
  ]);
  const page = await browser.newPage(VIEW);
  await page.goto(`${base}/search?range=15m`);
  await page.waitForFunction(() => [...document.querySelectorAll("#f-service option")].some((o) => o.value === "shop"));
  await page.selectOption("#f-service", "shop");
  await page.waitForFunction(() => [...document.querySelectorAll("#f-op option")].some((o) => o.value === "POST /pay"));
  await page.selectOption("#f-op", "POST /pay");
  const q = '{ resource.service.name = "shop" && name = "POST /pay" }';
  assert.equal(await page.getByTestId("traceql").inputValue(), q);
  await page.getByTestId("search-run").click();
  await page.waitForURL(/\/search\?q=/);
  assert.equal(new URL(page.url()).searchParams.get("q"), q);
  await page.getByTestId("result-row").first().waitFor({ timeout: 15_000 });
  assert.equal(await page.getByTestId("result-row").count(), 2);
  const note = page.locator(".builder-note");
  const check = async (p, when) => {
    assert.equal(await p.locator(".builder-note").innerText(), "", `${when}: no "more than the pickers can show" note`);
    assert.equal(await p.locator("form.custom-query").count(), 0, `${when}: the pickers are not greyed out`);
    assert.equal(await p.locator("#f-service").inputValue(), "shop", `${when}: service picker`);
    await p.waitForFunction(() => !document.querySelector("#f-op[aria-busy]"));
    assert.equal(await p.locator("#f-op").inputValue(), "POST /pay", `${when}: operation picker`);
  };
  await check(page, "after searching");
  assert.equal(await note.count(), 1);

  // The shared link, opened afresh, and a reload, show the same pickers and results.
  const shared = page.url();
  const other = await browser.newPage(VIEW);
  await other.goto(shared);
  await other.getByTestId("result-row").first().waitFor({ timeout: 15_000 });
  await check(other, "shared link");
  assert.equal(await other.getByTestId("result-row").count(), 2);
  await other.reload();
  await other.getByTestId("result-row").first().waitFor({ timeout: 15_000 });
  await check(other, "reload");
  // The operation list holds the service's operations only.
  assert.deepEqual((await options(other, "#f-op")).sort(), ["", "GET /cart", "POST /pay"]);
  await other.screenshot({ path: join(artifacts, "shell-pickers.png") });
  await other.close();
  await page.close();
});

test("bug 2: right after a service is picked, the operation list offers none of the other services' operations", async () => {
  assert.ok(shop, "the first test sent the traces");
  const page = await browser.newPage(VIEW);
  // Hold back the service's operations, as a slow server would.
  let release;
  const held = new Promise((r) => { release = r; });
  await page.route(/\/api\/v2\/search\/tag\/name\/values\?.*q=/, async (route) => {
    await held;
    await route.continue();
  });
  await page.goto(`${base}/search?range=15m`);
  // With no service picked, the list offers every operation.
  await page.waitForFunction(() => [...document.querySelectorAll("#f-op option")].some((o) => o.value === "Reserve"));
  await page.waitForFunction(() => [...document.querySelectorAll("#f-service option")].some((o) => o.value === "shop"));
  await page.selectOption("#f-service", "shop");
  const pending = await options(page, "#f-op");
  assert.ok(!pending.includes("Reserve") && !pending.includes("Release"), `while loading, no operation of stock: ${pending}`);
  release();
  await page.waitForFunction(() => [...document.querySelectorAll("#f-op option")].some((o) => o.value === "POST /pay"));
  assert.deepEqual((await options(page, "#f-op")).sort(), ["", "GET /cart", "POST /pay"]);
  await page.close();
});

test("bug 6: Go to trace ID takes a bare ID, a weft trace URL with ?span= and a Jaeger UI URL with ?uiFind=", async () => {
  assert.ok(shop, "the first test sent the traces");
  const { traceId, spanId, childSpanId } = shop[1];
  const page = await browser.newPage(VIEW);
  await page.goto(`${base}/search?range=15m`);
  const jump = page.getByLabel("Go to trace ID");
  const go = async (text) => {
    await jump.fill(text);
    await jump.press("Enter");
  };
  await go(`http://weft.example:3200/trace/${traceId}?span=${childSpanId}`);
  await page.waitForURL(`**/trace/${traceId}?span=${childSpanId}`);
  await page.getByTestId("span-panel").getByText("Release").waitFor();

  await go(`https://jaeger.example/trace/${traceId}?uiFind=${spanId}`);
  await page.waitForURL(`**/trace/${traceId}?span=${spanId}`);
  await page.getByTestId("span-panel").getByText("POST /pay").waitFor();

  await page.goto(`${base}/search`);
  await go(`  ${traceId} `);
  await page.waitForURL(`**/trace/${traceId}`);
  await page.getByTestId("trace-loaded").waitFor({ state: "attached" });
  await page.close();
});

test("bug 5: a service has the same colour on every page and after a reload, whatever the order it is seen in", async () => {
  // More services than the palette has colours, seen newest first on the search page (reverse
  // order of names) and by name on the graph.
  const names = Array.from({ length: 22 }, (_, i) => `colour-${String.fromCharCode(97 + i)}`);
  await sendTraces(otlpHttp, names.map((n) => [n, "work", "colour-sink", "sink"]));
  const page = await browser.newPage(VIEW);
  const swatches = (p) => p.locator('[data-testid="result-row"]').evaluateAll((rows) =>
    Object.fromEntries(rows.map((r) => [r.querySelector(".trace-link b").textContent, r.querySelector(".swatch").style.background])));
  const q = encodeURIComponent('{ resource.service.name =~ "colour-.*" && name = "work" }');
  await page.goto(`${base}/search?q=${q}&range=15m&limit=50`);
  await page.waitForFunction(() => document.querySelectorAll('[data-testid="result-row"]').length === 22, null, { timeout: 15_000 });
  const onSearch = await swatches(page);
  assert.equal(Object.keys(onSearch).length, 22);

  await page.goto(`${base}/graph?range=15m`);
  await page.locator('[data-testid="graph-node"][data-service="colour-a"]').waitFor({ state: "attached", timeout: 15_000 });
  const onGraph = await page.locator('[data-testid="graph-node"]').evaluateAll((ns) =>
    Object.fromEntries(ns.map((n) => [n.getAttribute("data-service"), n.querySelector(".node-stripe").getAttribute("fill")])));
  // Seen first on a fresh page, one service alone.
  const single = await browser.newPage(VIEW);
  await single.goto(`${base}/search?q=${encodeURIComponent('{ resource.service.name = "colour-v" && name = "work" }')}&range=15m`);
  await single.getByTestId("result-row").first().waitFor({ timeout: 15_000 });
  const alone = await swatches(single);
  await single.close();

  const rgb = (c) => {
    if (c.startsWith("rgb")) return c.replace(/\s/g, "");
    const n = parseInt(c.slice(1), 16);
    return `rgb(${n >> 16},${(n >> 8) & 255},${n & 255})`;
  };
  for (const n of names) assert.equal(rgb(onGraph[n]), rgb(onSearch[n]), `${n}: graph and search`);
  assert.equal(rgb(alone["colour-v"]), rgb(onSearch["colour-v"]), "colour-v alone and among the others");
  await page.close();
});

test("the theme picker switches light and dark, is remembered, and a reload paints the chosen theme first", async () => {
  const ctx = await browser.newContext({ ...VIEW, colorScheme: "light" });
  const page = await ctx.newPage();
  const bg = () => page.evaluate(() => getComputedStyle(document.body).backgroundColor);
  await page.goto(`${base}/search`);
  const picker = page.getByLabel("Theme");
  assert.equal(await picker.inputValue(), "system");
  const light = await bg();
  await picker.selectOption("dark");
  const dark = await bg();
  assert.notEqual(dark, light, "dark differs from light");
  assert.equal(await page.evaluate(() => getComputedStyle(document.documentElement).colorScheme), "dark");
  await page.screenshot({ path: join(artifacts, "shell-dark.png") });

  // Reloaded with the app's script held back: the page is dark before any of it runs.
  let release;
  const held = new Promise((r) => { release = r; });
  await page.route("**/assets/app.js", async (route) => { await held; await route.continue(); });
  await page.reload({ waitUntil: "commit" });
  await page.waitForFunction(() => document.body !== null);
  await page.waitForFunction(() => getComputedStyle(document.body).backgroundColor !== "rgba(0, 0, 0, 0)");
  assert.equal(await bg(), dark, "the first paint is dark");
  release();
  await page.getByLabel("Theme").waitFor();
  assert.equal(await page.getByLabel("Theme").inputValue(), "dark");

  // System: follows the OS; light overrides a dark OS.
  await page.getByLabel("Theme").selectOption("system");
  assert.equal(await bg(), light);
  await page.emulateMedia({ colorScheme: "dark" });
  assert.equal(await bg(), dark, "system follows the OS into dark");
  await page.getByLabel("Theme").selectOption("light");
  assert.equal(await bg(), light, "light overrides a dark OS");
  await page.reload();
  assert.equal(await page.getByLabel("Theme").inputValue(), "light");
  assert.equal(await bg(), light);
  await ctx.close();
});

test("bug 3: with --multitenancy the UI asks for a tenant, sends it on every request, and the picker switches tenants", async () => {
  const mt = await startWeft({ env: { WEFT_MULTITENANCY: "true" } });
  try {
    const a = await sendTraces(mt.otlpHttp, [["alpha", "GET /a", "alpha-db", "query"]], { headers: { "X-Scope-OrgID": "tenant-a" } });
    // beta's second trace links to its first: the span panel checks the link with a HEAD request.
    const b = await sendTraces(mt.otlpHttp, [["beta", "GET /b", "beta-db", "query"]], { headers: { "X-Scope-OrgID": "tenant-b" } });
    const pb = providerFor(mt.otlpHttp, "beta", { headers: { "X-Scope-OrgID": "tenant-b" } });
    const linked = pb.getTracer("shell").startSpan("retry", {
      kind: SpanKind.SERVER, startTime: ms(Date.now() - 60_000),
      links: [{ context: { traceId: b[0].traceId, spanId: b[0].spanId, traceFlags: 1 } }],
    });
    linked.end(ms(Date.now() - 59_000));
    await pb.forceFlush();
    await pb.shutdown();

    const ctx = await browser.newContext(VIEW);
    const page = await ctx.newPage();
    const apiRequests = [];
    page.on("request", (r) => {
      if (new URL(r.url()).pathname.startsWith("/api/")) apiRequests.push({ url: r.url(), method: r.method(), tenant: r.headers()["x-scope-orgid"] });
    });
    await page.goto(`${mt.base}/search?range=15m`);
    // Without a tenant: a prompt that asks for one, not a broken page.
    const prompt = page.getByTestId("auth-prompt");
    await prompt.waitFor();
    assert.equal(await prompt.getAttribute("data-need"), "tenant");
    assert.match(await prompt.innerText(), /X-Scope-OrgID/);
    await page.screenshot({ path: join(artifacts, "shell-tenant-prompt.png") });
    apiRequests.length = 0;
    await page.getByTestId("auth-prompt-input").fill("tenant-a");
    await page.getByTestId("auth-prompt-input").press("Enter");
    const rowsOf = async () => {
      await page.getByTestId("result-row").first().waitFor({ timeout: 15_000 });
      return page.getByTestId("result-row").evaluateAll((rs) => rs.map((r) => r.querySelector(".trace-link b").textContent));
    };
    assert.deepEqual(await rowsOf(), ["alpha"]);
    assert.equal(await page.getByTestId("tenant").inputValue(), "tenant-a", "the top bar shows the tenant");
    await page.waitForFunction(() => [...document.querySelectorAll("#f-service option")].some((o) => o.value === "alpha"));
    assert.ok(!(await options(page, "#f-service")).includes("beta"), "the service picker lists tenant-a's services");

    // The top bar's picker switches what the user sees.
    await page.getByTestId("tenant").fill("tenant-b");
    await page.getByTestId("tenant").press("Enter");
    await page.waitForFunction(() => [...document.querySelectorAll('[data-testid="result-row"] .trace-link b')].every((b) => b.textContent === "beta")
      && document.querySelectorAll('[data-testid="result-row"]').length === 2, null, { timeout: 15_000 });
    // Remembered by the browser: a reload stays on tenant-b; the trace (protobuf) and the
    // linked trace (HEAD) are fetched as tenant-b too.
    await page.reload();
    assert.deepEqual(await rowsOf(), ["beta", "beta"]);
    await page.goto(`${mt.base}/trace/${linked.spanContext().traceId}?span=${linked.spanContext().spanId}`);
    await page.getByTestId("span-panel").getByTestId("span-link").waitFor();
    assert.ok(apiRequests.some((r) => r.method === "HEAD"), "the link was checked with a HEAD request");
    assert.ok(apiRequests.some((r) => /\/api\/v2\/traces\//.test(r.url) && r.method === "GET"));
    const without = apiRequests.filter((r) => !r.tenant);
    assert.deepEqual(without, [], "every API request after the tenant was picked names it");
    await page.goto(`${mt.base}/trace/${a[0].traceId}`);
    await page.getByTestId("not-found").waitFor(); // tenant-a's trace is not tenant-b's
    await ctx.close();
  } finally {
    mt.stop();
  }
});

test("bug 3: with auth_tokens the UI asks for a bearer token and sends it", async () => {
  const { writeFileSync, mkdtempSync } = await import("node:fs");
  const { tmpdir } = await import("node:os");
  const cfg = join(mkdtempSync(join(tmpdir(), "weft-ui-cfg-")), "weft.yaml");
  writeFileSync(cfg, "auth_tokens: {t0k3n-a: tenant-a}\n");
  const tw = await startWeft({ args: ["--config", cfg] });
  try {
    await sendTraces(tw.otlpHttp, [["gamma", "GET /g"]], { headers: { Authorization: "Bearer t0k3n-a" } });
    const ctx = await browser.newContext(VIEW);
    const page = await ctx.newPage();
    await page.goto(`${tw.base}/search?range=15m`);
    const prompt = page.getByTestId("auth-prompt");
    await prompt.waitFor();
    assert.equal(await prompt.getAttribute("data-need"), "token");
    assert.equal(await page.getByTestId("token").isVisible(), true, "the top bar shows the token field");
    assert.equal(await page.getByTestId("tenant").isVisible(), false, "no tenant field: the token decides the tenant");
    await page.getByTestId("auth-prompt-input").fill("wrong");
    await page.getByTestId("auth-prompt-input").press("Enter");
    await page.getByText("This weft did not accept the token").waitFor();
    await page.getByTestId("auth-prompt-input").fill("t0k3n-a");
    await page.getByTestId("auth-prompt-input").press("Enter");
    await page.locator('[data-testid="result-row"]', { hasText: "gamma" }).waitFor({ timeout: 15_000 });
    await ctx.close();
  } finally {
    tw.stop();
  }
});

/** The metrics API's answer to a chart's query, over the chart's range and step. */
async function chartQuery(page, testid) {
  const card = page.getByTestId(testid);
  const [q, startMs, endMs, stepMs] = await Promise.all(["data-query", "data-start-ms", "data-end-ms", "data-step-ms"].map((a) => card.getAttribute(a)));
  const u = new URL(`${base}/api/metrics/query_range`);
  u.search = new URLSearchParams({ q, start: `${Number(startMs) / 1000}`, end: `${Number(endMs) / 1000}`, step: `${Number(stepMs) / 1000}s` }).toString();
  const r = await fetch(u);
  assert.equal(r.status, 200, `${q}: ${await r.clone().text()}`);
  return { q, stepMs, body: await r.json() };
}

/** The points a chart drew, by series name: [[timestampMs, value], …]. */
const drawn = (page, testid) => page.getByTestId(testid).locator('[data-testid="chart-series"]').evaluateAll((ps) =>
  Object.fromEntries(ps.map((p) => [p.getAttribute("data-series"),
    (p.getAttribute("data-points") || "").split(";").filter(Boolean).map((x) => x.split(":").map(Number))])));
const samples = (s) => (s?.samples || []).map((p) => [Number(p.timestampMs), p.value]);

test("monitor: the RED view draws what the metrics API computes, exemplars open a trace, rows and charts drill into search", async () => {
  // 40 traces over the last 12 minutes, every 5th failing: mon-api serves GET /orders and
  // GET /items and calls mon-db.
  const sent = await sendTraces(otlpHttp, Array.from({ length: 40 }, (_, i) =>
    ["mon-api", i % 2 ? "GET /items" : "GET /orders", "mon-db", "SELECT"]), { startMs: Date.now() - 12 * 60_000, everyMs: 17_000, error: (i) => i % 5 === 0 });
  const ids = new Set(sent.map((s) => s.traceId));
  const page = await browser.newPage(VIEW);
  await page.goto(`${base}/monitor?range=15m`);
  const row = (name) => page.locator(`[data-testid="monitor-row"][data-name="${name}"]`);
  await row("mon-api").waitFor({ timeout: 20_000 });
  assert.ok(Math.abs(Number(await row("mon-api").getAttribute("data-error-ratio")) - 8 / 40) < 1e-9, "8 of mon-api's 40 server spans failed");
  await page.screenshot({ path: join(artifacts, "monitor.png") });
  const traces = new URL(await row("mon-api").getByTestId("monitor-row-search").getAttribute("href"), base);
  assert.equal(traces.pathname, "/search");
  assert.equal(traces.searchParams.get("q"), '{ resource.service.name = "mon-api" }', "a service's Traces button searches it");
  assert.equal(traces.searchParams.get("range"), "15m");

  // A service's row (Enter on it, or a click) opens its charts and operations; the URL holds the state.
  await row("mon-api").focus();
  await page.keyboard.press("Enter");
  await page.waitForURL(/\/monitor\?service=mon-api/);
  assert.equal(new URL(page.url()).searchParams.get("range"), "15m");
  await row("GET /orders").waitFor({ timeout: 20_000 });
  await page.getByTestId("chart-duration").locator('[data-testid="chart-series"]').first().waitFor({ state: "attached" });

  // The charts' points are the API's for the same query.
  const rate = await chartQuery(page, "chart-rate");
  assert.equal(rate.q, '{ resource.service.name = "mon-api" && kind = server } | rate()');
  const rateDrawn = (await drawn(page, "chart-rate")).rate;
  assert.ok(rateDrawn.length > 5, `the rate chart has points: ${rateDrawn.length}`);
  assert.deepEqual(rateDrawn, samples(rate.body.series[0]));
  const dur = await chartQuery(page, "chart-duration");
  assert.equal(dur.q, '{ resource.service.name = "mon-api" && kind = server } | quantile_over_time(duration, .5, .95, .99)');
  const durDrawn = await drawn(page, "chart-duration");
  for (const [name, p] of [["p50", 0.5], ["p95", 0.95], ["p99", 0.99]]) {
    const s = dur.body.series.find((x) => x.labels.some((l) => l.key === "p" && l.value.doubleValue === p));
    assert.ok(durDrawn[name].length > 5, `${name} has points`);
    assert.deepEqual(durDrawn[name], samples(s), name);
  }
  const errs = await chartQuery(page, "chart-errors");
  assert.equal(errs.q, '{ resource.service.name = "mon-api" && kind = server && status = error } | rate()');
  const errAt = new Map(samples(errs.body.series[0]));
  const ratio = samples(rate.body.series[0]).filter(([, r]) => r > 0).map(([t, r]) => [t, (errAt.get(t) ?? 0) / r]);
  assert.deepEqual((await drawn(page, "chart-errors"))["error rate"], ratio, "error rate = errors/s over requests/s, step by step");
  // The failed spans' exemplars sit on the error-rate line, at the step (a multiple of the step,
  // as the API aligns them) that holds them.
  const errExemplars = page.getByTestId("chart-errors").getByTestId("exemplar");
  assert.ok((await errExemplars.count()) > 0, "the error chart shows the failed spans' exemplars");
  for (const id of await errExemplars.evaluateAll((es) => es.map((e) => e.getAttribute("data-trace-id")))) {
    assert.ok(ids.has(id), `an error exemplar is one of the traces sent: ${id}`);
  }
  await page.screenshot({ path: join(artifacts, "monitor-service.png") });

  // An exemplar opens its trace at its span.
  const ex = page.getByTestId("chart-duration").getByTestId("exemplar").first();
  const exId = await ex.getAttribute("data-trace-id");
  const exSpan = await ex.getAttribute("data-span-id");
  assert.ok(ids.has(exId), `the exemplar is one of the traces sent: ${exId}`);
  await ex.click();
  await page.waitForURL(`**/trace/${exId}?span=${exSpan}`);
  await page.getByTestId("span-panel").waitFor();
  await page.goBack();

  // An operation's row searches its traces over the same range; the pickers show it.
  await row("GET /orders").click();
  await page.waitForURL(/\/search\?/);
  const sp = new URL(page.url()).searchParams;
  assert.equal(sp.get("q"), '{ resource.service.name = "mon-api" && name = "GET /orders" }');
  assert.equal(sp.get("range"), "15m");
  await page.getByTestId("result-row").first().waitFor({ timeout: 15_000 });
  assert.equal(await page.getByTestId("result-row").count(), 20);
  assert.equal(await page.locator("#f-service").inputValue(), "mon-api");
  await page.goBack();

  // A click on the error chart searches the failed spans of that step.
  await page.getByTestId("chart-errors").locator("svg").waitFor();
  const box = await page.getByTestId("chart-errors").locator("svg").boundingBox();
  await page.mouse.click(box.x + box.width * 0.6, box.y + box.height / 2);
  await page.waitForURL(/\/search\?/);
  const cp = new URL(page.url()).searchParams;
  assert.equal(cp.get("q"), '{ resource.service.name = "mon-api" && status = error }');
  assert.ok(Number(cp.get("end")) > Number(cp.get("start")) && !cp.get("range"), "the step's own time range");
  assert.equal(Number(cp.get("start")) % (Number(errs.stepMs) / 1000), 0, `one of the API's steps: ${cp}`);
  await page.close();
});

/** Sends one trace that is a chain of calls through `services`, each span the child of the one
 * before, with attribute suite=graph. */
async function sendChain(url, services, startMs) {
  const providers = new Map();
  const tracer = (s) => {
    if (!providers.has(s)) providers.set(s, providerFor(url, s));
    return providers.get(s).getTracer("shell");
  };
  const spans = [];
  let ctx = context.active();
  services.forEach((s, i) => {
    const span = tracer(s).startSpan(`call ${s}`, { kind: SpanKind.SERVER, startTime: ms(startMs + i), attributes: { suite: "graph" } }, ctx);
    ctx = trace.setSpan(ctx, span);
    spans.push(span);
  });
  spans.reverse().forEach((s, i) => s.end(ms(startMs + 100 + i)));
  for (const p of providers.values()) {
    await p.forceFlush();
    await p.shutdown();
  }
}

test("bug 4: a 27-service graph fits its card, zooms and pans (buttons, keys, drag), labels clear the boxes, 1 span is singular", async () => {
  // Ten columns: g0, then three chains of nine; calls that skip a column cross the boxes of
  // the column between.
  const g = (i) => `g${String(i).padStart(2, "0")}`;
  const col = (c) => [1, 2, 3].map((k) => 3 * (c - 1) + k).filter((i) => i <= 26);
  const t0 = Date.now() - 5 * 60_000;
  for (let k = 0; k < 3; k++) {
    const chain = [g(0)];
    for (let c = 1; c <= 9; c++) if (col(c)[k] !== undefined) chain.push(g(col(c)[k]));
    await sendChain(otlpHttp, chain, t0 + k * 1000);
    for (let c = 1; c + 2 <= 8; c += 2) await sendChain(otlpHttp, [g(col(c)[k]), g(col(c + 2)[k])], t0 + 10_000 + k * 1000 + c);
  }
  const page = await browser.newPage(VIEW);
  await page.goto(`${base}/graph?range=15m&q=${encodeURIComponent('{ .suite = "graph" }')}`);
  const node = (s) => page.locator(`[data-testid="graph-node"][data-service="${s}"]`);
  await node(g(26)).waitFor({ state: "attached", timeout: 15_000 });
  assert.equal(await page.getByTestId("graph-node").count(), 27);

  // Fit: every service inside the card.
  const card = await page.locator(".graph-card").boundingBox();
  const inside = async () => {
    const out = [];
    for (const n of await page.getByTestId("graph-node").all()) {
      const b = await n.boundingBox();
      if (b.x < card.x - 1 || b.x + b.width > card.x + card.width + 1 || b.y < card.y - 1 || b.y + b.height > card.y + card.height + 1) out.push(await n.getAttribute("data-service"));
    }
    return out;
  };
  assert.deepEqual(await inside(), [], "no service off-screen");
  assert.equal(await node(g(26)).locator(".node-sub").textContent(), "1 span");
  await page.screenshot({ path: join(artifacts, "graph-27-fit.png") });

  // Labels: none covers a service's box (labels of a dense graph show on hover; all are laid out).
  const boxes = await page.locator("svg.service-graph").evaluate((svg) => {
    const tr = (el) => el.getAttribute("transform").match(/translate\(([-\d.]+),\s*([-\d.]+)\)/).slice(1).map(Number);
    const nodes = [...svg.querySelectorAll('[data-testid="graph-node"]')].map((n) => {
      const [x, y] = tr(n);
      const r = n.querySelector("rect");
      return { name: n.getAttribute("data-service"), x, y, w: +r.getAttribute("width"), h: +r.getAttribute("height") };
    });
    const labels = [...svg.querySelectorAll(".edge-label")].map((l) => {
      const [x, y] = tr(l);
      const r = l.querySelector("rect");
      return { name: `${l.getAttribute("data-from")}→${l.getAttribute("data-to")}`, x: x + +r.getAttribute("x"), y: y + +r.getAttribute("y"), w: +r.getAttribute("width"), h: +r.getAttribute("height") };
    });
    return { nodes, labels };
  });
  assert.ok(boxes.labels.length >= 26);
  const hit = (a, b) => a.x < b.x + b.w && b.x < a.x + a.w && a.y < b.y + b.h && b.y < a.y + a.h;
  const covering = boxes.labels.flatMap((l) => boxes.nodes.filter((n) => hit(l, n)).map((n) => `${l.name} over ${n.name}`));
  assert.deepEqual(covering, [], "edge labels clear the service boxes");

  // Zoom in with the button: boxes grow 1.4 times; the view is in the URL and survives a reload.
  const w0 = (await node(g(0)).boundingBox()).width;
  await page.getByTestId("zoom-in").click();
  const w1 = (await node(g(0)).boundingBox()).width;
  assert.ok(Math.abs(w1 / w0 - 1.4) < 0.05, `zoomed ${w1 / w0}x`);
  const view = new URL(page.url()).searchParams.get("view");
  assert.match(view || "", /^-?\d+,-?\d+,\d+,\d+$/);
  await page.reload();
  await node(g(0)).waitFor({ state: "attached", timeout: 15_000 });
  assert.ok(Math.abs((await node(g(0)).boundingBox()).width / w1 - 1) < 0.02, "the reloaded link shows the same zoom");

  // Drag pans (and is not a click on the service it started on); keys zoom; 0 fits.
  const viewport = page.getByTestId("graph-viewport");
  const b0 = await node(g(13)).boundingBox();
  const start = { x: b0.x + b0.width / 2, y: b0.y + b0.height / 2 };
  await page.mouse.move(start.x, start.y);
  await page.mouse.down();
  await page.mouse.move(start.x - 60, start.y + 20, { steps: 5 });
  await page.mouse.move(start.x - 120, start.y + 40, { steps: 5 });
  await page.mouse.up();
  const b1 = await node(g(13)).boundingBox();
  assert.ok(Math.abs(b1.x - (b0.x - 120)) < 3 && Math.abs(b1.y - (b0.y + 40)) < 3, `dragged by (-120, 40): ${b1.x - b0.x}, ${b1.y - b0.y}`);
  assert.match(page.url(), /\/graph\?/, "a drag does not open the service's search");
  await viewport.focus();
  await page.keyboard.press("+");
  assert.ok((await node(g(13)).boundingBox()).width > b1.width * 1.3, "+ zooms in");
  await page.keyboard.press("0");
  assert.equal(await viewport.getAttribute("data-zoom"), "fit");
  assert.equal(new URL(page.url()).searchParams.get("view"), null);
  assert.deepEqual(await inside(), [], "fit again");
  // A click (no drag) on a service still searches its traces.
  await node(g(5)).click();
  await page.waitForURL(/\/search\?/);
  assert.equal(new URL(page.url()).searchParams.get("q"), `{ resource.service.name = "${g(5)}" }`);
  await page.close();
});
