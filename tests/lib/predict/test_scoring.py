"""Scoring raw rows: `prepare.encode_for_scoring`, `predict.predict_raw` and the batch-predict component with a
raw CSV / JSON Lines URI. Tiny real files, real TensorFlow, one linear model trained once per module on rows
prepared normally (key column "id"), so raw-row predictions can be compared with prepared-row predictions.
"""

from __future__ import annotations

import csv
import glob
import json
import os
from typing import Any, Dict, List, Sequence

import numpy as np
import pytest
import synthetic
from kfp.dsl import Dataset, Model

from components import adapter
from components.batch_predict import batch_predict as batch_predict_component
from estimator_lib import estimator, storage
from estimator_lib.config import ConfigError, JobConfig, ModelConfig, RunConfig, TPUSettings, TrainingConfig, run
from estimator_lib.config.stages import PredictSpec
from estimator_lib.data import records
from estimator_lib.data.prepare import DataError, PrepareConfig, encode_for_scoring, prepare
from estimator_lib.predict import batch_predict, predict_raw, read_predictions, sources

NOT_EVALUATED = ""  # the batch-predict component's eval predictions when none were recorded: not compared

FEATURES = ("x 1", "x-2", "colour")
N_PREPARED = 120
CPU = '{"use_tpu": false}'  # the placement the pipeline gives a CPU stage


def write_csv(path: str, rows: Sequence[Dict[str, Any]], columns: Sequence[str]) -> str:
    with open(path, "w", newline="", encoding="utf-8") as f:
        writer = csv.writer(f)
        writer.writerow(columns)
        for row in rows:
            writer.writerow(["" if row.get(c) is None else row[c] for c in columns])
    return path


def make_rows(n: int, seed: int, first_id: int = 0) -> List[Dict[str, Any]]:
    rows = synthetic.make_rows(n, seed=seed, task="multiclass")
    return [dict(r, id=f"id-{first_id + i}") for i, r in enumerate(rows)]


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """Rows prepared with key column "id" and a linear model trained on the train split."""
    root = str(tmp_path_factory.mktemp("scoring"))
    rows = make_rows(N_PREPARED, seed=7)
    data = write_csv(os.path.join(root, "data.csv"), rows, ("id",) + FEATURES + ("target",))
    config = PrepareConfig(
        data=(data,), label="target", key_column="id", num_workers=1, num_shards=1, eval_fraction=0.25
    )
    prepared = prepare(config, os.path.join(root, "prepared"))
    job = JobConfig(
        tpu=TPUSettings(iterations_per_loop=10),
        training=TrainingConfig(train_batch_size=16, predict_batch_size=8, train_steps=30, save_checkpoints_steps=30),
        model=ModelConfig(family="linear"),
    )
    model_dir = os.path.join(root, "model")
    estimator.train(job, prepared.schema, prepared.files("train"), model_dir)
    return dict(root=root, rows=rows, prepared=prepared, schema=prepared.schema, job=job, model_dir=model_dir)


def raw_csv(trained, name: str, rows: Sequence[Dict[str, Any]], columns=("id",) + FEATURES) -> str:
    return write_csv(os.path.join(trained["root"], name), rows, columns)


def score(trained, data, out: str, **kwargs) -> List[Dict[str, Any]]:
    predict_raw(trained["job"], trained["schema"], trained["model_dir"], data, out, **kwargs)
    return read_predictions(out)


def keys_of_shards(pattern: str, schema) -> List[str]:
    return [records.decode_example(r, schema)["__key__"] for r in records.read_tfrecords(sorted(glob.glob(pattern)))]


