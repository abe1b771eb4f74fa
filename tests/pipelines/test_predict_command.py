"""`tpu-pipeline predict`: new rows scored with a published model, without training, byte for byte as the
pipeline's batch prediction scores them (in-process and on Beam); its usage errors exit 2 naming the path or
column. The end-to-end tests share one `run-local --predict-data` run (slow)."""

from __future__ import annotations

import csv
import dataclasses
import json
import os
import subprocess
import sys
import time

import pytest

from estimator_lib import release, storage
from estimator_lib.config import JobConfig
from estimator_lib.config.beam import BeamConfig
from estimator_lib.data.embedded import default_dataset
from pipelines import cli
from pipelines.cli.commands import main

TPU_PIPELINE = os.path.join(os.path.dirname(sys.executable), "tpu-pipeline")
SHARD = "predictions-00000-of-00001.jsonl"
SCHEMA = {
    "features": [
        {
            "key": "f_x",
            "kind": "numeric",
            "name": "x",
            "value_type": "float",
            "vocabulary": [],
            "num_oov_buckets": 1,
            "mean": 0.0,
            "std": 1.0,
            "min": 0.0,
            "max": 1.0,
            "missing_count": 0,
        }
    ],
    "key_column": None,
    "label": {"name": "y", "task": "regression", "classes": [], "mean": 0.0, "std": 1.0, "min": 0.0, "max": 1.0},
}


def new_rows(path: str, count: int = 25, missing: str = "NA") -> str:
    """`count` penguins without their species, every 13th row of the embedded data: rows to score; the first
    row's bill length is `missing`."""
    with open(default_dataset().path, newline="", encoding="utf-8") as f:
        rows = list(csv.DictReader(f))[::13][:count]
    rows[0]["bill_length_mm"] = missing
    with open(path, "w", newline="", encoding="utf-8") as f:
        writer = csv.DictWriter(f, [c for c in rows[0] if c != "species"], extrasaction="ignore")
        writer.writeheader()
        writer.writerows(rows)
    return path


def published_root(tmp_path, metadata: dict) -> release.PublishedModel:
    """A publish root holding one version shaped like an export (publishing copies bytes; it parses nothing)."""
    export = tmp_path / "export"
    os.makedirs(export / "assets.extra")
    (export / "saved_model.pb").write_bytes(b"graph")
    (export / "assets.extra" / "export_metadata.json").write_text(json.dumps(metadata))
    return release.publish_model(str(export), str(tmp_path / "published"))


def error_line(capsys, *args: str) -> str:
    assert main(["predict", *args]) == 2
    return capsys.readouterr().err.strip()


# -- usage errors: one line naming the path or column, exit 2 --------------------------------------------------
def test_a_root_without_latest_or_an_unknown_version_is_named(tmp_path, capsys):
    rows = new_rows(str(tmp_path / "rows.csv"))
    out = str(tmp_path / "out")
    assert error_line(capsys, "--model", str(tmp_path), "--data", rows, "--output", out) == (
        f"tpu-pipeline predict: error: --model {tmp_path}: {tmp_path}/LATEST does not exist and it is no version "
        "folder (ROOT/versions/VERSION): nothing is published there; give a publish root (run-local --output DIR "
        "publishes to DIR/published) or one of its versions"
    )
    model = published_root(tmp_path, {"schema": SCHEMA, "job": JobConfig().to_dict()})
    missing = os.path.join(model.root, "versions", "20200101T000000Z-0")
    assert error_line(capsys, "--model", missing, "--data", rows, "--output", out) == (
        f"tpu-pipeline predict: error: --model {missing}: no published version '20200101T000000Z-0' under "
        f"{model.root}/versions (newest: {model.version}); give one of its versions, or the publish root "
        f"{model.root} for its LATEST"
    )
    assert not os.path.exists(out)


def test_latest_a_version_and_root_slash_version_name_the_same_model(tmp_path):
    from estimator_lib.engine.published import published_version

    model = published_root(tmp_path, {})
    for given in (model.root, model.uri, os.path.join(model.root, model.version), model.root + "/"):
        assert published_version(given).uri == model.uri


