#!/usr/bin/env bash
# Creates .venv (Python 3.9-3.11, as TensorFlow 2.15 requires) and installs the project (Vertex AI libraries
# included) with its test, beam (Apache Beam, for the Beam engine's tests) and tune (optuna, for `tpu-pipeline
# tune`) extras. Safe to re-run: an existing .venv is reused and only brought up to date.
set -euo pipefail
cd "$(dirname "$0")/.."

pick_python() {
  for candidate in "${PYTHON:-}" python3.11 python3.10 python3.9 python3; do
    [ -n "$candidate" ] || continue
    command -v "$candidate" >/dev/null 2>&1 || continue
    if "$candidate" -c 'import sys; sys.exit(0 if (3, 9) <= sys.version_info[:2] <= (3, 11) else 1)' 2>/dev/null; then
      echo "$candidate"; return 0
    fi
  done
  echo "error: TensorFlow 2.15 needs Python 3.9, 3.10 or 3.11; none was found (set PYTHON=/path/to/python3.11)" >&2
  return 1
}

if [ ! -x .venv/bin/python ]; then
  python_bin=$(pick_python)
  echo "setup: creating .venv with $($python_bin --version)"
  "$python_bin" -m venv .venv
fi
.venv/bin/python -m pip install --quiet --upgrade pip
.venv/bin/python -m pip install --quiet -e '.[test,beam,tune]'
echo "setup: ready (.venv)"
