"""export/saved_model.py on one tiny model trained with a feature selection: an export of a chosen (older)
checkpoint and what its metadata records, version numbering, loading for serving (local and gs://), and each
verification check's message on a damaged copy. (The end-to-end export, API v2, saved_model_cli and scoring
agreement are in tests/lib/export/test_export.py.)"""

from __future__ import annotations

import dataclasses
import os
import shutil
import tempfile

import numpy as np
import pytest
import synthetic
import tensorflow as tf
from saved_models import damaged_copy

from estimator_lib import estimator, storage
from estimator_lib.config import JobConfig, ModelConfig, TPUSettings, TrainingConfig
from estimator_lib.data.records import read_tfrecords
from estimator_lib.export import saved_model
from estimator_lib.export.saved_model import ExportVerificationError, verify_export
from estimator_lib.model.inputs import resolve_files
from estimator_lib.schema import Schema

ROWS = 10  # verification rows: more than one predict batch of 8, the last one padded


@dataclasses.dataclass(frozen=True)
class Exported:
    job: JobConfig
    schema: Schema
    data: str
    model_dir: str
    result: saved_model.ExportResult


@pytest.fixture(scope="module")
def exported(tmp_path_factory) -> Exported:
    """A binary DNN reading "x 1" and "colour" only, trained 10 steps; its step-5 checkpoint exported."""
    root = str(tmp_path_factory.mktemp("saved_model"))
    schema = synthetic.make_schema("binary")
    train, _ = synthetic.write_dataset(os.path.join(root, "train"), synthetic.make_rows(48, 3), schema)
    data, _ = synthetic.write_dataset(os.path.join(root, "data"), synthetic.make_rows(ROWS, 4), schema)
    job = JobConfig(
        tpu=TPUSettings(iterations_per_loop=5),
        training=TrainingConfig(train_batch_size=16, predict_batch_size=8, train_steps=10, save_checkpoints_steps=5),
        model=ModelConfig(family="dnn", features=("x 1", "colour"), hidden_units=(4,), embedding_dim=2),
    )
    model_dir = os.path.join(root, "model")
    estimator.train(job, schema, train, model_dir)
    older = os.path.join(model_dir, "model.ckpt-5")
    result = saved_model.export_model(
        job,
        schema,
        model_dir,
        os.path.join(root, "export"),
        checkpoint_path=older,
        verify_rows=data,
        data_profile={"rows": 48},
    )
    return Exported(job, schema, data, model_dir, result)


def sample(exported, n=3):
    return list(read_tfrecords(resolve_files(exported.data)))[:n]


# -- the export and its record -------------------------------------------------------------------------------
def test_the_chosen_checkpoint_and_feature_selection_are_recorded(exported):
    metadata = exported.result.metadata
    assert metadata["checkpoint"] == os.path.join(exported.model_dir, "model.ckpt-5")
    assert metadata["global_step"] == 5  # not the newest checkpoint (10)
    assert metadata["serving"] == {
        "examples_input": "examples",
        "raw_receiver": "raw",
        "raw_inputs": {"f_x_1": "float32", "f_colour": "string"},
    }
    assert metadata["data_profile"] == {"rows": 48}
    assert Schema.from_dict(metadata["schema"]) == exported.schema  # the whole dataset schema
    assert JobConfig.from_dict(metadata["job"]) == exported.job
    assert metadata["verification"]["rows_checked"] == ROWS and metadata["export_dir"] == exported.result.export_dir
    for tags in ("serve", "serve,tpu"):
        raw_inputs = exported.result.signatures[tags]["raw:predict"]["inputs"]
        assert sorted(raw_inputs) == ["f_colour", "f_x_1"]  # only the model's features
    assert saved_model.read_export_metadata(exported.result.export_dir) == metadata


def test_read_export_metadata_of_another_directory(tmp_path):
    with pytest.raises(FileNotFoundError) as e:
        saved_model.read_export_metadata(str(tmp_path))
    assert str(e.value) == (
        f"{str(tmp_path)!r} has no assets.extra/export_metadata.json; it was not exported by export_model"
    )


def test_a_taken_version_is_bumped(tmp_path):
    base = str(tmp_path)
    assert saved_model._free_version(base, "1700000000") == "1700000000"
    for taken in ("1700000000", "1700000001"):
        os.makedirs(os.path.join(base, taken))
        open(os.path.join(base, taken, "saved_model.pb"), "wb").close()
    os.makedirs(os.path.join(base, "1700000002"))  # an empty directory holds no export
    assert saved_model._free_version(base, "1700000000") == "1700000002"


# -- serving from the export ---------------------------------------------------------------------------------
def test_load_serving_model_gives_the_cpu_graph_outputs(exported):
    records = sample(exported)
    model = saved_model.load_serving_model(exported.result.export_dir)
    try:
        got = {k: v.numpy() for k, v in model.signature(examples=tf.constant(records)).items()}
    finally:
        model.close()
    assert os.path.isdir(exported.result.export_dir)  # closing a local export deletes nothing
    want = saved_model.run_cpu_graph(exported.result.export_dir, "predict", {"examples": np.array(records, object)})
    assert sorted(got) == ["class_ids", "logits", "probabilities"]
    for key in got:
        np.testing.assert_allclose(got[key], want[key], atol=1e-6)
    assert got["probabilities"].shape == (3, 2)


def test_load_serving_model_names_a_missing_signature(exported):
    with pytest.raises(ExportVerificationError) as e:
        saved_model.load_serving_model(exported.result.export_dir, signature="nope")
    assert f"{exported.result.export_dir!r} has no signature 'nope'; it has [" in str(e.value)
    assert "'raw:predict'" in str(e.value)