# -- predict_raw ----------------------------------------------------------------------------------------------
def test_raw_rows_without_label_score_n_rows_in_input_order_like_prepared_rows(trained, tmp_path):
    # Every prepared row, shuffled, without the label, over two files: read in file order, then row order.
    order = np.random.RandomState(0).permutation(N_PREPARED).tolist()
    shuffled = [trained["rows"][i] for i in order]
    first = raw_csv(trained, "score-a.csv", shuffled[:50])
    second = raw_csv(trained, "score-b.csv", shuffled[50:])

    scored = score(trained, [first, second], str(tmp_path / "raw"), passthrough=["colour", "target"])

    assert [r["key"] for r in scored] == [r["id"] for r in shuffled]
    assert [r["colour"] for r in scored] == [r["colour"] for r in shuffled]
    assert all(r["target"] is None for r in scored)  # no label in the raw rows: null, not an error
    prepared = trained["prepared"]
    reference = batch_predict(
        trained["job"],
        trained["schema"],
        trained["model_dir"],
        [prepared.files(split) for split in ("train", "eval", "valid")],
        str(tmp_path / "prepared"),
    )
    expected = {r["key"]: r for r in read_predictions(reference.output_dir)}
    assert len(expected) == N_PREPARED
    classes = trained["schema"].label.classes
    got = np.array([[r["probabilities"][c] for c in classes] for r in scored])
    want = np.array([[expected[r["key"]]["probabilities"][c] for c in classes] for r in scored])
    np.testing.assert_allclose(got, want, atol=1e-6)
    assert [r["class"] for r in scored] == [expected[r["key"]]["class"] for r in scored]


def test_unknown_category_scores_as_out_of_vocabulary(trained, tmp_path):
    base = dict(make_rows(1, seed=21)[0])
    rows = [
        dict(base, id="purple", colour="purple"),
        dict(base, id="missing", colour=None),
        dict(base, id="red"),
    ]
    scored = score(trained, raw_csv(trained, "oov.csv", rows), str(tmp_path / "out"))

    assert [r["key"] for r in scored] == ["purple", "missing", "red"]
    # An unknown category and a missing one both take the out-of-vocabulary id: the same prediction.
    assert scored[0]["probabilities"] == scored[1]["probabilities"]
    assert scored[0]["probabilities"] != scored[2]["probabilities"]


def test_raw_manifest_records_inputs_counts_and_kept_encoded_rows(trained, tmp_path):
    rows = make_rows(9, seed=22, first_id=1000)
    data = raw_csv(trained, "extra.csv", rows, ("id", "note") + FEATURES)
    encoded = str(tmp_path / "encoded")

    result = predict_raw(
        trained["job"],
        trained["schema"],
        trained["model_dir"],
        data,
        str(tmp_path / "out"),
        staging_dir=encoded,
    )

    assert result.count == 9
    raw = result.manifest["raw"]
    assert raw["inputs"] == ["extra.csv"] and raw["extra_columns"] == ["note"] and raw["encoded"] == encoded
    assert raw["rows"] == {"total": 9, "written": 9, "bad": 0, "quarantined": 0, "labelled": 0}
    assert storage.is_committed(encoded)


def test_bad_row_fails_with_file_line_column_and_publishes_nothing(trained, tmp_path):
    rows = make_rows(5, seed=23)
    rows[2]["x 1"] = "abc"  # line 4: the header is line 1
    data = raw_csv(trained, "bad.csv", rows)
    out = str(tmp_path / "out")

    with pytest.raises(DataError) as error:
        score(trained, data, out)

    assert str(error.value) == (
        "bad.csv line 4, column 'x 1': 'abc' is not a number (the column is numeric) (fix the row, or set "
        "bad_rows='quarantine' to set bad rows aside)"
    )
    assert not os.path.exists(out)


# -- encode_for_scoring (no model) ----------------------------------------------------------------------------
def test_bad_rows_are_quarantined_and_the_rest_keep_their_order(trained, tmp_path):
    rows = make_rows(10, seed=24)
    rows[3]["x-2"] = "inf"  # line 5
    data = raw_csv(trained, "quarantine.csv", rows)

    result = encode_for_scoring(
        data,
        trained["schema"],
        str(tmp_path / "enc"),
        bad_rows="quarantine",
        max_bad_fraction=0.2,
        num_workers=1,
    )

    assert result.count == 9
    assert keys_of_shards(result.files, trained["schema"]) == [r["id"] for i, r in enumerate(rows) if i != 3]
    with open(tmp_path / "enc" / "quarantine.jsonl", encoding="utf-8") as f:
        (bad,) = [json.loads(line) for line in f]
    assert (bad["file"], bad["line"], bad["column"], bad["value"]) == ("quarantine.csv", 5, "x-2", "inf")
    assert result.manifest["rows"]["quarantined"] == 1


