// Builds the weft UI into dist/: app.js (bundled, minified), app.css (minified), index.html.
// Usage: node build.mjs            (one-off production build)
//        node build.mjs --watch    (rebuild on change, for development)
import * as esbuild from 'esbuild';
import { copyFileSync, mkdirSync, readFileSync } from 'node:fs';
import { gzipSync } from 'node:zlib';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

const root = dirname(fileURLToPath(import.meta.url));
const src = join(root, 'src');
const dist = join(root, 'dist');
const watch = process.argv.includes('--watch');

mkdirSync(dist, { recursive: true });

const common = {
  bundle: true,
  minify: !watch,
  sourcemap: watch ? 'inline' : false,
  logLevel: 'warning',
  legalComments: 'none',
};

const jsOptions = {
  ...common,
  entryPoints: [join(src, 'main.ts')],
  outfile: join(dist, 'app.js'),
  format: 'iife',
  target: 'es2020',
  platform: 'browser',
};
const cssOptions = {
  ...common,
  entryPoints: [join(src, 'style.css')],
  outfile: join(dist, 'app.css'),
  target: ['chrome90', 'firefox90', 'safari14'],
};

function copyHtml() {
  copyFileSync(join(src, 'index.html'), join(dist, 'index.html'));
}

function report() {
  let total = 0;
  for (const f of ['app.js', 'app.css']) {
    const buf = readFileSync(join(dist, f));
    const gz = gzipSync(buf, { level: 9 }).length;
    total += gz;
    console.log(`dist/${f.padEnd(8)} ${(buf.length / 1024).toFixed(1).padStart(7)} KB  gzip ${(gz / 1024).toFixed(1).padStart(6)} KB`);
  }
  console.log(`total gzipped (app.js + app.css): ${(total / 1024).toFixed(1)} KB (${total} bytes)`);
}

if (watch) {
  const js = await esbuild.context(jsOptions);
  const css = await esbuild.context(cssOptions);
  copyHtml();
  await Promise.all([js.watch(), css.watch()]);
  console.log('watching src/ ...');
} else {
  await Promise.all([esbuild.build(jsOptions), esbuild.build(cssOptions)]);
  copyHtml();
  report();
}
