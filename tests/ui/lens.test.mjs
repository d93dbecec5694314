// Zipkin's own UI, Lens, against weft: the Lens that ships inside the zipkin-server jar
// scripts/test-deps.sh fetches, served by a small static server that proxies its API calls to
// weft's Zipkin port, driven in headless Chromium as a Zipkin user drives it: discover (search,
// with and without the service filter), the trace view, and the dependency graph.

import { test, before, after } from "node:test";
import assert from "node:assert/strict";
import http from "node:http";
import { execFileSync } from "node:child_process";
import { mkdtempSync, rmSync, existsSync } from "node:fs";
import { readFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join, extname, dirname } from "node:path";
import { fileURLToPath } from "node:url";

import { artifacts, freePort, launchBrowser, startWeft } from "./harness.mjs";

const root = join(dirname(fileURLToPath(import.meta.url)), "..", "..");
const JAR = join(root, ".tools", "zipkin", "zipkin-server-3.5.1-exec.jar");
const TRACE = "463ac35c9f6413ad48485a3953bb6124";

let weft, zipkin, lensDir, lens, lensBase, browser;
/** Every API call Lens made, with weft's status. */
const calls = [];

/** Lens's files (zipkin-lens/ in the zipkin-lens jar inside the server jar) into `dir`. */
function extractLens(dir) {
  const script = [
    "import io, sys, zipfile",
    "outer = zipfile.ZipFile(sys.argv[1])",
    "name = next(n for n in outer.namelist() if n.startswith('BOOT-INF/lib/zipkin-lens-'))",
    "inner = zipfile.ZipFile(io.BytesIO(outer.read(name)))",
    "[inner.extract(n, sys.argv[2]) for n in inner.namelist() if n.startswith('zipkin-lens/')]",
  ].join("\n");
  execFileSync(process.env.PYTHON || "python3", ["-c", script, JAR, dir]);
  return join(dir, "zipkin-lens");
}

/** Serves Lens under /zipkin/ as zipkin-server does, its API calls proxied to weft. */
function serveLens(dir, port) {
  const types = { ".js": "text/javascript", ".css": "text/css", ".html": "text/html", ".png": "image/png", ".ico": "image/x-icon" };
  // zipkin-server's defaults (its ZipkinUiConfiguration).
  const config = { environment: "", queryLimit: 10, defaultLookback: 900000, searchEnabled: true,
    dependency: { enabled: true, lowErrorRate: 0.5, highErrorRate: 0.75 } };
  const server = http.createServer(async (req, res) => {
    const url = new URL(req.url, "http://lens");
    if (url.pathname.startsWith("/zipkin/api/")) {
      const r = await fetch(zipkin + url.pathname.slice("/zipkin".length) + url.search);
      const body = Buffer.from(await r.arrayBuffer());
      calls.push({ path: url.pathname + url.search, status: r.status, body: body.toString() });
      res.writeHead(r.status, { "content-type": r.headers.get("content-type") || "application/json" });
      res.end(body);
      return;
    }
    if (url.pathname === "/zipkin/config.json") {
      res.writeHead(200, { "content-type": "application/json" });
      res.end(JSON.stringify(config));
      return;
    }
    const rel = url.pathname.replace(/^\/zipkin\/?/, "");
    const file = rel && !rel.includes("..") && existsSync(join(dir, rel)) ? join(dir, rel) : join(dir, "index.html");
    res.writeHead(200, { "content-type": types[extname(file)] || "application/octet-stream" });
    res.end(await readFile(file));
  });
  return new Promise((resolve) => server.listen(port, "127.0.0.1", () => resolve(server)));
}

before(async () => {
  assert.ok(existsSync(JAR), `${JAR} is missing: run scripts/test-deps.sh`);
  const zport = await freePort();
  weft = await startWeft({ env: { WEFT_ZIPKIN_PORT: `${zport}` } });
  zipkin = `http://127.0.0.1:${zport}`;
  lensDir = mkdtempSync(join(tmpdir(), "weft-lens-"));
  const port = await freePort();
  lens = await serveLens(extractLens(lensDir), port);
  lensBase = `http://127.0.0.1:${port}/zipkin`;
  browser = await launchBrowser();
  // A trace over three services as Brave reports it: the orders server joined its client's span
  // ID (`shared`), and its database call failed.
  const now = Date.now() * 1000 - 60_000_000;
  const ep = (serviceName) => ({ serviceName, ipv4: "10.0.0.1" });
  const spans = [
    { traceId: TRACE, id: "1000000000000001", kind: "SERVER", name: "get /", timestamp: now, duration: 1000, localEndpoint: ep("frontend") },
    { traceId: TRACE, parentId: "1000000000000001", id: "2000000000000002", kind: "CLIENT", name: "post /orders",
      timestamp: now + 10, duration: 900, localEndpoint: ep("frontend"), remoteEndpoint: ep("orders") },
    { traceId: TRACE, parentId: "1000000000000001", id: "2000000000000002", kind: "SERVER", shared: true,
      name: "post /orders", timestamp: now + 100, duration: 700, localEndpoint: ep("orders") },
    { traceId: TRACE, parentId: "2000000000000002", id: "3000000000000003", kind: "CLIENT", name: "insert",
      timestamp: now + 300, duration: 20, localEndpoint: ep("orders"), remoteEndpoint: ep("postgres"), tags: { error: "deadlock" } },
  ];
  const r = await fetch(`${zipkin}/api/v2/spans`, { method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify(spans) });
  assert.equal(r.status, 202, await r.text());
  for (let i = 0; ; i++) {
    const t = await fetch(`${zipkin}/api/v2/trace/${TRACE}`);
    if (t.ok && (await t.json()).length === 4) break;
    assert.ok(i < 100, "weft stored the trace");
    await new Promise((res) => setTimeout(res, 100));
  }
});

