#!/usr/bin/env bash
# Installs Debian's chromium, which the report's screenshot test (tests/lib/evaluation/test_report_screenshot.py)
# and scripts/render-report.sh render the evaluation report with, headless. Used by CI before scripts/test.sh;
# the test is skipped, saying so, where chromium is missing, except under CI (CI=true), where it fails.
# Debian/Ubuntu only; needs root. Does nothing when chromium is installed.
set -euo pipefail
command -v chromium >/dev/null 2>&1 && exit 0
if ! command -v apt-get >/dev/null 2>&1 || [ "$(id -u)" -ne 0 ]; then
  echo "install-browser: chromium missing; install it as root with your package manager" \
    "(Debian: apt-get install -y chromium)" >&2
  exit 1
fi
echo "install-browser: apt-get install chromium"
apt-get update -qq
DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null
command -v chromium >/dev/null 2>&1 || { echo "install-browser: chromium is still not on PATH" >&2; exit 1; }
