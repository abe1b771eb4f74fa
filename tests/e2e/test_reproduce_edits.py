"""End to end: `tpu-pipeline reproduce` checks a recorded run against its own files and names an edit made after
the run: one byte of a prediction shard, one metric in summary.json, the training seed in summary.json's config.

Three real runs (a short step budget), each edited in place. Not copies of one run: a run's summary, manifests and
stage records name its files by absolute path, so a copied folder's record still names the original's files.
Each `reproduce` also reruns its run (the rerun matches the stages' records: the edits are after the fact), so
the test runs six pipelines, three at a time. Slow: `pytest -m "not slow"` skips it.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from pipelines import reproduce

pytestmark = pytest.mark.slow

TPU_PIPELINE = os.path.join(os.path.dirname(sys.executable), "tpu-pipeline")
SMALL = ("--set", "training.train_steps=20")
EDITS = ("shard", "metric", "seed")


def run_all(commands: dict[str, list[str]]) -> dict[str, subprocess.CompletedProcess]:
    """Runs the `tpu-pipeline` command lines side by side: {name: its result}."""
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2")
    started = {
        name: subprocess.Popen(
            [TPU_PIPELINE, *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env
        )
        for name, args in commands.items()
    }
    done = {}
    for name, proc in started.items():
        out, err = proc.communicate(timeout=900)
        done[name] = subprocess.CompletedProcess(proc.args, proc.returncode, out, err)
    return done


def load(path: str) -> dict:
    with open(path, encoding="utf-8") as f:
        return json.load(f)


def save(path: str, summary: dict) -> None:
    with open(path, "w", encoding="utf-8") as f:
        json.dump(summary, f, indent=2, sort_keys=True)


def flip_one_byte(path: str) -> None:
    """Changes one digit of a prediction shard (a class id or probability): still valid JSON Lines."""
    with open(path, "rb") as f:
        data = bytearray(f.read())
    at = next(i for i, b in enumerate(data) if chr(b).isdigit())
    data[at] = ord("1") if data[at] != ord("1") else ord("2")
    with open(path, "wb") as f:
        f.write(bytes(data))


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """Three finished runs on the embedded penguins: {edit: summary.json path}."""
    work = tmp_path_factory.mktemp("edits")
    outputs = {edit: str(work / edit) for edit in EDITS}
    done = run_all({edit: ["run-local", "--output", out, *SMALL] for edit, out in outputs.items()})
    for edit, proc in done.items():
        assert proc.returncode == 0, edit + proc.stdout[-3000:] + proc.stderr[-3000:]
    return {edit: os.path.join(out, "summary.json") for edit, out in outputs.items()}


def differences(report: str, run_id: str) -> list[str]:
    """The lines `reproduce` lists under "differences between its files and its record"."""
    lines = report.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(f"recorded run {run_id}: "))
    end = next(i for i, line in enumerate(lines) if line.startswith(f"recorded run {run_id} against its rerun "))
    return [line.strip() for line in lines[start + 1 : end]]


def test_reproduce_names_an_edited_shard_metric_and_seed(runs, tmp_path):
    records = {edit: reproduce.read_record(path) for edit, path in runs.items()}
    for edit, record in records.items():
        assert reproduce.verify_record(record) == [], edit  # a run as it ended agrees with its files

    shard = records["shard"].summary.results.predictions.shards[0]
    flip_one_byte(shard)
    metric = load(runs["metric"])
    accuracy = metric["metrics"]["accuracy"]
    metric["metrics"]["accuracy"] = 0.5
    save(runs["metric"], metric)
    seed = load(runs["seed"])
    assert seed["config"]["job_config"]["training"]["seed"] == 42
    seed["config"]["job_config"]["training"]["seed"] = 7
    save(runs["seed"], seed)

    done = run_all({edit: ["reproduce", path, "--output", str(tmp_path / edit)] for edit, path in runs.items()})

    found = {}
    for edit, proc in done.items():
        assert proc.returncode == 1, edit + proc.stdout[-3000:] + proc.stderr[-3000:]
        found[edit] = differences(proc.stdout, records[edit].name)
        last = proc.stdout.splitlines()[-1]
        assert last.startswith("not reproduced: the recorded run's files or summary were changed after it ran ("), last
        assert last.endswith("; its stages' records are reproduced by the rerun"), last
        assert "  train: identical" in proc.stdout  # the rerun matches the stages' records
    shard_line = f"batch_predict: {os.path.basename(shard)}: its bytes no longer match the recorded sha256 (recorded "
    assert len(found["shard"]) == 1 and found["shard"][0].startswith(shard_line), found["shard"]
    assert found["metric"] == [
        f"summary.json: metrics.accuracy 0.5 differs from the evaluate stage's record {json.dumps(accuracy)}"
    ]
    assert found["seed"] == ["summary.json: config.job_config.training.seed 7 differs from the train stage's record 42"]
