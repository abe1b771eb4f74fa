"""Each component through its Python function, in-process, with artifacts made by hand (tiny real data, real
TensorFlow). The adapter and artifacts modules alone are in test_adapter.py and test_artifacts.py; the whole DAG
through the KFP local runner is in tests/e2e/."""

from __future__ import annotations

import csv
import os

import pytest
from kfp.dsl import Artifact, ClassificationMetrics, Dataset, Metrics, Model

from components import adapter, build_stages
from components.batch_predict import batch_predict
from components.evaluate import evaluate_model
from components.export import export_model
from components.prepare import prepare_data
from components.train import train_model
from estimator_lib import release
from estimator_lib.config import JobConfig

CPU = {"use_tpu": False}
LOCAL_JOB = {"tpu": {"strict": True}, "training": {"save_checkpoints_steps": 100, "train_steps": 40}}


def write_csv(path: str, n: int = 160) -> str:
    import synthetic

    with open(path, "w", newline="", encoding="utf-8") as f:
        writer = csv.writer(f)
        writer.writerow(["x 1", "x-2", "colour", "label"])
        for row in synthetic.make_rows(n, 3, "binary"):
            writer.writerow(["" if row[c] is None else row[c] for c in ("x 1", "x-2", "colour", "target")])
    return path


def artifact(cls, directory, name):
    return cls(name=name, uri=os.path.join(str(directory), name), metadata={})


@pytest.fixture(scope="module")
def stages(tmp_path_factory):
    """prepare -> train -> evaluate -> batch predict -> export, each called as its component function."""
    work = tmp_path_factory.mktemp("stages")
    data = write_csv(str(work / "data.csv"))
    dataset = artifact(Dataset, work, "dataset")
    prepare_data(
        data=data,
        label="label",
        task="auto",
        key_column="",
        eval_fraction=0.25,
        options={"num_workers": 1, "num_shards": 2.0},
        dataset=dataset,
    )
    model = artifact(Model, work, "model")
    train_model(
        dataset=dataset,
        job_config=LOCAL_JOB,
        model_family="linear",
        hidden_units=[8.0],
        learning_rate=0.05,
        max_epochs=100,
        train_batch_size=32,
        seed=1,
        tpu=CPU,
        warm_start="none",
        publish_root=str(work / "published"),
        model=model,
    )
    metrics, cmetrics, blessing = (
        artifact(Metrics, work, "metrics"),
        artifact(ClassificationMetrics, work, "cm"),
        artifact(Artifact, work, "blessing"),
    )
    evaluate_model(
        dataset=dataset,
        model=model,
        blessing_config={"thresholds": {"accuracy": 0.5}},
        baseline="latest",
        publish_root=str(work / "published"),
        tpu=CPU,
        metrics=metrics,
        classification_metrics=cmetrics,
        blessing=blessing,
    )
    predictions = artifact(Dataset, work, "predictions")
    batch_predict(dataset=dataset, model=model, data="eval", tpu=CPU, predictions=predictions)
    exported = artifact(Model, work, "exported")
    export_model(
        dataset=dataset,
        model=model,
        blessing=blessing,
        publish_root=str(work / "published"),
        tpu=CPU,
        exported=exported,
    )
    return dict(
        work=work,
        dataset=dataset,
        model=model,
        metrics=metrics,
        cmetrics=cmetrics,
        blessing=blessing,
        predictions=predictions,
        exported=exported,
    )


def test_prepare_describes_the_dataset(stages):
    meta = stages["dataset"].metadata
    assert meta["counts"]["train"] + meta["counts"]["valid"] + meta["counts"]["eval"] == 160
    assert meta["task"] == "classification" and meta["classes"] == ["no", "yes"] and meta["label"] == "label"
    assert os.path.exists(meta["schema_uri"])
    assert meta["fingerprint"] == release.fingerprint(stages["dataset"].uri)
    assert len(os.listdir(os.path.join(stages["dataset"].uri, "train"))) == 2  # num_shards 2.0 arrived as 2


def test_train_uses_the_artifact_uri_as_model_dir_and_records_the_config(stages):
    model = stages["model"]
    assert model.metadata["global_step"] == 40
    assert model.metadata["checkpoint"] == os.path.join(model.uri, "best", "model.ckpt-40")  # kept by validation
    job = JobConfig.from_dict(model.metadata["config"])
    assert job.model.family == "linear" and job.model.hidden_units == (8,) and job.training.seed == 1
    assert job.tpu.strict is True and job.training.warm_start_from is None
    with open(os.path.join(model.uri, adapter.JOB_CONFIG_FILE), encoding="utf-8") as f:
        assert JobConfig.from_json(f.read()) == job


