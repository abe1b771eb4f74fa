"""Resolve faults: a skipped data validation gives the reason resolve found; a blessing metric the inferred task
does not have fails the train stage before any training step."""

from __future__ import annotations

import json
import os

import numpy as np
import pytest
import tensorflow as tf
from kfp.dsl import Dataset, Markdown, Model

from components.prepare import prepare_data
from components.resolve import resolve_inputs
from components.train import train_model
from estimator_lib import release
from estimator_lib.config import BlessingConfig, JobConfig, PrepareConfig
from estimator_lib.config.blessing import BlessingError
from estimator_lib.config.stages import EvaluateSpec, PrepareSpec, TrainSpec
from estimator_lib.export.saved_model import METADATA_FILE


def publish_predicting(tmp_path, root: str, label: str) -> None:
    """Publishes a tiny export (one variable) whose export metadata says it predicts `label` (classes)."""
    export = tmp_path / f"export-{label}"
    (export / "variables").mkdir(parents=True)
    prefix = str(export / "variables" / "variables")
    tf.raw_ops.SaveV2(prefix=prefix, tensor_names=["w"], shape_and_slices=[""], tensors=[tf.constant(np.ones(2))])
    (export / "saved_model.pb").write_bytes(b"\x08\x01")  # a SavedModel proto with no meta graph
    schema = {"schema": {"label": {"name": label, "task": "classification"}}}
    (export / METADATA_FILE).parent.mkdir(parents=True, exist_ok=True)
    (export / METADATA_FILE).write_text(json.dumps(schema))
    release.publish_model(str(export), root)


def prepared(tmp_path, name: str, reference: str, task: str = None) -> Dataset:
    """The prepare stage run on a small CSV with the class label "label" (task auto unless given)."""
    rows = "\n".join(f"{i % 7},{'yes' if i % 3 else 'no'}" for i in range(60))
    (tmp_path / "data.csv").write_text(f"x,label\n{rows}\n")
    config = PrepareConfig(data=(str(tmp_path / "data.csv"),), label="label", task=task, num_workers=1)
    dataset = Dataset(name="dataset", uri=str(tmp_path / name / "dataset"), metadata={})
    validation = Markdown(name="validation", uri=str(tmp_path / name / "validation"), metadata={})
    prepare_data(PrepareSpec(config).to_json(indent=None), "v1", reference, dataset, validation)
    return dataset


def spec_of(tmp_path) -> str:
    (tmp_path / "data.csv").write_text("x,label\n1,yes\n")
    return PrepareSpec(PrepareConfig(data=(str(tmp_path / "data.csv"),), label="label")).to_json(indent=None)


@pytest.mark.parametrize(
    "published, warm_start, baseline, why",
    [
        ((), "none", "auto", ""),  # no model given or found: one message, so a reproduced run prepares the same bytes
        (("label",), "none", "none", ""),
        (
            ("species",),
            "none",
            "auto",
            "a new lineage: the published model predicts 'species' (classification); this run's label is 'label'",
        ),
    ],
    ids=["first-run", "cold-start", "other-lineage"],
)
def test_a_skipped_validation_says_why_this_run_continues_no_published_model(
    tmp_path, published, warm_start, baseline, why
):
    root = str(tmp_path / "published")
    for label in published:
        publish_predicting(tmp_path, root, label)
    resolved = resolve_inputs(spec_of(tmp_path), warm_start, baseline, root, EvaluateSpec().to_json(indent=None))
    validation = prepared(tmp_path, "run", resolved.reference).metadata["validation"]
    assert validation["status"] == "skipped" and validation["reference"] == ""
    assert validation["summary"] == (
        f"skipped: this run continues no published model{f' ({why.format(root=root)})' if why else ''}, so there is "
        "no data to compare with"
    )


def test_a_blessing_metric_the_inferred_task_lacks_fails_train_before_any_training_step(tmp_path):
    dataset = prepared(tmp_path, "run", "none")  # task auto: inferred from the label's values
    assert dataset.metadata["task"] == "classification"
    evaluate_spec = EvaluateSpec(BlessingConfig(thresholds={"rmse": 0.1})).to_json(indent=None)
    resolved = resolve_inputs(spec_of(tmp_path), "none", "auto", str(tmp_path / "published"), evaluate_spec)
    model = Model(name="model", uri=str(tmp_path / "model" / "model"), metadata={})
    job = JobConfig().with_overrides({"model.family": "linear", "training.train_steps": 2})
    train = {"spec": TrainSpec(job).to_json(indent=None), "tpu": '{"use_tpu": false}', "warm_start": "none"}
    with pytest.raises(BlessingError) as refused:
        train_model(dataset, **train, publish_root="", model=model, blessing_metrics=resolved.blessing_metrics)
    assert str(refused.value) == (
        "blessing metric(s) ['rmse'] do not apply to a classification label; use ['accuracy', 'log_loss', 'auc']"
    )
    assert not os.path.exists(model.uri) or not os.listdir(model.uri)  # no checkpoint, no event file
