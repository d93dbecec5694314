// End-to-end tests of the weft web UI: the real `weft` binary (WEFT_BIN), traces sent by the
// OpenTelemetry JS SDK over OTLP/HTTP protobuf, and Debian's headless Chromium driven by
// playwright-core (never a downloaded browser). Screenshots of each page go to artifacts/.
//
// Run: WEFT_BIN=target/debug/weft node --test tests/ui/e2e.test.mjs (scripts/test-ui.sh does it).

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

/** A tracer provider per service, exporting to weft with the real OTLP/HTTP protobuf exporter. */
const provider = (service, idGenerator = undefined) => providerFor(otlpHttp, service, { idGenerator });

const T0 = Date.now() - 60_000; // ms; spans a minute ago, inside "last 15 minutes"
const ms = (x) => [Math.floor(x / 1000), Math.round((x % 1000) * 1e6)]; // HrTime

/** Sends a three-span trace over three services and returns its IDs and expected shape. */
async function sendCheckoutTrace() {
  // A trace ID with leading zeros: Tempo's search response drops them, the UI must not.
  const hex = (n) => Array.from({ length: n }, () => Math.floor(Math.random() * 16).toString(16)).join("");
  const zeros = { generateTraceId: () => `00${hex(30)}`, generateSpanId: () => hex(16) };
  const providers = { frontend: provider("frontend", zeros), checkout: provider("checkout"), payments: provider("payments") };
  const t = (s) => providers[s].getTracer("e2e");
  // A trace the charge links to (a queued retry), and a link to a trace weft never received.
  const retry = t("payments").startSpan("RetryCharge", { kind: SpanKind.CONSUMER, startTime: ms(T0 + 500) });
  retry.end(ms(T0 + 520));
  const unsent = { traceId: "abcdef0123456789abcdef0123456789", spanId: "0123456789abcdef", traceFlags: 1 };
  const root = t("frontend").startSpan("GET /cart/checkout", {
    kind: SpanKind.SERVER, startTime: ms(T0), attributes: { "http.method": "GET", "user.id": "u-42" },
  });
  const c1 = trace.setSpan(context.active(), root);
  const mid = t("checkout").startSpan("PlaceOrder", { kind: SpanKind.INTERNAL, startTime: ms(T0 + 10) }, c1);
  const c2 = trace.setSpan(context.active(), mid);
  const leaf = t("payments").startSpan("Charge", {
    kind: SpanKind.CLIENT, startTime: ms(T0 + 20), attributes: { "payment.amount": 1999, "payment.card": "visa" },
    links: [{ context: retry.spanContext(), attributes: { "link.reason": "retry" } }, { context: unsent }],
  }, c2);
  leaf.addEvent("card declined", { reason: "insufficient funds" }, ms(T0 + 50));
  leaf.setStatus({ code: SpanStatusCode.ERROR, message: "card declined" });
  leaf.end(ms(T0 + 80));
  mid.end(ms(T0 + 120));
  root.end(ms(T0 + 150));
  for (const p of Object.values(providers)) await p.forceFlush();
  const id = (s) => s.spanContext().spanId;
  return {
    traceId: root.spanContext().traceId,
    spans: new Map([
      [id(root), { parent: "", depth: 0, ns: 150e6 }],
      [id(mid), { parent: id(root), depth: 1, ns: 110e6 }],
      [id(leaf), { parent: id(mid), depth: 2, ns: 60e6 }],
    ]),
    leaf: id(leaf),
    retry: retry.spanContext(),
    unsent,
  };
}

let checkout;

test("a weft with no data yet says how to send some, on the search and graph pages", async () => {
  const page = await browser.newPage({ viewport: { width: 1400, height: 900 } });
  for (const path of ["/search", "/graph"]) {
    await page.goto(`${base}${path}`);
    const empty = page.getByTestId("empty");
    await empty.waitFor();
    await empty.getByText("No traces yet").waitFor();
    assert.match(await empty.innerText(), /4317[\s\S]*4318[\s\S]*weft loadgen --realistic/);
  }
  await page.screenshot({ path: join(artifacts, "empty.png") });
  await page.close();
});

