#!/usr/bin/env bash
# Copy the built files of the pinned front-end libraries into static/vendor. The copies are committed, so
# running the portal (and CI) needs no node; run this (`make vendor`) only when package.json changes.
# axe-core goes to tests/browser/vendor instead: the browser tests inject it, the portal never serves it.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
out="$here/../static/vendor"
cd "$here"
npm ci --no-audit --no-fund >/dev/null
rm -rf "$out" && mkdir -p "$out/bootstrap" "$out/bootstrap-icons/fonts" "$out/htmx" "$out/chartjs" "$out/uppy"
cp node_modules/bootstrap/dist/css/bootstrap.min.css node_modules/bootstrap/dist/js/bootstrap.bundle.min.js "$out/bootstrap/"
cp node_modules/bootstrap-icons/font/bootstrap-icons.min.css "$out/bootstrap-icons/"
cp node_modules/bootstrap-icons/font/fonts/bootstrap-icons.woff2 node_modules/bootstrap-icons/font/fonts/bootstrap-icons.woff "$out/bootstrap-icons/fonts/"
cp node_modules/htmx.org/dist/htmx.min.js "$out/htmx/"
cp node_modules/chart.js/dist/chart.umd.min.js "$out/chartjs/"
# Uppy + its S3 multipart plugin + hash-wasm ship as ES modules: one bundle for the Data page's direct uploads.
node_modules/.bin/esbuild upload-bundle.js --bundle --minify --format=iife --target=es2020 --legal-comments=eof \
  --log-level=warning --outfile="$out/uppy/uppy-s3.min.js"
cp node_modules/@uppy/core/LICENSE "$out/uppy/uppy-LICENSE.txt" 2>/dev/null || true
cp node_modules/hash-wasm/LICENSE "$out/uppy/hash-wasm-LICENSE.txt" 2>/dev/null || true
# The source maps are not copied: drop the comments pointing at them, or the production profile's hashed static
# storage (collectstatic, the Dockerfile) stops on the missing .map files.
sed -i '/sourceMappingURL=/d' "$out"/bootstrap/*.min.* "$out/chartjs/chart.umd.min.js"
# axe-core is for the browser tests only (tests/browser/vendor; never served by the portal).
axe="$here/../tests/browser/vendor"
mkdir -p "$axe"
cp node_modules/axe-core/axe.min.js "$axe/"
cp node_modules/axe-core/LICENSE "$axe/axe-core-LICENSE.txt"
cp node_modules/axe-core/LICENSE-3RD-PARTY.txt "$axe/axe-core-LICENSE-3RD-PARTY.txt"
for pkg in bootstrap bootstrap-icons htmx.org chart.js @uppy/core @uppy/aws-s3 hash-wasm; do
  printf '%s %s\n' "$pkg" "$(node -p "require('./node_modules/$pkg/package.json').version")"
done > "$out/VERSIONS"
cat "$out/VERSIONS"
