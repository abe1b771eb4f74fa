"""End to end: a recorded run, reproduced with `tpu-pipeline reproduce` into another output, has every stage's
output fingerprints; a changed data row is found in prepare, a changed seed in train.

Four local runs in all (a short step budget): the recorded run, its rerun, and reruns of two edited records.
Slow: `pytest -m "not slow"` skips them.
"""

from __future__ import annotations

import csv
import json
import os
import shutil
import subprocess
import sys

import pytest

from components import registry
from estimator_lib import manifest
from estimator_lib.data import common, embedded

pytestmark = pytest.mark.slow

TPU_PIPELINE = os.path.join(os.path.dirname(sys.executable), "tpu-pipeline")

STAGES = registry.STAGES  # in the DAG's order, the order reproduce reports them in
SMALL = ("--set", "training.train_steps=20")  # a short step budget; preparation in parallel, as by default


def run_cli(*args: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2")
    return subprocess.run([TPU_PIPELINE, *args], capture_output=True, text=True, timeout=900, env=env, check=False)


def load_summary(output: str) -> dict:
    with open(os.path.join(output, "summary.json"), encoding="utf-8") as f:
        return json.load(f)


@pytest.fixture(scope="module")
def recorded(tmp_path_factory):
    """A run on a copy of the penguins CSV: (work directory, its summary.json path, its summary)."""
    work = tmp_path_factory.mktemp("reproduce")
    data = str(work / "penguins.csv")
    shutil.copyfile(embedded.resolve_data("embedded:penguins"), data)
    output = str(work / "recorded")
    proc = run_cli("run-local", "--output", output, "--data", data, "--label", "species", *SMALL)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    return work, os.path.join(output, "summary.json"), load_summary(output)


@pytest.fixture(scope="module")
def reproduced(recorded):
    """`tpu-pipeline reproduce SUMMARY --output DIR` of the fresh run: (the command's result, the rerun's summary)."""
    work, path, _ = recorded
    output = str(work / "rerun")
    proc = run_cli("reproduce", path, "--output", output)
    return proc, load_summary(output)


def reproduce_edited(work, path: str, name: str, edit) -> tuple:
    """`reproduce` of a copy of the record with `edit(summary)` applied: (the command's result, the rerun's summary)."""
    with open(path, encoding="utf-8") as f:
        summary = json.load(f)
    edit(summary)
    edited = str(work / f"{name}.json")
    with open(edited, "w", encoding="utf-8") as f:
        json.dump(summary, f)
    output = str(work / name)
    proc = run_cli("reproduce", edited, "--output", output)
    return proc, load_summary(output)


def manifests(summary: dict) -> dict:
    return {stage: manifest.read_manifest(uri) for stage, uri in summary["manifests"].items()}


def edit_spec(work, stage: str, change):
    """An edit of a record: `change(config)` applied to a copy of `stage`'s manifest, which the record then links.
    Reproduce reads each stage's spec there (never the summary's view of the settings)."""

    def edit(summary: dict) -> None:
        record = manifest.read_manifest(summary["manifests"][stage])
        change(record["config"])
        summary["manifests"][stage] = manifest.write_manifest(str(work / f"edited-{stage}"), record)

    return edit


def test_a_fresh_runs_record_is_reproduced_stage_by_stage_and_exits_0(recorded, reproduced):
    _, _, first = recorded
    proc, rerun = reproduced
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    report = proc.stdout.splitlines()
    assert report[-9].startswith(f"recorded run {first['run']['id']} against its rerun {rerun['run']['id']}")
    assert report[-8:-1] == [f"  {stage}: identical" for stage in STAGES]
    assert report[-1] == "reproduced: every stage's outputs have the recorded fingerprints (7 stages)"


@pytest.mark.determinism
def test_two_runs_into_different_outputs_have_identical_fingerprints_for_every_stage(recorded, reproduced):
    _, _, first = recorded
    _, rerun = reproduced
    assert rerun["run"]["dir"] != first["run"]["dir"]
    assert rerun["fingerprints"] == first["fingerprints"]
    before, after = manifests(first), manifests(rerun)
    recorded = set(STAGES)
    assert set(before) == set(after) == recorded
    for stage in sorted(recorded):
        assert before[stage]["outputs"] != {} and before[stage]["inputs"] != {}
        fingerprints = [{k: v["fingerprint"] for k, v in m["outputs"].items()} for m in (before[stage], after[stage])]
        assert fingerprints[0] == fingerprints[1], stage
        assert before[stage]["outputs"] != after[stage]["outputs"]  # the same content in other folders
        assert before[stage]["versions"] == after[stage]["versions"]
    assert before["train"]["seeds"] == {"job.training.seed": 42}
    assert rerun["metrics"] == first["metrics"]


def edit_a_training_row(source: str, target: str, prepare: dict) -> int:
    """Copies the CSV `source` to `target` with one row's island changed, choosing the first row whose changed
    contents land in the train split (a row's split follows from a hash of its contents,
    `estimator_lib.data.common`), so the model sees the change. Returns the row's line number."""
    with open(source, encoding="utf-8", newline="") as f:
        rows = list(csv.reader(f))
    header, missing = rows[0], set(prepare["missing_values"])
    fractions = (prepare["eval_fraction"], prepare["test_fraction"], prepare["valid_fraction"])
    for line, row in enumerate(rows[1:], start=2):
        edited = [{"Torgersen": "Biscoe", "Biscoe": "Dream", "Dream": "Torgersen"}.get(v, v) for v in row]
        content = common.content_text((c, None if v in missing else v) for c, v in zip(header, edited))
        if edited != row and common.split_index(common.hash64(content), *fractions) == 0:
            with open(target, "w", encoding="utf-8", newline="") as f:
                csv.writer(f, lineterminator="\n").writerows(rows[: line - 1] + [edited] + rows[line:])
            return line
    raise AssertionError(f"no row of {source} lands in the train split when changed")


def test_one_changed_data_row_is_found_in_prepare_and_changes_every_fingerprint_after_it(recorded):
    work, path, first = recorded
    changed = str(work / "changed.csv")
    prepare = manifests(first)["prepare"]["config"]["prepare"]
    line = edit_a_training_row(first["config"]["data"], changed, prepare)
    assert line > 1

    edit = edit_spec(work, "prepare", lambda config: config["prepare"].update(data=[changed]))
    proc, rerun = reproduce_edited(work, path, "changed-data", edit)
    assert proc.returncode == 1, proc.stdout[-4000:] + proc.stderr[-4000:]
    assert "  prepare: differs (data): inputs.files: " in proc.stdout
    assert proc.stdout.splitlines()[-1] == "not reproduced: the first stage that differs is prepare (data)"
    for stage in ("train", "export", "batch_predict", "evaluate"):  # the model and all it computes changed with it
        assert f"  {stage}: differs (data): inputs.dataset: " in proc.stdout
    for name in ("dataset", "model", "exported", "predictions", "blessing"):
        assert rerun["fingerprints"][name] != first["fingerprints"][name], name


def test_a_changed_seed_is_found_in_train(recorded):
    work, path, first = recorded

    def seed_43(config: dict) -> None:
        config["job"]["training"]["seed"] = 43

    proc, rerun = reproduce_edited(work, path, "changed-seed", edit_spec(work, "train", seed_43))
    assert proc.returncode == 1, proc.stdout[-4000:] + proc.stderr[-4000:]
    assert "  prepare: identical" in proc.stdout
    # The record now says seed 43 beside the seed-42 model: the rerun trains with 43 and gets another model.
    assert "  train: differs (output): outputs.model: " in proc.stdout
    assert proc.stdout.splitlines()[-1] == "not reproduced: the first stage that differs is train (output)"
    assert rerun["fingerprints"]["dataset"] == first["fingerprints"]["dataset"]
    assert rerun["fingerprints"]["model"] != first["fingerprints"]["model"]

    diff = run_cli("diff", path, os.path.join(rerun["run"]["dir"], "summary.json"))
    assert diff.returncode == 1
    assert diff.stdout.startswith(f"{first['run']['id']} and {rerun['run']['id']} differ in config, ")
    assert "config:\n  job.training.seed: 42 -> 43 (train" in diff.stdout
    assert "\n  model: " in diff.stdout and "(train)\n" in diff.stdout


def test_the_readme_recipe_reproduce_then_diff_is_equivalent(recorded, reproduced):
    """README: `reproduce runs/local --output runs/again`, then `diff runs/local runs/again`: exit 0, one line."""
    work, _, first = recorded
    _, rerun = reproduced
    diff = run_cli("diff", str(work / "recorded"), str(work / "rerun"))
    assert diff.returncode == 0, diff.stdout + diff.stderr
    assert diff.stdout == (
        f"{first['run']['id']} and {rerun['run']['id']} are equivalent: same data, config, versions, machine, "
        "metrics, verdict, artifact fingerprints\n"
    )