test("searching finds the trace and the waterfall shows every span nested, with durations", async () => {
  checkout = await sendCheckoutTrace();
  const stored = await fetch(`${base}/api/v2/traces/${checkout.traceId}`);
  assert.equal(stored.status, 200, `weft stored the trace: ${await stored.clone().text()}`);
  const page = await browser.newPage({ viewport: { width: 1400, height: 900 } });
  await page.goto(`${base}/search`);
  await page.getByTestId("traceql").fill('{ resource.service.name = "payments" && status = error }');
  await page.getByTestId("search-run").click();
  const row = page.locator(`[data-testid="result-row"][data-trace-id="${checkout.traceId}"]`);
  try {
    await row.waitFor({ timeout: 15_000 });
  } finally {
    await page.screenshot({ path: join(artifacts, "search-wait.png") });
  }
  assert.equal(await page.getByTestId("scatter-dot").count() >= 1, true, "the scatter plot has a dot");
  // The row counts every span of the trace, the one the query matched, and the failed one.
  const spans = row.getByTestId("result-spans");
  assert.equal(await spans.getAttribute("data-spans"), "3");
  assert.equal(await spans.getAttribute("data-matched"), "1");
  assert.equal(await row.getByTestId("result-errors").getAttribute("data-errors"), "1");
  assert.equal(await row.getByTestId("result-errors").innerText(), "1");
  await page.screenshot({ path: join(artifacts, "search.png") });

  // A dot of the scatter plot opens its trace too.
  await page.locator(`[data-testid="scatter-dot"][data-trace-id="${checkout.traceId}"]`).click();
  await page.waitForURL(`**/trace/${checkout.traceId}**`);
  await page.getByTestId("trace-loaded").waitFor({ state: "attached" });
  await page.goBack();
  await row.click();
  await page.waitForURL(`**/trace/${checkout.traceId}**`);
  const loaded = page.getByTestId("trace-loaded");
  await loaded.waitFor({ state: "attached" });
  assert.equal(await loaded.getAttribute("data-span-count"), "3");
  const rows = page.getByTestId("span-row");
  assert.equal(await rows.count(), 3);
  for (const r of await rows.all()) {
    const sid = await r.getAttribute("data-span-id");
    const want = checkout.spans.get(sid);
    assert.ok(want, `span ${sid} belongs to the trace`);
    assert.equal(await r.getAttribute("data-parent-id"), want.parent, `parent of ${sid}`);
    assert.equal(Number(await r.getAttribute("data-depth")), want.depth, `depth of ${sid}`);
    const ns = Number(await r.getByTestId("span-duration").getAttribute("data-ns"));
    assert.ok(Math.abs(ns - want.ns) < 1e6, `duration of ${sid}: ${ns} ns, want ${want.ns}`);
  }
  await page.screenshot({ path: join(artifacts, "trace.png") });
  await page.close();
});