def test_serving_from_cloud_storage_uses_and_removes_a_local_copy(exported, tmp_path, gcs_prefix):
    staging = str(tmp_path / "staging")
    shutil.copytree(exported.result.export_dir, staging)
    remote = f"{gcs_prefix}/export/1"
    storage.commit_directory(staging, remote)
    model = saved_model.load_serving_model(remote)
    assert model.export_dir == remote and os.path.isdir(model.local_dir)
    out = model.signature(examples=tf.constant(sample(exported, 1)))
    assert out["class_ids"].shape == (1,)
    model.close()
    assert not os.path.exists(model.local_dir)


def test_an_uncommitted_cloud_export_is_refused(gcs_prefix):
    storage.write_text(f"{gcs_prefix}/half/saved_model.pb", "")
    with pytest.raises(FileNotFoundError, match="is not a committed export \\(no commit marker\\); export it again"):
        verify_export(f"{gcs_prefix}/half")


# -- verification checks -------------------------------------------------------------------------------------
def test_structure_report_without_a_sample(exported):
    report = verify_export(exported.result.export_dir)
    assert report["tag_sets"] == [["serve"], ["serve", "tpu"]] and report["rows_checked"] == 0
    assert report["tpu_partitioned_call"] is True and "max_abs_diff" not in report


def test_a_sample_needs_schema_and_expected_outputs(exported):
    with pytest.raises(ValueError, match="a sample needs both schema= and expected= outputs to compare"):
        verify_export(exported.result.export_dir, schema=exported.schema, sample=sample(exported))


def test_not_a_saved_model(tmp_path):
    with pytest.raises(ExportVerificationError, match="is not a SavedModel: .* holds no saved_model.pb"):
        verify_export(str(tmp_path))


def test_a_tpu_call_in_the_cpu_graph_is_refused(exported, tmp_path):
    def put_tpu_call_in_cpu_graph(proto):
        serve = next(m for m in proto.meta_graphs if list(m.meta_info_def.tags) == ["serve"])
        serve.graph_def.node[0].op = "TPUPartitionedCall"

    with pytest.raises(ExportVerificationError) as e:
        verify_export(damaged_copy(exported.result.export_dir, str(tmp_path), put_tpu_call_in_cpu_graph))
    assert str(e.value) == "the 'serve' (CPU) meta graph holds a TPUPartitionedCall; it cannot run on CPU"


def test_a_missing_signature_is_named(exported, tmp_path):
    def drop_signatures(proto):
        for meta_graph in proto.meta_graphs:
            del meta_graph.signature_def["raw:predict"]
            del meta_graph.signature_def["classification"]

    copy = damaged_copy(exported.result.export_dir, str(tmp_path), drop_signatures)
    with pytest.raises(ExportVerificationError) as e:
        verify_export(copy)  # without a schema the task's signature is not required
    assert str(e.value).startswith("the 'serve' meta graph lacks signature(s) ['raw:predict']; it has [")
    with pytest.raises(ExportVerificationError, match=r"lacks signature\(s\) \['classification', 'raw:predict'\]"):
        verify_export(copy, schema=exported.schema)


def expected_outputs(exported, records):
    return saved_model.run_cpu_graph(exported.result.export_dir, "predict", {"examples": np.array(records, object)})


def test_integer_outputs_must_match_exactly_and_shapes_and_names_too(exported):
    records = sample(exported)
    model_schema = exported.schema.select(exported.job.model.features)
    good = expected_outputs(exported, records)
    expected = {"class_ids": good["class_ids"], "probabilities": good["probabilities"]}
    report = verify_export(exported.result.export_dir, schema=model_schema, sample=records, expected=expected)
    assert report["rows_checked"] == 3 and sorted(report["max_abs_diff"]) == ["predict", "raw:predict"]

    flipped = dict(expected, class_ids=1 - expected["class_ids"])
    with pytest.raises(
        ExportVerificationError, match=r"output 'class_ids' differs from the estimator by 1 \(allowed 0\)"
    ):
        verify_export(exported.result.export_dir, schema=model_schema, sample=records, expected=flipped)
    short = dict(expected, probabilities=expected["probabilities"][:2])
    with pytest.raises(
        ExportVerificationError,
        match=r"signature 'predict' output 'probabilities' has shape \(3, 2\), the estimator \(2, 2\)",
    ):
        verify_export(exported.result.export_dir, schema=model_schema, sample=records, expected=short)
    renamed = dict(expected, scores=expected["probabilities"])
    with pytest.raises(ExportVerificationError, match=r"signature 'predict' has no output 'scores'; it has \["):
        verify_export(exported.result.export_dir, schema=model_schema, sample=records, expected=renamed)


def test_nan_outputs_fail_verification(exported):
    records = sample(exported)
    model_schema = exported.schema.select(exported.job.model.features)
    good = expected_outputs(exported, records)
    probabilities = good["probabilities"].copy()
    probabilities[0] = np.nan  # the estimator's row 0 is NaN, the SavedModel's is not
    with pytest.raises(ExportVerificationError, match="output 'probabilities' differs from the estimator"):
        verify_export(
            exported.result.export_dir,
            schema=model_schema,
            sample=records,
            expected={"class_ids": good["class_ids"], "probabilities": probabilities},
        )


def test_a_failed_cloud_load_leaves_no_local_copy(exported, tmp_path, gcs_prefix, monkeypatch):
    staging = str(tmp_path / "staging")
    shutil.copytree(exported.result.export_dir, staging)
    remote = f"{gcs_prefix}/export/2"
    storage.commit_directory(staging, remote)
    temp = tmp_path / "temp"
    temp.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(temp))  # where local_copy's mkdtemp puts the copy
    with pytest.raises(ExportVerificationError, match="has no signature 'nope'"):
        saved_model.load_serving_model(remote, signature="nope")
    assert os.listdir(temp) == []