after(async () => {
  await browser?.close();
  lens?.close();
  weft?.stop();
  if (lensDir) rmSync(lensDir, { recursive: true, force: true });
});

/** The API calls since `from` that weft did not answer with 200. */
const failedSince = (from) => calls.slice(from).filter((c) => c.status !== 200);

test("Lens discovers the trace by service, and with the service filter removed", async () => {
  const page = await browser.newPage({ viewport: { width: 1400, height: 900 } });
  const from = calls.length;
  await page.goto(`${lensBase}/?serviceName=frontend&lookback=15m&limit=10`);
  await page.getByText("RUN QUERY").click();
  await page.getByText("1 Result").waitFor();
  const body = await page.locator("body").innerText();
  assert.match(body, /frontend: get \//);
  await page.screenshot({ path: join(artifacts, "lens-discover.png") });
  // Remove the service chip: Lens asks for span names and remote services with an empty
  // serviceName, and must get lists, not errors.
  const chip = page.getByText("serviceName", { exact: true }).first().locator("xpath=..");
  const emptyCalls = calls.length;
  await chip.locator("button").click();
  for (let i = 0; !calls.slice(emptyCalls).some((c) => c.path.includes("serviceName=&") || c.path.endsWith("serviceName=")); i++) {
    assert.ok(i < 50, `Lens asked with an empty serviceName: ${JSON.stringify(calls.slice(emptyCalls).map((c) => c.path))}`);
    await page.waitForTimeout(100);
  }
  await page.getByText("RUN QUERY").click();
  await page.getByText("1 Result").waitFor();
  const empty = calls.slice(emptyCalls).filter((c) => /serviceName=(&|$)/.test(c.path));
  assert.ok(empty.length > 0 && empty.every((c) => c.status === 200 && c.body === "[]"), JSON.stringify(empty));
  assert.deepEqual(failedSince(from), [], "every API call Lens made succeeded");
  await page.close();
});

test("Lens shows the trace: services, spans, nesting and the failed call", async () => {
  const page = await browser.newPage({ viewport: { width: 1400, height: 900 } });
  const from = calls.length;
  await page.goto(`${lensBase}/traces/${TRACE}`);
  await page.getByText("Total Spans").waitFor();
  const text = await page.locator("body").innerText();
  // Lens merges the shared client and server spans into one row, as it does for Zipkin.
  assert.match(text, /Services\s*3/);
  assert.match(text, /Total Spans\s*3/);
  for (const row of ["frontend: get /", "orders: post /orders", "postgres: insert"]) assert.ok(text.includes(row), row);
  await page.getByText("postgres: insert").click();
  await page.getByText("deadlock").first().waitFor();
  await page.screenshot({ path: join(artifacts, "lens-trace.png") });
  assert.deepEqual(failedSince(from), []);
  await page.close();
});

test("Lens draws the dependency graph weft computes", async () => {
  const page = await browser.newPage({ viewport: { width: 1400, height: 900 } });
  const from = calls.length;
  await page.goto(`${lensBase}/dependency`);
  await page.getByText("RUN QUERY").click();
  // The graph is drawn on a canvas; its filter offers the services it drew.
  await page.getByRole("combobox").or(page.locator("input.MuiAutocomplete-input")).first().click();
  for (const svc of ["frontend", "orders", "postgres"]) await page.getByRole("option", { name: svc, exact: true }).waitFor();
  await page.keyboard.press("Escape");
  const deps = calls.slice(from).find((c) => c.path.startsWith("/zipkin/api/v2/dependencies"));
  assert.ok(deps, "Lens asked for dependencies");
  const links = JSON.parse(deps.body).map((l) => `${l.parent}->${l.child}:${l.callCount}:${l.errorCount ?? 0}`).sort();
  assert.deepEqual(links, ["frontend->orders:1:0", "orders->postgres:1:1"]);
  await page.screenshot({ path: join(artifacts, "lens-dependencies.png") });
  assert.deepEqual(failedSince(from), []);
  await page.close();
});
