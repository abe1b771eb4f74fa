"""A retry given fresh task directories adopts the outputs of this run's newest attempt on the same inputs, and
only those: not another run's, not an attempt on other inputs or of another stage. Files made by hand; the
training that continues from what was adopted is in test_components.py."""

from __future__ import annotations

import json
import os

from kfp.dsl import Model

from components import records

INPUTS = {"dataset": "sha256:aa", "job": {"training": {"train_steps": 40}}}


def model_in(run_dir, task: str) -> Model:
    return Model(name="model", uri=os.path.join(str(run_dir), task, "model"), metadata={})


def interrupted_attempt(run_dir, task: str, inputs=INPUTS, step: int = 20, started_at: str = "") -> Model:
    """An attempt that began and wrote the checkpoint of `step`, then was killed."""
    model = model_in(run_dir, task)
    record = records.StageRecord("train", {"model": model}, inputs)
    record.begin()
    if started_at:  # begin records the time it started; attempts of one test start within the same second
        with open(record.path, encoding="utf-8") as f:
            written = json.load(f)
        with open(record.path, "w", encoding="utf-8") as f:
            json.dump({**written, "started_at": started_at}, f)
    os.makedirs(os.path.join(model.uri, "best"))
    for name in (f"model.ckpt-{step}.index", f"model.ckpt-{step}.data-00000-of-00001", "best/validation.json"):
        with open(os.path.join(model.uri, name), "w", encoding="utf-8") as f:
            f.write(f"{task} {name}")
    with open(os.path.join(model.uri, "checkpoint"), "w", encoding="utf-8") as f:
        f.write(f'model_checkpoint_path: "model.ckpt-{step}"\n')
    return model


def files(model: Model) -> dict[str, str]:
    found = {}
    for base, _, names in os.walk(model.uri):
        for name in names:
            with open(os.path.join(base, name), encoding="utf-8") as f:
                found[os.path.relpath(os.path.join(base, name), model.uri)] = f.read()
    return found


def test_a_retry_in_fresh_directories_adopts_the_newest_interrupted_attempt_of_its_run(tmp_path):
    interrupted_attempt(tmp_path, "train-model_1", step=20, started_at="2026-11-25T10:00:00+00:00")
    newest = interrupted_attempt(tmp_path, "train-model_2", step=30, started_at="2026-11-25T10:05:00+00:00")
    retry = model_in(tmp_path, "train-model_3")
    record = records.StageRecord("train", {"model": retry}, INPUTS)
    assert record.adopt_interrupted() == os.path.join(str(tmp_path), "train-model_2")
    assert files(retry) == files(newest)
    assert files(retry)["checkpoint"] == 'model_checkpoint_path: "model.ckpt-30"\n'
    record.begin()  # the same inputs: what was adopted is kept
    assert files(retry) == files(newest)


def test_nothing_is_adopted_from_another_run_other_inputs_another_stage_or_into_a_recorded_directory(tmp_path):
    interrupted_attempt(tmp_path / "last-week", "train-model_1")
    other = {**INPUTS, "dataset": "sha256:bb"}
    interrupted_attempt(tmp_path / "run", "train-model_1", inputs=other)
    evaluate = records.StageRecord("evaluate", {"model": model_in(tmp_path / "run", "evaluate_1")}, INPUTS)
    evaluate.begin()  # another stage on the same inputs
    retry = model_in(tmp_path / "run", "train-model_2")
    assert records.StageRecord("train", {"model": retry}, INPUTS).adopt_interrupted() is None
    assert not os.path.exists(retry.uri)
    mine = interrupted_attempt(tmp_path / "run", "train-model_3", inputs=other)
    assert records.StageRecord("train", {"model": mine}, other).adopt_interrupted() is None  # it has its record


def test_an_attempt_that_finished_in_a_task_that_failed_later_is_adopted_whole(tmp_path):
    finished = interrupted_attempt(tmp_path, "train-model_1", step=40)
    records.StageRecord("train", {"model": finished}, INPUTS).finish()
    retry = model_in(tmp_path, "train-model_2")
    assert records.StageRecord("train", {"model": retry}, INPUTS).adopt_interrupted() == str(tmp_path / "train-model_1")
    assert files(retry) == files(finished)


def test_copy_tree_copies_checkpoint_state_files_last(tmp_path):
    source = interrupted_attempt(tmp_path, "train-model_1")
    with open(os.path.join(source.uri, "best", "checkpoint"), "w", encoding="utf-8") as f:
        f.write('model_checkpoint_path: "model.ckpt-20"\n')
    copied = records.copy_tree(source.uri, str(tmp_path / "copy"))
    assert copied == [
        "best/validation.json",
        "model.ckpt-20.data-00000-of-00001",
        "model.ckpt-20.index",
        "best/checkpoint",
        "checkpoint",
    ]
