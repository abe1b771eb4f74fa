#!/usr/bin/env bash
# Renders an evaluation report (report.html) to a PNG with headless Chromium, to look at it without a browser.
#   bash scripts/render-report.sh runs/local/latest/report.html [report.png] [WIDTHxHEIGHT]
# Needs Debian's chromium package (apt-get install chromium). The report fetches nothing: no network is used.
set -euo pipefail
report=${1:?usage: render-report.sh REPORT.html [OUT.png] [WIDTHxHEIGHT]}
out=${2:-${report%.html}.png}
size=${3:-1280x4000}
browser=$(command -v chromium || command -v chromium-browser || true)
[ -n "$browser" ] || { echo "render-report: no chromium on PATH (apt-get install chromium)" >&2; exit 2; }
profile=$(mktemp -d)
trap 'rm -rf "$profile"' EXIT
"$browser" --headless --no-sandbox --disable-gpu --disable-background-networking --disable-component-update \
  --disable-sync --no-first-run --hide-scrollbars --user-data-dir="$profile" --window-size="${size/x/,}" \
  --screenshot="$(realpath -m "$out")" "file://$(realpath "$report")" 2>/dev/null
echo "render-report: wrote $out"