def test_too_many_bad_rows_fail_even_with_quarantine(trained, tmp_path):
    rows = make_rows(4, seed=25)
    rows[0]["x 1"] = rows[1]["x 1"] = "?"
    with pytest.raises(DataError, match=r"2 of 4 rows are bad so far, more than max_bad_fraction=0.25"):
        encode_for_scoring(
            raw_csv(trained, "many.csv", rows),
            trained["schema"],
            str(tmp_path / "enc"),
            bad_rows="quarantine",
            max_bad_fraction=0.25,
            num_workers=1,
        )


def test_missing_feature_column_is_an_error_naming_it(trained, tmp_path):
    rows = make_rows(3, seed=26)
    data = raw_csv(trained, "no-colour.csv", rows, ("id", "x 1", "x-2"))
    with pytest.raises(DataError) as error:
        encode_for_scoring(data, trained["schema"], str(tmp_path / "enc"), num_workers=1)
    assert str(error.value) == (
        "no-colour.csv line 1: column(s) ['colour'] are missing: scoring needs every feature column of the "
        "schema and the key column 'id' (values may be missing: empty or NA; the label and other columns are "
        "optional); the header has ['id', 'x 1', 'x-2']"
    )
    jsonl = tmp_path / "rows.jsonl"
    jsonl.write_text('{"id": "a", "x 1": 1.0, "colour": "red"}\n', encoding="utf-8")
    with pytest.raises(DataError, match=r"column\(s\) \['x-2'\] are missing: .* no row has them"):
        encode_for_scoring(str(jsonl), trained["schema"], str(tmp_path / "enc"), num_workers=1)


def test_label_is_written_when_present_and_valid_and_left_out_otherwise(trained, tmp_path):
    rows = make_rows(3, seed=27)
    rows[0]["target"], rows[1]["target"], rows[2]["target"] = "high", "unheard-of", None
    jsonl = tmp_path / "labelled.jsonl"
    jsonl.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")

    result = encode_for_scoring(str(jsonl), trained["schema"], str(tmp_path / "enc"), num_workers=1)

    decoded = [records.decode_example(r, trained["schema"]) for r in records.read_tfrecords(glob.glob(result.files))]
    assert [d.get("target") for d in decoded] == ["high", None, None]
    assert result.manifest["rows"]["labelled"] == 1 and result.extra_columns == []


def test_content_keys_are_the_ones_prepare_gives_the_same_rows(tmp_path):
    rows = synthetic.make_rows(40, seed=28, task="binary")
    rows.append(dict(rows[0]))  # an identical row: occurrence 1
    data = write_csv(str(tmp_path / "plain.csv"), rows, FEATURES + ("target",))
    prepared = prepare(
        PrepareConfig(data=(data,), label="target", num_workers=1, num_shards=1), str(tmp_path / "prepared")
    )
    prepared_keys = [
        k for split in ("train", "eval", "valid") for k in keys_of_shards(prepared.files(split), prepared.schema)
    ]

    result = encode_for_scoring(data, prepared.schema, str(tmp_path / "enc"), num_shards=3, num_workers=2)

    keys = keys_of_shards(result.files, prepared.schema)
    assert len(keys) == 41 and sorted(keys) == sorted(prepared_keys)
    assert keys[0] == keys[40][:-1] + "0" and keys[40].endswith("-1")
    assert [s["records"] for s in map(result.manifest["outputs"].get, result.manifest["files"])] == [
        14,
        14,
        13,
    ]


