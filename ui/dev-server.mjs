// Development server: serves dist/ the way weft does (page routes → index.html, /assets/* →
// dist/) and proxies /api/* to a running weft, so the UI can be worked on without rebuilding
// the server.   WEFT=127.0.0.1:3200 PORT=8080 node dev-server.mjs   (with `node build.mjs --watch`)
import http from 'node:http';
import { readFile } from 'node:fs/promises';
import { extname, join, normalize } from 'node:path';
import { fileURLToPath } from 'node:url';

const dist = fileURLToPath(new URL('./dist/', import.meta.url));
const [apiHost, apiPort] = (process.env.WEFT || '127.0.0.1:3200').split(':');
const port = Number(process.env.PORT || 8080);
const types = { '.js': 'text/javascript', '.css': 'text/css', '.html': 'text/html; charset=utf-8' };

http
  .createServer(async (req, res) => {
    const url = new URL(req.url, 'http://localhost');
    if (url.pathname.startsWith('/api/')) {
      const up = http.request({ host: apiHost, port: Number(apiPort), path: req.url, method: req.method, headers: req.headers }, (r) => {
        res.writeHead(r.statusCode ?? 502, r.headers);
        r.pipe(res);
      });
      up.on('error', (e) => {
        res.writeHead(502, { 'content-type': 'text/plain' });
        res.end(`weft at ${apiHost}:${apiPort} unreachable: ${e.message}`);
      });
      req.pipe(up);
      return;
    }
    const file = url.pathname.startsWith('/assets/') ? join(dist, normalize(url.pathname.slice(8)).replace(/^(\.\.[/\\])+/, '')) : join(dist, 'index.html');
    try {
      const body = await readFile(file);
      res.writeHead(200, { 'content-type': types[extname(file)] || 'application/octet-stream', 'cache-control': 'no-store' });
      res.end(body);
    } catch {
      res.writeHead(404, { 'content-type': 'text/plain' });
      res.end('not found');
    }
  })
  .listen(port, '127.0.0.1', () => console.log(`weft UI on http://127.0.0.1:${port} (API → ${apiHost}:${apiPort})`));