test("the span panel shows the attributes, and the URL reopens the same view", async () => {
  assert.ok(checkout, "the first test sent the trace");
  const page = await browser.newPage({ viewport: { width: 1400, height: 900 } });
  await page.goto(`${base}/trace/${checkout.traceId}`);
  await page.getByTestId("trace-loaded").waitFor({ state: "attached" });
  await page.locator(`[data-testid="span-row"][data-span-id="${checkout.leaf}"]`).click();
  const panel = page.getByTestId("span-panel");
  await panel.waitFor();
  const attr = (k) => panel.locator(`[data-testid="attr"][data-key="${k}"]`);
  assert.equal(await attr("payment.card").getAttribute("data-value"), "visa");
  assert.equal(await attr("payment.amount").getAttribute("data-value"), "1999");
  await page.screenshot({ path: join(artifacts, "span.png") });

  // Links: the one to a stored trace opens it, the one to a trace weft never received is marked.
  const missing = panel.getByTestId("span-link-missing");
  await missing.waitFor();
  assert.equal(await missing.getAttribute("data-trace-id"), checkout.unsent.traceId);
  assert.equal(await panel.getByTestId("span-link").count(), 1, "only the stored trace's link is clickable");
  const link = panel.getByTestId("span-link");
  assert.equal(await link.getAttribute("data-trace-id"), checkout.retry.traceId);
  assert.equal(await panel.locator('[data-testid="link-attr"][data-key="link.reason"]').getAttribute("data-value"), "retry");
  const url0 = page.url();
  await link.click();
  await page.waitForURL(`**/trace/${checkout.retry.traceId}?span=${checkout.retry.spanId}`);
  await page.getByTestId("span-panel").getByText("RetryCharge").waitFor();
  await page.goBack();
  await page.waitForURL(url0);

  const url = page.url();
  assert.match(url, new RegExp(`span=${checkout.leaf}`), "selecting a span puts it in the URL");
  const again = await browser.newPage({ viewport: { width: 1400, height: 900 } });
  await again.goto(url);
  const panel2 = again.getByTestId("span-panel");
  await panel2.waitFor();
  assert.equal(await panel2.locator('[data-testid="attr"][data-key="payment.card"]').getAttribute("data-value"), "visa");
  // Back goes to the view before.
  await again.goto(`${base}/search`);
  await again.goBack();
  await again.getByTestId("span-panel").waitFor();
  await again.close();
  await page.close();
});

test("the service graph counts every call between services, and an edge opens its traces", async () => {
  assert.ok(checkout, "the first test sent the trace");
  const page = await browser.newPage({ viewport: { width: 1400, height: 900 } });
  await page.goto(`${base}/graph`);
  const edge = (from, to) => page.locator(`[data-testid="graph-edge"][data-from="${from}"][data-to="${to}"]`);
  await edge("frontend", "checkout").waitFor({ state: "attached", timeout: 15_000 });
  // Only the checkout trace has calls between services so far: exactly one call on each edge.
  assert.equal(await page.getByTestId("graph-edge").count(), 2);
  assert.equal(await edge("frontend", "checkout").getAttribute("data-calls"), "1");
  assert.equal(await edge("frontend", "checkout").getAttribute("data-errors"), "0");
  assert.equal(await edge("checkout", "payments").getAttribute("data-calls"), "1");
  assert.equal(await edge("checkout", "payments").getAttribute("data-errors"), "1", "the failed charge counts as an error");
  assert.equal(await page.getByTestId("graph-calls").getAttribute("data-calls"), "2");
  assert.equal(await page.getByTestId("graph-partial").count(), 0, "the count is complete");
  await page.screenshot({ path: join(artifacts, "graph.png") });

  // A filter that no trace matches empties the graph, and says so.
  await page.getByTestId("graph-filter").fill("{ duration > 1h }");
  await page.getByTestId("graph-run").click();
  await page.waitForURL(/\/graph\?q=/);
  await page.getByTestId("empty").waitFor();
  await page.goBack();
  await edge("checkout", "payments").waitFor({ state: "attached" });

  // Clicking an edge searches the traces where the caller calls the callee.
  await page.locator('[data-testid="edge-row"][data-from="checkout"][data-to="payments"]').click();
  await page.waitForURL(/\/search\?/);
  assert.equal(new URL(page.url()).searchParams.get("q"),
    '{ resource.service.name = "checkout" } > { resource.service.name = "payments" }');
  await page.locator(`[data-testid="result-row"][data-trace-id="${checkout.traceId}"]`).waitFor({ timeout: 15_000 });
  assert.equal(await page.getByTestId("result-row").count(), 1);
  await page.close();
});

