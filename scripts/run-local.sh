#!/usr/bin/env bash
# Sets up .venv and runs the whole pipeline locally on CPU (KFP local runner) on the embedded Palmer
# Penguins data. Extra arguments go to `tpu-pipeline run-local` (see `.venv/bin/tpu-pipeline run-local --help`).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
exec .venv/bin/tpu-pipeline run-local "$@"