def test_evaluate_logs_metrics_confusion_matrix_roc_and_blessing(stages):
    metrics = stages["metrics"].metadata
    assert {"accuracy", "auc_roc", "mean_loss", "blessed"} <= set(metrics) and metrics["blessed"] == 1.0
    cm = stages["cmetrics"].metadata
    assert [a["displayName"] for a in cm["confusionMatrix"]["annotationSpecs"]] == ["no", "yes"]
    rows = [r["row"] for r in cm["confusionMatrix"]["rows"]]
    eval_count = stages["dataset"].metadata["counts"]["eval"]
    assert sum(map(sum, rows)) == eval_count
    assert (rows[0][0] + rows[1][1]) / eval_count == pytest.approx(metrics["accuracy"])
    assert len(cm["confidenceMetrics"]) == 101
    verdict = adapter.read_blessing(stages["blessing"].uri)
    assert verdict.blessed and [c.name for c in verdict.checks] == ["trivial", "threshold", "reference"]
    assert stages["blessing"].metadata["baseline_uri"] == ""  # "latest" with nothing published: no baseline


def test_batch_predict_and_export(stages):
    predictions = stages["predictions"].metadata
    assert predictions["count"] == stages["dataset"].metadata["counts"]["eval"]
    assert all(os.path.exists(s) for s in predictions["shards"])
    exported = stages["exported"].metadata
    assert exported["tag_sets"] == [["serve"], ["serve", "tpu"]]
    assert exported["published"] is True
    assert release.latest(str(stages["work"] / "published")).uri == exported["published_uri"]


def test_evaluate_scores_the_published_baseline_with_the_same_code(stages, tmp_path):
    """The candidate against its own published export: same weights, same rows, same metric code."""
    root = str(stages["work"] / "published")
    metrics, cmetrics, blessing = (
        artifact(Metrics, tmp_path, "m"),
        artifact(ClassificationMetrics, tmp_path, "cm"),
        artifact(Artifact, tmp_path, "b"),
    )
    evaluate_model(
        dataset=stages["dataset"],
        model=stages["model"],
        blessing_config={"min_improvement": 0.01},
        baseline="latest",
        publish_root=root,
        tpu=CPU,
        metrics=metrics,
        classification_metrics=cmetrics,
        blessing=blessing,
    )
    verdict = adapter.read_blessing(blessing.uri)
    assert verdict.baseline_uri == release.latest(root).uri
    assert verdict.baseline_metrics == pytest.approx(verdict.candidate_metrics, abs=1e-6)
    assert not verdict.blessed
    assert verdict.reasons[0].startswith("vs baseline") and "min_improvement 0.01" in verdict.reasons[0]
    assert metrics.metadata["blessed"] == 0.0
    assert os.path.exists(os.path.join(blessing.uri, "baseline", "manifest.json"))


def test_unblessed_model_is_exported_but_not_published(stages, tmp_path):
    verdict = adapter.read_blessing(stages["blessing"].uri)
    refused = type(verdict)(**{**verdict.__dict__, "blessed": False})
    blessing = artifact(Artifact, tmp_path, "blessing")
    os.makedirs(blessing.uri)
    with open(os.path.join(blessing.uri, adapter.BLESSING_FILE), "w") as f:
        f.write(refused.to_json())
    exported = artifact(Model, tmp_path, "exported")
    root = str(tmp_path / "published")
    export_model(
        dataset=stages["dataset"],
        model=stages["model"],
        blessing=blessing,
        publish_root=root,
        tpu=CPU,
        exported=exported,
    )
    assert exported.metadata["published"] is False and exported.metadata["published_uri"] == ""
    assert exported.metadata["publish_reason"].startswith("not published: not blessed")
    assert not os.path.exists(root)


def test_components_are_lightweight_on_the_given_image():
    stages = build_stages("gcr.io/p/img@sha256:" + "0" * 64)
    for component in (stages.prepare, stages.train, stages.evaluate, stages.batch_predict, stages.export):
        container = component.component_spec.implementation.container
        assert container.image == "gcr.io/p/img@sha256:" + "0" * 64
        assert "pip install" not in " ".join(container.command)
        assert "from estimator_lib" in container.command[-1]  # imports inside the shipped body