def test_scoring_settings_are_checked(trained, tmp_path):
    with pytest.raises(ConfigError, match=r"key_column='other' differs from the schema's key column 'id'"):
        encode_for_scoring("x.csv", trained["schema"], str(tmp_path / "enc"), key_column="other")
    with pytest.raises(ConfigError, match=r"bad_rows='skip' must be 'fail' or 'quarantine'"):
        encode_for_scoring("x.csv", trained["schema"], str(tmp_path / "enc"), bad_rows="skip")
    with pytest.raises(ValueError, match=r"passthrough column 'note' is not in the schema"):
        predict_raw(trained["job"], trained["schema"], trained["model_dir"], "x.csv", "out", passthrough=["note"])


# -- the component and the pipeline parameter -----------------------------------------------------------------
def component_artifacts(trained, tmp_path):
    adapter.write_job_config(trained["model_dir"], trained["job"])
    dataset = Dataset(name="dataset", uri=trained["prepared"].output_dir, metadata={})
    model = Model(name="model", uri=trained["model_dir"], metadata={})
    return dataset, model, Dataset(name="predictions", uri=str(tmp_path / "predictions"), metadata={})


def test_component_scores_a_raw_csv_glob_through_the_prepared_schema(trained, tmp_path):
    rows = make_rows(11, seed=29, first_id=2000)
    raw_csv(trained, "new-1.csv", rows[:6])
    raw_csv(trained, "new-2.csv", rows[6:])
    dataset, model, predictions = component_artifacts(trained, tmp_path)

    batch_predict_component(
        dataset=dataset,
        model=model,
        spec=PredictSpec(os.path.join(trained["root"], "new-*.csv")).to_json(indent=None),
        tpu=CPU,
        eval_predictions=NOT_EVALUATED,
        predictions=predictions,
    )

    assert predictions.metadata["count"] == 11
    assert [r["key"] for r in read_predictions(predictions.uri)] == [r["id"] for r in rows]
    rows_uri = predictions.metadata["scored_rows_uri"]
    assert rows_uri == predictions.uri + "-rows" and storage.is_committed(rows_uri)
    assert predictions.metadata["manifest"]["raw"]["inputs"] == ["new-1.csv", "new-2.csv"]


def test_component_still_scores_prepared_tfrecords_by_file_and_directory(trained, tmp_path):
    dataset, model, predictions = component_artifacts(trained, tmp_path)
    eval_dir = os.path.join(trained["prepared"].output_dir, "eval") + "/"
    spec = PredictSpec(eval_dir).to_json(indent=None)
    batch_predict_component(
        dataset=dataset, model=model, spec=spec, tpu=CPU, eval_predictions=NOT_EVALUATED, predictions=predictions
    )
    assert predictions.metadata["count"] == trained["prepared"].counts["eval"]
    assert predictions.metadata["scored_rows_uri"] == ""


@pytest.mark.parametrize(
    "data, kind",
    [
        ("eval", run.SPLIT),
        ("gs://b/new/*.csv", run.RAW),
        ("rows.JSONL", run.RAW),
        ("day.ndjson", run.RAW),
        ("gs://b/new/day.csv.GZ", run.RAW),
        ("rows.jsonl.gz", run.RAW),
        ("gs://b/p/part-*.tfrecord", run.TFRECORD),
        ("gs://b/p/", run.DIRECTORY),
        ("gs://b/p", run.DIRECTORY),
    ],
)
def test_prediction_kind_by_extension(data, kind):
    assert run.prediction_kind(data) == kind


def test_unknown_prediction_extension_is_refused_with_the_accepted_ones():
    with pytest.raises(ConfigError) as error:
        RunConfig(publish_root="/tmp/p", predict_data="gs://b/rows.parquet")
    assert str(error.value) == (
        "--predict-data: predict_data='gs://b/rows.parquet': cannot tell what '.parquet' files hold; use a "
        "prepared split ('train', 'eval', 'test', 'valid'), CSV / JSON Lines rows (.csv, .jsonl, .json, .ndjson), or "
        "prepared TFRecords (.tfrecord, .tfrecords, .tf_record, .tfrec, or a directory of them); rename the files to "
        "match their format"
    )