def test_rows_missing_a_feature_column_are_refused_naming_it(tmp_path, capsys):
    model = published_root(tmp_path, {"schema": SCHEMA, "job": JobConfig().to_dict()})
    (tmp_path / "rows.csv").write_text("z,y\n1,2\n")
    assert error_line(capsys, "--model", model.root, "--data", str(tmp_path / "rows.csv"), "--output", "o") == (
        "tpu-pipeline predict: error: rows.csv line 1: column(s) ['x'] are missing: scoring needs every feature "
        "column of the schema (values may be missing: empty or NA; the label and other columns are optional); the "
        "header has ['z', 'y']"
    )


def test_a_non_empty_output_or_unknown_files_are_refused(tmp_path, capsys):
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "keep.txt").write_text("mine")
    given = ["--model", str(tmp_path), "--data", "rows.csv"]
    assert error_line(capsys, *given, "--output", str(tmp_path / "out")) == (
        f"tpu-pipeline predict: error: --output {tmp_path / 'out'} is not empty; give a new or empty folder "
        "(predict replaces nothing)"
    )
    assert error_line(capsys, "--model", str(tmp_path), "--data", "rows.txt", "--output", "o") == (
        "tpu-pipeline predict: error: --data rows.txt: give CSV / JSON Lines files (.csv, .jsonl, .json, .ndjson) "
        "or TFRecord files (.tfrecord), one kind at a time"
    )
    assert (tmp_path / "out" / "keep.txt").read_text() == "mine"


def test_a_user_models_export_without_its_feature_spec_says_so(tmp_path, capsys):
    model = published_root(tmp_path, {"model_fn": "my_model:model_fn"})
    rows = str(tmp_path / "rows.tfrecord")
    assert error_line(capsys, "--model", model.root, "--data", rows, "--output", str(tmp_path / "out")) == (
        f"tpu-pipeline predict: error: {model.uri}: its export_metadata.json records no 'feature_spec' (how its "
        "records are parsed); export it again"
    )


def test_a_user_models_code_that_is_not_importable_is_named(tmp_path, capsys):
    model = published_root(tmp_path, {"model_fn": "no_such_package.model:model_fn", "feature_spec": {}})
    rows = str(tmp_path / "rows.tfrecord")
    assert error_line(capsys, "--model", model.root, "--data", rows, "--output", str(tmp_path / "out")) == (
        f"tpu-pipeline predict: error: {model.uri}: model_fn (its run gave no --code: install the package that "
        "holds it) 'no_such_package.model:model_fn': module 'no_such_package.model' cannot be "
        "imported: No module named 'no_such_package'"
    )


# -- end to end: the published penguins model against the pipeline's own batch prediction ---------------------
@pytest.fixture(scope="module")
def pipeline_run(tmp_path_factory):
    """`run-local --predict-data ROWS`: the published model and the pipeline's predictions of ROWS with it. The run
    reads "?" as missing, as one of ROWS has it: `predict` must read the rows by the run's rules."""
    output = tmp_path_factory.mktemp("run")
    rows = new_rows(str(output / "new.csv"), missing="?")
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2")
    command = [TPU_PIPELINE, "run-local", "--output", str(output / "out"), "--predict-data", rows]
    command += ["--set", 'prepare.missing_values=["", "NA", "?"]']
    proc = subprocess.run(command, capture_output=True, text=True, env=env, timeout=900, check=False)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    with open(output / "out" / "summary.json", encoding="utf-8") as f:
        return rows, json.load(f)