test("the sampling page shows each operation's root spans, probability and sampled traces", async () => {
  const p = provider("sampler-e2e");
  const t = p.getTracer("e2e");
  // Half an hour before the other tests' traces, so these 41 traces stay off the search pages
  // the later tests read (counting does not look at span times).
  const old = T0 - 30 * 60_000;
  for (let i = 0; i < 40; i++) {
    const s = t.startSpan("GET /busy", { kind: SpanKind.SERVER, startTime: ms(old + i) });
    s.end(ms(old + i + 1));
  }
  t.startSpan("GET /quiet", { kind: SpanKind.SERVER, startTime: ms(old) }).end(ms(old + 1));
  await p.forceFlush();
  const page = await browser.newPage({ viewport: { width: 1400, height: 900 } });
  await page.goto(`${base}/sampling`);
  const row = (op) => page.locator(`[data-testid="sampling-row"][data-service="sampler-e2e"][data-operation="${op}"]`);
  // Counted at once; the probabilities are set at the next interval (1 s here), and the page
  // refreshes every 5 s.
  await row("GET /busy").waitFor({ timeout: 15_000 });
  await row("GET /quiet").waitFor();
  assert.match(await page.getByTestId("sampling-mode").innerText(), /Adaptive: every 1 s/);
  const p0 = Number(await row("GET /busy").getAttribute("data-probability"));
  assert.ok(p0 > 0 && p0 <= 1, `probability ${p0}`);
  assert.match(await row("GET /busy").getByTestId("sampling-probability").innerText(), /%$/);
  assert.equal(await page.locator('.nav-link[href="/sampling"]').getAttribute("aria-current"), "page");
  await page.screenshot({ path: join(artifacts, "sampling.png") });
  await page.close();
  await p.shutdown();
});

test("TraceQL autocomplete and the tags picker suggest attribute names and values", async () => {
  assert.ok(checkout, "the first test sent the trace");
  const page = await browser.newPage({ viewport: { width: 1400, height: 900 } });
  await page.goto(`${base}/search?q=`);
  const input = page.getByTestId("traceql");
  await input.fill("");
  await input.click();
  const exactly = (s) => new RegExp(`^${s.replace(/[.*+?^${}()|[\]\\]/g, "\\$&")}$`);
  const option = (label) => page.locator('#traceql-ac [role="option"]', { has: page.locator(".ac-label", { hasText: exactly(label) }) });
  await page.keyboard.type("{ resource.serv");
  await option("resource.service.name").waitFor();
  await option("resource.service.name").click();
  assert.equal(await input.inputValue(), "{ resource.service.name");
  await page.keyboard.type(' = "pay');
  await option("payments").waitFor();
  assert.equal(await option("frontend").count(), 0, "values are filtered by what was typed");
  await page.keyboard.press("Enter"); // accepts the highlighted suggestion
  assert.equal(await input.inputValue(), '{ resource.service.name = "payments"');
  await page.keyboard.type(" && sta");
  await option("status").waitFor();
  await page.keyboard.press("Escape");
  await page.keyboard.type("tus = error }");
  await page.keyboard.press("Enter"); // the list is closed: runs the query
  await page.locator(`[data-testid="result-row"][data-trace-id="${checkout.traceId}"]`).waitFor({ timeout: 15_000 });
  assert.equal(new URL(page.url()).searchParams.get("q"), '{ resource.service.name = "payments" && status = error }');

  // The tags picker suggests attribute names, then their values, and builds the query.
  await page.goto(`${base}/search`);
  const tags = page.locator("#f-tags");
  const tagOption = (label) => page.locator('#tags-ac [role="option"]', { has: page.locator(".ac-label", { hasText: exactly(label) }) });
  await tags.click();
  await page.keyboard.type("payment.c");
  await tagOption("payment.card").click();
  assert.equal(await tags.inputValue(), "payment.card=");
  await tagOption("visa").waitFor(); // the value list opens by itself
  await page.keyboard.press("Enter");
  assert.equal(await tags.inputValue(), "payment.card=visa");
  assert.equal(await input.inputValue(), '{ .payment.card = "visa" }', "the picker writes the TraceQL");
  await page.keyboard.press("Enter");
  await page.locator(`[data-testid="result-row"][data-trace-id="${checkout.traceId}"]`).waitFor({ timeout: 15_000 });
  await page.close();
});

/** Sends one single-span trace of `service` and returns its trace ID. Times are in ms. */
async function sendSpan(service, name, startMs, durationMs) {
  const p = provider(service);
  const s = p.getTracer("e2e").startSpan(name, { kind: SpanKind.SERVER, startTime: ms(startMs) });
  s.end(ms(startMs + durationMs));
  await p.forceFlush();
  await p.shutdown();
  return s.spanContext().traceId;
}