def test_component_reads_new_rows_with_the_preparations_rules(trained, tmp_path):
    assert sources.scoring_options(trained["prepared"]) == {
        "missing_values": ("", "NA", "N/A", "null", "None"),
        "bad_rows": "fail",
        "max_bad_fraction": 0.01,
    }
    rows = make_rows(3, seed=30)
    rows[1]["x-2"] = "n/a?"
    data = raw_csv(trained, "component-bad.csv", rows)
    dataset, model, predictions = component_artifacts(trained, tmp_path)
    with pytest.raises(DataError, match=r"^component-bad.csv line 3, column 'x-2': 'n/a\?' is not a number"):
        spec = PredictSpec(data).to_json(indent=None)
        batch_predict_component(
            dataset=dataset, model=model, spec=spec, tpu=CPU, eval_predictions=NOT_EVALUATED, predictions=predictions
        )
    assert not os.path.exists(predictions.uri)


# -- TFRecords made elsewhere -----------------------------------------------------------------------------------------
def test_tfrecords_prepared_with_another_schema_are_refused_naming_the_features(trained, tmp_path):
    rows = [{k: v for k, v in r.items() if k not in ("x 1", "colour")} for r in make_rows(40, seed=3)]
    rows = [dict(r, other=1.5) for r in rows]
    columns = ("id", "other") + tuple(c for c in FEATURES if c not in ("x 1", "colour")) + ("target",)
    data = write_csv(str(tmp_path / "other.csv"), rows, columns)
    other = prepare(PrepareConfig(data=(data,), label="target", key_column="id", num_workers=1), str(tmp_path / "p"))
    with pytest.raises(DataError) as error:
        sources.prediction_source(other.files("eval"), trained["prepared"])
    message = str(error.value)
    assert (
        "these records were not prepared with this model's schema: feature(s) ['colour', 'x 1'] are absent" in message
    )
    assert "feature key(s) ['f_other'] are not in the schema" in message
    assert message.endswith(
        "Prepare them with the model's schema (PrepareConfig.schema_uri) or score the raw rows instead"
    )
    # The model's own eval split passes the same check.
    eval_files = os.path.join(trained["prepared"].output_dir, "eval", "*.tfrecord")
    assert sources.prediction_source(eval_files, trained["prepared"]).uri == eval_files


def test_a_truncated_tfrecord_to_score_is_named_before_scoring(trained, tmp_path):
    """The schema check reads the records first: a truncated file fails there, named, not as TensorFlow's bare
    DataLossError."""
    good = sorted(glob.glob(trained["prepared"].files("eval")))[0]
    with open(good, "rb") as f:
        data = f.read()
    bad = tmp_path / "part-cut.tfrecord"
    bad.write_bytes(data[: len(data) // 2])
    with pytest.raises(DataError, match=rf"^{bad}: corrupt or truncated TFRecord \(.*truncated record at \d+"):
        sources.prediction_source(str(bad), trained["prepared"])


def test_a_corrupt_tfrecord_fails_naming_the_file_and_offset(trained, tmp_path):
    good = sorted(glob.glob(trained["prepared"].files("eval")))[0]
    with open(good, "rb") as f:
        data = bytearray(f.read())
    data[len(data) // 2] ^= 0xFF  # flip a byte in the middle: a CRC check fails there
    bad = tmp_path / "part-bad.tfrecord"
    bad.write_bytes(bytes(data))
    with pytest.raises(
        DataError, match=rf"^{bad}: corrupt or truncated TFRecord \(.*corrupted record at \d+.*\); re-create"
    ):
        batch_predict(trained["job"], trained["schema"], trained["model_dir"], str(bad), str(tmp_path / "out"))
    assert not (tmp_path / "out").exists()
