"""Dual export (serve + serve,tpu), verification, saved_model_cli, and scoring from the SavedModel.

One tiny DNN per module (multiclass); a regression model for the regression signatures and output.
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
import subprocess
import sys

import numpy as np
import pytest
import synthetic
from saved_models import damaged_copy

from estimator_lib import estimator, storage
from estimator_lib.config import JobConfig, ModelConfig, TPUSettings, TrainingConfig
from estimator_lib.data.records import read_tfrecords
from estimator_lib.export import (
    ExportVerificationError,
    export_model,
    read_export_metadata,
    run_cpu_graph,
    verify_export,
)
from estimator_lib.model.inputs import resolve_files
from estimator_lib.predict import batch_predict, predict_from_saved_model, read_predictions
from estimator_lib.schema import Schema

B = 8
SAVED_MODEL_CLI = os.path.join(os.path.dirname(sys.executable), "saved_model_cli")


@dataclasses.dataclass(frozen=True)
class Exported:
    job: JobConfig
    schema: Schema
    model_dir: str
    data: str
    root: str
    result: object


def _train_and_export(root: str, task: str, n: int = 40) -> Exported:
    schema = synthetic.make_schema(task)
    train, _ = synthetic.write_dataset(os.path.join(root, "train"), synthetic.make_rows(96, 3, task), schema)
    data, _ = synthetic.write_dataset(os.path.join(root, "data"), synthetic.make_rows(n, 11, task), schema)
    job = JobConfig(
        tpu=TPUSettings(iterations_per_loop=10),
        training=TrainingConfig(train_batch_size=16, predict_batch_size=B, train_steps=30, save_checkpoints_steps=30),
        model=ModelConfig(family="dnn", hidden_units=(8,), embedding_dim=3),
    )
    model_dir = os.path.join(root, "model")
    estimator.train(job, schema, train, model_dir)
    result = export_model(job, schema, model_dir, os.path.join(root, "export"), verify_rows=data)
    return Exported(job, schema, model_dir, data, root, result)


@pytest.fixture(scope="module")
def exported(tmp_path_factory) -> Exported:
    return _train_and_export(str(tmp_path_factory.mktemp("export")), "multiclass")


def test_export_has_both_tag_sets_signatures_and_metadata(exported):
    result = exported.result

    assert result.tag_sets == (("serve",), ("serve", "tpu"))
    assert os.path.dirname(result.export_dir) == os.path.join(exported.root, "export")
    assert re.fullmatch(r"\d+", os.path.basename(result.export_dir))
    assert sorted(os.listdir(os.path.join(exported.root, "export"))) == [os.path.basename(result.export_dir)]
    for tags in ("serve", "serve,tpu"):
        sigs = result.signatures[tags]
        assert sorted(sigs) == [
            "classification",
            "predict",
            "raw:predict",
            "raw:serving_default",
            "serving_default",
        ]
        assert sigs["predict"]["inputs"] == {"examples": {"dtype": "string", "shape": [-1], "tensor": "examples:0"}}
        assert {k: (v["dtype"], v["shape"]) for k, v in sigs["raw:predict"]["inputs"].items()} == {
            "f_colour": ("string", [-1]),
            "f_x_1": ("float32", [-1]),
            "f_x_2": ("float32", [-1]),
        }
        outputs = {k: (v["dtype"], v["shape"]) for k, v in sigs["predict"]["outputs"].items()}
        if tags == "serve":
            assert outputs == {
                "class_ids": ("int32", [-1]),
                "logits": ("float32", [-1, 3]),
                "probabilities": ("float32", [-1, 3]),
            }
        else:  # outputs of TPUPartitionedCall carry no static shape
            assert outputs == {
                "class_ids": ("int32", None),
                "logits": ("float32", None),
                "probabilities": ("float32", None),
            }
    metadata = read_export_metadata(result.export_dir)
    assert metadata == result.metadata
    assert metadata["api_version"] == 1 and metadata["global_step"] == 30
    assert metadata["tag_sets"] == [["serve"], ["serve", "tpu"]]
    verification = metadata["verification"]
    assert verification["tpu_partitioned_call"] is True and verification["rows_checked"] == 40
    # The SavedModel and the checkpoint run the same graph; only float summation order (batch-size dependent
    # CPU kernels) may differ, far inside the verification tolerance.
    assert sorted(verification["max_abs_diff"]) == ["predict", "raw:predict"]
    assert max(verification["max_abs_diff"].values()) <= 1e-6
    assert Schema.from_dict(metadata["schema"]) == exported.schema
    assert storage.is_committed(result.export_dir)


def test_checkpoint_and_saved_model_predictions_agree(exported, tmp_path):
    passthrough = ["x-2", "target"]
    batch_predict(
        exported.job,
        exported.schema,
        exported.model_dir,
        exported.data,
        str(tmp_path / "ckpt"),
        passthrough=passthrough,
    )
    result = predict_from_saved_model(
        exported.result.export_dir,
        exported.schema,
        exported.data,
        str(tmp_path / "sm"),
        batch_size=6,
        passthrough=passthrough,
        num_shards=2,
    )

    from_checkpoint, from_saved_model = (
        read_predictions(str(tmp_path / "ckpt")),
        read_predictions(str(tmp_path / "sm")),
    )
    assert result.count == 40 and [s["rows"] for s in result.manifest["shards"]] == [20, 20]
    assert result.manifest["source"] == {"kind": "saved_model", "export_dir": exported.result.export_dir}
    strip = ("probabilities",)
    assert [{k: v for k, v in r.items() if k not in strip} for r in from_saved_model] == [
        {k: v for k, v in r.items() if k not in strip} for r in from_checkpoint
    ]
    a = np.array([list(r["probabilities"].values()) for r in from_checkpoint])
    b = np.array([list(r["probabilities"].values()) for r in from_saved_model])
    np.testing.assert_allclose(b, a, atol=1e-5, rtol=0)


@pytest.mark.slow
def test_saved_model_cli_show_and_run(exported):
    export_dir = exported.result.export_dir
    show = subprocess.run(
        [SAVED_MODEL_CLI, "show", "--dir", export_dir, "--all"],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    assert "MetaGraphDef with tag-set: 'serve' contains" in show.stdout
    assert "MetaGraphDef with tag-set: 'serve, tpu' contains" in show.stdout
    assert "signature_def['raw:predict']" in show.stdout

    example = '[{"f_x_1":[1.0],"f_x_2":[-1.0],"f_colour":["red"]}]'
    run = subprocess.run(
        [
            SAVED_MODEL_CLI,
            "run",
            "--dir",
            export_dir,
            "--tag_set",
            "serve",
            "--signature_def",
            "predict",
            "--input_examples",
            f"examples={example}",
        ],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    printed = re.search(r"Result for output key probabilities:\n\[\[([^\]]*)\]\]", run.stdout)
    assert printed, run.stdout
    want = run_cpu_graph(
        export_dir,
        "raw:predict",
        {
            "f_x_1": np.array([1.0], np.float32),
            "f_x_2": np.array([-1.0], np.float32),
            "f_colour": np.array([b"red"]),
        },
    )
    np.testing.assert_allclose([float(v) for v in printed.group(1).split()], want["probabilities"][0], atol=1e-6)


def test_api_version_2_exports_a_tpu_graph_through_the_model_fn(exported):
    result = export_model(
        exported.job,
        exported.schema,
        exported.model_dir,
        os.path.join(exported.root, "v2"),
        api_version=2,
        verify_rows=exported.data,
    )

    assert result.tag_sets == (("serve",), ("serve", "tpu"))
    assert result.metadata["api_version"] == 2
    assert sorted(result.metadata["verification"]["max_abs_diff"]) == ["predict", "raw:predict"]
    assert max(result.metadata["verification"]["max_abs_diff"].values()) <= 1e-6


def test_export_to_gcs_and_score_from_it(exported, tmp_path, gcs_prefix):
    result = export_model(exported.job, exported.schema, exported.model_dir, f"{gcs_prefix}/export")

    assert result.export_dir.startswith(f"{gcs_prefix}/export/") and storage.is_committed(result.export_dir)
    assert read_export_metadata(result.export_dir)["verification"]["rows_checked"] == 0
    names = {u[len(result.export_dir) + 1 :] for u in storage.list_files(result.export_dir)}
    assert {"saved_model.pb", "variables/variables.index", "assets.extra/export_metadata.json"} <= names
    predict_from_saved_model(result.export_dir, exported.schema, exported.data, str(tmp_path / "gcs"))
    predict_from_saved_model(exported.result.export_dir, exported.schema, exported.data, str(tmp_path / "local"))
    assert read_predictions(str(tmp_path / "gcs")) == read_predictions(str(tmp_path / "local"))


def test_verify_rejects_a_missing_tpu_graph_or_tpu_call(exported, tmp_path):
    def drop_tpu_graph(proto):
        del proto.meta_graphs[1]

    def rename_tpu_call(proto):
        for node in proto.meta_graphs[1].graph_def.node:
            if node.op == "TPUPartitionedCall":
                node.op = "PartitionedCall"

    with pytest.raises(ExportVerificationError, match=r"tag sets \['serve'\] but no 'serve,tpu' meta graph"):
        verify_export(damaged_copy(exported.result.export_dir, str(tmp_path / "a"), drop_tpu_graph))
    with pytest.raises(ExportVerificationError, match="'serve,tpu' meta graph holds no TPUPartitionedCall"):
        verify_export(damaged_copy(exported.result.export_dir, str(tmp_path / "b"), rename_tpu_call))


def test_verify_rejects_outputs_that_differ_from_the_estimator(exported):
    records = list(read_tfrecords(resolve_files(exported.data)))[:5]
    good = run_cpu_graph(exported.result.export_dir, "predict", {"examples": np.array(records, dtype=object)})
    expected = {"class_ids": good["class_ids"], "probabilities": good["probabilities"]}
    report = verify_export(exported.result.export_dir, schema=exported.schema, sample=records, expected=expected)
    assert report["rows_checked"] == 5

    shifted = dict(expected, probabilities=expected["probabilities"] + 1e-3)
    with pytest.raises(
        ExportVerificationError,
        match=r"signature 'predict' output 'probabilities' differs from "
        r"the estimator by 0\.001 \(allowed rtol 1e-05 \+ atol 1e-06\)",
    ):
        verify_export(exported.result.export_dir, schema=exported.schema, sample=records, expected=shifted)


def test_export_errors_name_the_setting(exported, tmp_path):
    with pytest.raises(ValueError, match=r"api_version=3 must be 1 \(TPUEstimator rewrites for TPU\) or 2"):
        export_model(exported.job, exported.schema, exported.model_dir, str(tmp_path), api_version=3)
    with pytest.raises(FileNotFoundError, match="no checkpoint in model_dir=.* to export; train first"):
        export_model(exported.job, exported.schema, str(tmp_path / "none"), str(tmp_path / "export"))
    assert not os.path.exists(tmp_path / "export")


@pytest.mark.slow
def test_regression_export_and_outputs_agree(tmp_path):
    reg = _train_and_export(str(tmp_path), "regression", n=B + 1)

    assert sorted(reg.result.signatures["serve"]) == [
        "predict",
        "raw:predict",
        "raw:serving_default",
        "regression",
        "serving_default",
    ]
    batch_predict(reg.job, reg.schema, reg.model_dir, reg.data, str(tmp_path / "ckpt"))
    predict_from_saved_model(reg.result.export_dir, reg.schema, reg.data, str(tmp_path / "sm"), batch_size=4)
    a, b = read_predictions(str(tmp_path / "ckpt")), read_predictions(str(tmp_path / "sm"))
    assert [list(r) for r in a] == [["key", "file", "record", "value"]] * (B + 1)  # TFRecords: file and record
    assert [(r["key"], r["file"], r["record"]) for r in a] == [(r["key"], r["file"], r["record"]) for r in b]
    assert len({(r["file"], r["record"]) for r in a}) == B + 1  # each row's own place in its file
    np.testing.assert_allclose([r["value"] for r in b], [r["value"] for r in a], atol=1e-5, rtol=0)
    assert json.loads(json.dumps(a)) == a