@pytest.mark.slow
@pytest.mark.determinism
def test_predict_scores_new_rows_byte_for_byte_as_the_pipeline(pipeline_run, tmp_path):
    rows, summary = pipeline_run
    out = str(tmp_path / "predictions")
    command = [TPU_PIPELINE, "predict", "--model", summary["config"]["publish_root"], "--data", rows, "--output", out]
    start = time.monotonic()
    proc = subprocess.run(command, capture_output=True, text=True, timeout=300, check=False)
    elapsed = time.monotonic() - start
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "deprecated" not in proc.stderr and "WARNING:tensorflow" not in proc.stderr, proc.stderr  # TF's own
    version = release.latest(summary["config"]["publish_root"])
    assert proc.stdout == (
        f"predicted 25 rows with version {version.version} of {version.root} into {out}\n"
        "skew: passed: 7 features of 25 scored rows and their predictions within their thresholds (predict.skew=warn; "
        f"{out}/skew.json)\n"
    ), f"{elapsed:.1f} s"
    # The rows were checked as the pipeline's stage checked them: the same verdict, beside the predictions.
    assert summary["predictions"]["skew"]["status"] == "passed"
    mine, theirs = (
        json.loads(storage.read_text(os.path.join(d, "skew.json"))) for d in (out, summary["predictions"]["uri"])
    )
    assert mine == theirs and mine["rows"]["scored"] == 25
    # the predictions against the eval rows' the version was blessed on, as its record carries them
    blessed = version.metadata["blessing"]["eval_predictions"]
    assert mine["predictions"]["rows"] == {"eval": blessed["rows"], "scored": 25}
    assert list(mine["predictions"]["shares"]) == blessed["bins"] == ["Adelie", "Chinstrap", "Gentoo"]
    pipeline = summary["predictions"]["uri"]
    with open(os.path.join(pipeline, SHARD), "rb") as a, open(os.path.join(out, SHARD), "rb") as b:
        assert a.read() == b.read()
    mine, theirs = (json.loads(storage.read_text(os.path.join(d, "manifest.json"))) for d in (out, pipeline))
    assert mine["shards"] == theirs["shards"] and mine["fields"] == theirs["fields"] == [
        "key",
        "file",
        "line",
        "class",
        "class_id",
        "probabilities",
    ]
    assert mine["source"] == {"kind": "saved_model", "export_dir": version.uri}
    assert (
        mine["raw"]["rows"]
        == theirs["raw"]["rows"]
        == {
            "bad": 0,
            "labelled": 0,
            "quarantined": 0,
            "total": 25,
            "written": 25,
        }
    )
    assert storage.is_committed(out)


@pytest.mark.slow
@pytest.mark.determinism
def test_predict_on_beam_gives_the_bytes_of_the_pipelines_beam_engine(pipeline_run, tmp_path):
    from estimator_lib import engine

    rows, summary = pipeline_run
    dataset, model_dir = os.path.dirname(summary["dataset"]["schema_uri"]), summary["model"]["uri"]
    job = JobConfig.from_json(storage.read_text(os.path.join(model_dir, "job_config.json")))
    pipeline = str(tmp_path / "pipeline")
    engine.open_dataset(dataset).predict(job, model_dir, rows, pipeline, engine="beam", beam=BeamConfig())
    out = str(tmp_path / "predict")
    given = ["predict", "--model", summary["config"]["publish_root"], "--data", rows, "--output", out]
    assert cli.main([*given, "--engine", "beam"]) == 0
    with open(os.path.join(pipeline, SHARD), "rb") as a, open(os.path.join(out, SHARD), "rb") as b:
        assert a.read() == b.read()


