#!/usr/bin/env bash
# Sets up .venv and runs the whole test suite (slow end-to-end tests included).
# Extra arguments go to pytest, e.g. `bash scripts/test.sh -m "not slow"` to skip the slow ones.
set -uo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh || exit 1
.venv/bin/python -m pytest "$@"
status=$?
if [ "$status" -eq 5 ]; then
  echo "test.sh: pytest collected no tests; that counts as a failure" >&2
  exit 1
fi
exit "$status"