/** Waits until the result rows are exactly `ids`, in this order, and returns them. */
async function waitForRows(page, ids) {
  try {
    await page.waitForFunction((want) => {
      const got = [...document.querySelectorAll('[data-testid="result-row"]')].map((r) => r.getAttribute("data-trace-id"));
      return got.join() === want.join();
    }, ids, { timeout: 15_000 });
  } catch (e) {
    const got = await page.getByTestId("result-row").evaluateAll((rs) => rs.map((r) => r.getAttribute("data-trace-id")));
    assert.deepEqual(got, ids, `result rows at ${page.url()}`);
    throw e;
  }
}

test("results sort by a column, both ways, and the URL keeps the order", async () => {
  const now = Date.now();
  // Start order (newest first) is fast, slow, medium; duration order is slow, medium, fast.
  const medium = await sendSpan("sorting", "medium", now - 30_000, 30);
  const slow = await sendSpan("sorting", "slow", now - 20_000, 300);
  const fast = await sendSpan("sorting", "fast", now - 10_000, 3);
  const page = await browser.newPage({ viewport: { width: 1400, height: 900 } });
  await page.goto(`${base}/search?q=${encodeURIComponent('{ resource.service.name = "sorting" }')}&range=15m`);
  await waitForRows(page, [fast, slow, medium]);
  const header = page.locator('th[data-sort="duration"]');
  await header.click();
  await waitForRows(page, [slow, medium, fast]);
  assert.equal(await header.getAttribute("aria-sort"), "descending");
  assert.equal(new URL(page.url()).searchParams.get("sort"), "duration:desc");
  await header.click();
  await waitForRows(page, [fast, medium, slow]);
  assert.equal(await header.getAttribute("aria-sort"), "ascending");
  await page.reload();
  await waitForRows(page, [fast, medium, slow]);
  await page.locator('th[data-sort="service"]').click(); // root service, then operation, A to Z
  await waitForRows(page, [fast, medium, slow]);
  await page.locator('th[data-sort="start"]').click();
  await waitForRows(page, [fast, slow, medium]);
  await page.close();
});

test("the time range picks which traces are searched, and back and forward restore it", async () => {
  const now = Date.now();
  const recent = await sendSpan("timerange", "recent", now - 2 * 60_000, 10);
  const older = await sendSpan("timerange", "older", now - 40 * 60_000, 10);
  const page = await browser.newPage({ viewport: { width: 1400, height: 900 } });
  const q = encodeURIComponent('{ resource.service.name = "timerange" }');
  await page.goto(`${base}/search?q=${q}&range=15m`);
  await waitForRows(page, [recent]);
  const picker = page.getByLabel("Time range");
  assert.equal(await picker.inputValue(), "15m");
  await picker.selectOption("1h");
  await waitForRows(page, [recent, older]);
  assert.equal(new URL(page.url()).searchParams.get("range"), "1h");
  await page.goBack();
  await waitForRows(page, [recent]);
  assert.equal(new URL(page.url()).searchParams.get("range"), "15m");
  assert.equal(await picker.inputValue(), "15m", "the picker follows the URL");
  await page.goForward();
  await waitForRows(page, [recent, older]);
  assert.equal(await picker.inputValue(), "1h");
  // An absolute range in the URL: the two minutes around the older trace.
  const at = Math.floor((now - 40 * 60_000) / 1000);
  await page.goto(`${base}/search?q=${q}&start=${at - 60}&end=${at + 60}`);
  await waitForRows(page, [older]);
  assert.equal(await picker.inputValue(), "custom");
  assert.equal(await page.getByLabel("From").isVisible(), true, "the custom range shows its from and to");
  await page.close();
});

test("a query the server rejects shows the server's message", async () => {
  const page = await browser.newPage({ viewport: { width: 1400, height: 900 } });
  await page.goto(`${base}/search?q=${encodeURIComponent("{ .a = }")}`);
  const error = page.getByTestId("error");
  await error.waitFor();
  const text = await error.innerText();
  assert.match(text, /Invalid query \(HTTP 400\)/);
  assert.match(text, /parse error at line 1, column 8: expected a value after '=', found '\}'/);
  await page.screenshot({ path: join(artifacts, "search-error.png") });
  await page.close();
});