def skewed_rows(path: str) -> str:
    """25 penguins whose bill length is in centimetres (a changed unit) and whose island is one training never
    saw."""
    new_rows(path)
    with open(path, newline="", encoding="utf-8") as f:
        rows = list(csv.DictReader(f))
    for row in rows:
        if row["bill_length_mm"] not in ("", "NA"):
            row["bill_length_mm"] = str(round(float(row["bill_length_mm"]) / 10, 2))
        row["island"] = "Atlantis"
    with open(path, "w", newline="", encoding="utf-8") as f:
        writer = csv.DictWriter(f, list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    return path


@pytest.mark.slow
def test_skewed_rows_are_named_and_with_block_nothing_is_published(pipeline_run, tmp_path, capsys):
    _, summary = pipeline_run
    rows = skewed_rows(str(tmp_path / "skewed.csv"))
    model = summary["config"]["publish_root"]
    blocked = str(tmp_path / "blocked")
    line = error_line(capsys, "--model", model, "--data", rows, "--output", blocked, "--skew", "block")
    assert line.startswith("tpu-pipeline predict: error: skew check blocked: 2 of 7 features skewed: "), line
    assert "bill_length_mm" in line and "island" in line and "No prediction was published" in line
    assert not os.path.exists(blocked) or not os.listdir(blocked)
    warned = str(tmp_path / "warned")
    assert main(["predict", "--model", model, "--data", rows, "--output", warned]) == 0
    out = capsys.readouterr().out.splitlines()
    # bills a tenth as long: the model's predictions move too, to the class of the shortest bills
    head = "skew: warned: 2 of 7 features skewed; the predictions moved (predict.skew=warn; "
    assert out[1].startswith(head) and out[1].endswith(f"{warned}/skew.json)"), out
    assert {o.split(":")[0].strip(" `") for o in out[2:4]} == {"bill_length_mm", "island"}, out
    assert out[4].startswith("  predicted class ") and "% of the eval rows the model was blessed on" in out[4], out
    written = json.loads(storage.read_text(os.path.join(warned, "skew.json")))
    assert sorted(written["flagged"]) == ["bill_length_mm", "island"] and written["status"] == "warned"
    assert storage.is_committed(warned)
    # A threshold raised for the new island lets it through; off checks nothing and writes no skew.json.
    loose = str(tmp_path / "loose")
    limits = 'predict.features={"island": {"max_unseen_share": 1.0, "max_distance": 100}}'
    assert main(["predict", "--model", model, "--data", rows, "--output", loose, "--set", limits]) == 0
    assert "skew: warned: 1 of 7 features skewed" in capsys.readouterr().out
    off = str(tmp_path / "off")
    assert main(["predict", "--model", model, "--data", rows, "--output", off, "--skew", "off"]) == 0
    assert "skew:" not in capsys.readouterr().out and not os.path.exists(os.path.join(off, "skew.json"))


@pytest.mark.parametrize(
    "given, message",
    [
        (["--set", "model.l2=0.1"], "--set model.l2=0.1: predict takes only the skew check's thresholds (predict.*)"),
        (["--set", "predict.skew=off"], "predict takes only the skew check's thresholds (predict.*); give the mode"),
        (["--set", "predict.max_distanse=0.3"], "did you mean 'max_distance'?"),
        (["--set", "predict.max_distance=-1"], "predict.max_distance"),
    ],
)
def test_a_bad_skew_setting_is_named_before_anything_is_read(given, message, tmp_path, capsys):
    line = error_line(capsys, "--model", str(tmp_path), "--data", "rows.csv", "--output", str(tmp_path / "o"), *given)
    assert message in line, line


@pytest.mark.slow
def test_a_users_published_model_fn_scores_its_records_as_the_pipeline_in_process_and_on_beam(tmp_path, capsys):
    from user_examples import trained_example

    from estimator_lib.config import TPUSettings, TrainingConfig
    from estimator_lib.engine import user
    from estimator_lib.model.inputs import count_records
    from estimator_lib.model.user.profile import profile_records

    job = JobConfig(tpu=TPUSettings(iterations_per_loop=4), training=TrainingConfig(train_batch_size=32, train_steps=4))
    hparams = {"filters": 4, "units": 8, "learning_rate": 0.01}
    trained = trained_example("image_cnn", "digits_cnn.model:model_fn", "label", hparams, job, str(tmp_path))
    pipeline = str(tmp_path / "pipeline")
    user.predict(job, trained.user, trained.records("eval.tfrecord"), trained.model_dir, pipeline)
    model = dataclasses.replace(job.model, model_fn=trained.user.model_fn, code=trained.user.code_dir)
    exported = dataclasses.replace(job, model=model)  # the job records where the code is
    train = [trained.records("train.tfrecord")]
    profile = profile_records(train, trained.user.spec, count_records(train, ""))
    export = user.export(exported, trained.user, trained.model_dir, str(tmp_path / "export"), data_profile=profile)
    export = export["export_dir"]
    root = release.publish_model(export, str(tmp_path / "published")).root
    with open(os.path.join(pipeline, SHARD), "rb") as f:
        expected = f.read()
    for engine in ("inprocess", "beam"):
        out = str(tmp_path / f"predict-{engine}")
        given = ["--model", root, "--data", trained.records("eval.tfrecord"), "--output", out, "--engine", engine]
        assert main(["predict", *given]) == 0, engine
        with open(os.path.join(out, SHARD), "rb") as f:
            assert f.read() == expected, engine
        # The digits' spec holds one image tensor: nothing the check reads (tests/lib/engine/test_user_skew.py
        # checks a spec with scalars and sequences); the export carries the profile of its training records.
        assert "skew: skipped: none of the model's features is one the check reads" in capsys.readouterr().out
