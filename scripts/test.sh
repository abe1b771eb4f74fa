#!/usr/bin/env bash
# Sets up .venv and runs the whole test suite (slow end-to-end tests included), then runs the tests marked
# `determinism` (bitwise claims) again under a second CPU kernel setting, oneDNN off: a claim that holds under
# one kernel setting only then fails on this machine, not first on another CPU.
# The tests run in TEST_WORKERS processes (default 2, pytest-xdist), a test module to a process at a time, so that
# a module's shared runs are made once. Extra arguments go to pytest, e.g. `bash scripts/test.sh -m "not slow"` to
# skip the slow ones; with arguments the second kernel setting is not run (run it by hand: TF_ENABLE_ONEDNN_OPTS=0 .venv/bin/python -m pytest -m determinism).
set -uo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh || exit 1

run_pytest() {
  "$@"
  local status=$?
  if [ "$status" -eq 5 ]; then
    echo "test.sh: pytest collected no tests; that counts as a failure" >&2
    return 1
  fi
  return "$status"
}

run_pytest .venv/bin/python -m pytest -n "${TEST_WORKERS:-2}" --dist loadfile --no-loadscope-reorder --durations=25 "$@"
status=$?
if [ "$#" -eq 0 ]; then
  echo "test.sh: the determinism tests again with oneDNN off (TF_ENABLE_ONEDNN_OPTS=0)"
  TF_ENABLE_ONEDNN_OPTS=0 run_pytest .venv/bin/python -m pytest -n "${TEST_WORKERS:-2}" --dist loadfile --no-loadscope-reorder -m determinism
  second=$?
  [ "$status" -ne 0 ] || status=$second
fi
exit "$status"