test("an unknown trace or page shows a not-found page", async () => {
  const page = await browser.newPage();
  await page.goto(`${base}/trace/0123456789abcdef0123456789abcdef`);
  await page.getByTestId("not-found").waitFor();
  // A mistyped page is answered with the UI's not-found page (status 404) and a way back...
  const res = await page.goto(`${base}/serach`);
  assert.equal(res.status(), 404);
  await page.getByTestId("not-found").waitFor();
  await page.screenshot({ path: join(artifacts, "not-found.png") });
  await page.getByRole("link", { name: "Go to search" }).click();
  await page.getByTestId("traceql").waitFor();
  await page.close();
  // ...while an API client still gets the API's plain 404.
  const api = await fetch(`${base}/serach`);
  assert.equal(api.status, 404);
  assert.match(await api.text(), /no such endpoint: \/serach/);
});

// `make test` runs this on the debug binary and checks only what the page shows; `make bench`
// runs it on the release binary with WEFT_UI_OPEN_BUDGET_MS=3000, the 3-second target
// (BENCHMARKS.md), since a timed assertion on a shared machine belongs to the benchmarks.
const openBudgetMs = Number(process.env.WEFT_UI_OPEN_BUDGET_MS || 0);

test("a 100,000-span trace opens, virtualised, and scrolls to its last span", async () => {
  const p = provider("bulk");
  const tracer = p.getTracer("e2e");
  const N = 100_000;
  const root = tracer.startSpan("bulk-root", { startTime: ms(T0) });
  const rootCtx = trace.setSpan(context.active(), root);
  // 1,000 children of the root, each with 99 children: a tree 3 levels deep.
  let sent = 1;
  for (let i = 0; sent < N; i++) {
    const mid = tracer.startSpan(`batch-${i}`, { startTime: ms(T0 + i) }, rootCtx);
    sent++;
    const midCtx = trace.setSpan(context.active(), mid);
    for (let j = 0; j < 99 && sent < N; j++, sent++) {
      tracer.startSpan(`item-${j}`, { startTime: ms(T0 + i + 0.001 * j), attributes: { i, j } }, midCtx).end(ms(T0 + i + 0.5));
    }
    mid.end(ms(T0 + i + 1));
  }
  root.end(ms(T0 + 2000));
  await p.forceFlush();
  const traceId = root.spanContext().traceId;

  const page = await browser.newPage({ viewport: { width: 1400, height: 900 } });
  // Warm the page's assets and let the search page's own queries finish (they read this trace
  // too), then time the trace view alone.
  await page.goto(`${base}/search`);
  await page.locator(`[data-testid="result-row"][data-trace-id="${traceId}"]`).waitFor({ timeout: 30_000 });
  const started = Date.now();
  await page.goto(`${base}/trace/${traceId}`);
  const loaded = page.getByTestId("trace-loaded");
  await loaded.waitFor({ state: "attached", timeout: 30_000 });
  const took = Date.now() - started;
  assert.equal(await loaded.getAttribute("data-span-count"), `${N}`);
  console.log(`# 100,000-span trace rendered in ${took} ms`);
  if (openBudgetMs > 0) {
    assert.ok(took < openBudgetMs, `the 100,000-span trace opened in ${took} ms (budget ${openBudgetMs} ms)`);
  }
  const inDom = await page.getByTestId("span-row").count();
  assert.ok(inDom > 0 && inDom < 1000, `rows are virtualised (${inDom} in the DOM)`);
  await page.getByTestId("waterfall").evaluate((el) => { el.scrollTop = el.scrollHeight; });
  await page.waitForFunction(() =>
    [...document.querySelectorAll('[data-testid="span-row"]')].some((r) => r.textContent.includes("item-")));
  await page.screenshot({ path: join(artifacts, "trace-100k.png") });
  await page.close();
});
