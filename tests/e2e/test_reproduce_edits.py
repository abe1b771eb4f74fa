"""End to end: `tpu-pipeline reproduce` checks a recorded run against its own files and names an edit made after
the run: one byte of a prediction shard, one metric in summary.json, the training seed in summary.json's config.

One real run (a short step budget). The metric and the seed are edited in copies of its summary.json (a record
may be given from anywhere: it names the run's files by absolute path), reproduced side by side; then one byte
of its shard is edited in place and the run's own record reproduced. Each `reproduce` also reruns the run (the
rerun matches the stages' records: the edits are after the fact): four pipelines. Slow: `pytest -m "not slow"`
skips it.
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
def recorded(tmp_path_factory):
    """A finished run on the embedded penguins: its summary.json's path."""
    output = str(tmp_path_factory.mktemp("edits") / "run")
    done = run_all({"run": ["run-local", "--output", output, *SMALL]})["run"]
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return os.path.join(output, "summary.json")


def differences(report: str, run_id: str) -> list[str]:
    """The lines `reproduce` lists under "differences between its files and its record"."""
    lines = report.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(f"recorded run {run_id}: "))
    end = next(i for i, line in enumerate(lines) if line.startswith(f"recorded run {run_id} against its rerun "))
    return [line.strip() for line in lines[start + 1 : end]]


def test_reproduce_names_an_edited_shard_metric_and_seed(recorded, tmp_path):
    record = reproduce.read_record(recorded)
    assert reproduce.verify_record(record) == []  # a run as it ended agrees with its files
    runs = {edit: str(tmp_path / "records" / edit / "summary.json") for edit in ("metric", "seed")}
    metric = load(recorded)
    accuracy = metric["metrics"]["accuracy"]
    metric["metrics"]["accuracy"] = 0.5
    seed = load(recorded)
    assert seed["config"]["job_config"]["training"]["seed"] == 42
    seed["config"]["job_config"]["training"]["seed"] = 7
    for edit, summary in (("metric", metric), ("seed", seed)):
        os.makedirs(os.path.dirname(runs[edit]))
        save(runs[edit], summary)
    done = run_all({edit: ["reproduce", path, "--output", str(tmp_path / edit)] for edit, path in runs.items()})

    shard = record.summary.results.predictions.shards[0]
    flip_one_byte(shard)  # after the others' reproduce: their records name this shard too
    runs["shard"] = recorded
    done.update(run_all({"shard": ["reproduce", recorded, "--output", str(tmp_path / "shard")]}))

    found = {}
    for edit, proc in done.items():
        assert proc.returncode == 1, edit + proc.stdout[-3000:] + proc.stderr[-3000:]
        found[edit] = differences(proc.stdout, record.name)
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
