"""End to end: a run whose processes are all SIGKILLed as soon as its release stage moved LATEST (it published,
but could not record that) is run again: the rerun exits 0 reporting the version its first attempt
published, and the publish root holds nothing else (real KFP local runner, real TensorFlow). Slow."""

from __future__ import annotations

import json
import os
import time

import pytest

from pipelines import cli
from tests.e2e.test_failures import kill_tree, run_cli, run_folder, start_cli, wait_for

pytestmark = pytest.mark.slow


def test_a_run_killed_after_its_release_started_reports_on_rerun_the_version_it_published(tmp_path, capsys):
    output = str(tmp_path / "out")
    root = os.path.join(output, "published")
    latest = os.path.join(root, "LATEST")
    proc, console = start_cli(output)
    try:
        folder = run_folder(output)
        wait_for(lambda: "release: running" in open(console, encoding="utf-8").read(), 900, "the release stage")
        deadline = time.monotonic() + 60
        while not os.path.exists(latest) and time.monotonic() < deadline:  # kill it as soon as LATEST moved
            time.sleep(0.01)
        kill_tree(proc.pid)
        proc.wait(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert folder.read_summary().to_dict()["status"] == "running"  # nobody could record the end
    with open(latest, encoding="utf-8") as f:
        version = json.load(f)["version"]  # the first attempt published before it was killed

    again = run_cli(output)
    assert again.returncode == 0, again.stdout[-3000:] + again.stderr[-3000:]
    summary = folder.read_summary().to_dict()
    assert summary["status"] == "ok" and summary["run"]["attempts"] == 2
    uri = os.path.join(root, "versions", version)
    reason = f"published version {version} at {uri} (by an earlier attempt of this run)"
    assert summary["export"] | {"published": True, "published_version": version, "reason": reason} == summary["export"]
    assert f"  {reason}\n" in again.stdout
    assert os.listdir(os.path.join(root, "versions")) == [version]
    capsys.readouterr()
    assert cli.main(["list", "--output", output]) == 0
    assert capsys.readouterr().out.rstrip().endswith(f"published {version}")  # `list` says so too
