"""predict/serving_check.py: a tiny model's export served in a fresh process without the project's code agrees with
its batch predictions; a tampered export (a bias moved by 0.5 after batch prediction) fails naming the row,
signature and output; the comparison's messages; the child's isolation."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys

import numpy as np
import pytest
import repo
import synthetic
import tensorflow as tf
from saved_models import tampered
from user_examples import trained_example

from estimator_lib import estimator
from estimator_lib.config import JobConfig, ModelConfig, TPUSettings, TrainingConfig
from estimator_lib.engine import user
from estimator_lib.export import saved_model
from estimator_lib.predict import batch_predict, serving_check, serving_child
from estimator_lib.predict.serving_check import ServingCheckError, check_serving, compare_output

ROWS = 12  # predicted rows: more than one predict batch of 8
HPARAMS = {"filters": 4, "units": 8, "learning_rate": 0.01}


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    """A 3-class DNN trained 6 steps, exported, and its batch predictions of 12 rows: (export dir, predictions)."""
    root = str(tmp_path_factory.mktemp("serving_check"))
    schema = synthetic.make_schema("multiclass")
    train, _ = synthetic.write_dataset(os.path.join(root, "train"), synthetic.make_rows(32, 3, "multiclass"), schema)
    data, _ = synthetic.write_dataset(os.path.join(root, "data"), synthetic.make_rows(ROWS, 4, "multiclass"), schema)
    job = JobConfig(
        tpu=TPUSettings(iterations_per_loop=3),
        training=TrainingConfig(train_batch_size=16, predict_batch_size=8, train_steps=6, save_checkpoints_steps=6),
        model=ModelConfig(family="dnn", hidden_units=(4,), embedding_dim=2),
    )
    model_dir = os.path.join(root, "model")
    estimator.train(job, schema, train, model_dir)
    export = saved_model.export_model(job, schema, model_dir, os.path.join(root, "export"))
    predictions = os.path.join(root, "predictions")
    batch_predict(job, schema, model_dir, data, predictions, num_shards=2)
    return export.export_dir, predictions


def test_the_served_export_agrees_with_batch_prediction_on_both_signatures(served):
    export_dir, predictions = served
    record = check_serving(export_dir, predictions)
    assert record["rows_checked"] == ROWS and record["signatures"] == ["predict", "raw:predict"]
    assert (record["rtol"], record["atol"], record["tags"], record["skipped"]) == (1e-5, 1e-6, ["serve"], {})
    assert sorted(record["max_abs_diff"]["predict"]) == ["class_ids", "probabilities"]
    assert all(0 <= d <= 1e-6 for s in record["max_abs_diff"].values() for d in s.values())
    assert record["compared"].startswith("the first 12 predicted records of [")
    assert record["input_files"] == 2


def test_a_bias_changed_after_batch_prediction_fails_naming_the_row_signature_and_output(served, tmp_path):
    export_dir, predictions = served
    prefix = os.path.join(export_dir, "variables", "variables")
    [bias] = [n for n, _ in tf.train.list_variables(prefix) if n.endswith("logits/bias")]
    with pytest.raises(ServingCheckError) as e:
        check_serving(tampered(export_dir, str(tmp_path), bias, 0.5), predictions)
    assert re.fullmatch(
        r"serving check: row key 'row-0', record 0 of \S+part-00000\.tfrecord: signature 'predict' output "
        r"'probabilities' served \[.+\], batch prediction \[.+\]; difference \[.+\] \(allowed rtol 1e-05 \+ atol "
        r"1e-06\): the export does not serve the model that predicted; nothing is released",
        str(e.value),
    ), str(e.value)


def test_a_float_mismatch_names_the_row_both_values_and_the_difference():
    rows, sources = [{"key": "a"}, {"key": "b"}], [("eval-0.tfrecord", 0, b""), ("eval-0.tfrecord", 1, b"")]
    served = np.array([[0.25, 0.75], [0.5, 0.5]], np.float32)
    assert compare_output("predict", "probabilities", served, served.copy(), rows, sources) == 0.0
    with pytest.raises(ServingCheckError) as e:
        compare_output("predict", "probabilities", served, np.array([[0.25, 0.75], [0.5, 0.25]]), rows, sources)
    assert str(e.value) == (
        "serving check: row key 'b', record 1 of eval-0.tfrecord: signature 'predict' output 'probabilities' "
        "served [0.5, 0.5], batch prediction [0.5, 0.25]; difference [0.0, 0.25] (allowed rtol 1e-05 + atol 1e-06): "
        "the export does not serve the model that predicted; nothing is released"
    )


def test_float32_noise_passes_and_classes_must_be_equal():
    rows, sources = [{"index": 0}], [("x.tfrecord", 0, b"")]
    near = compare_output("raw:predict", "value", np.float32([[100.0005]]), np.float32([[100.0]]), rows, sources)
    assert 0 < near < 1e-3  # within rtol 1e-5 of 100
    with pytest.raises(ServingCheckError) as e:
        compare_output("predict", "class_ids", np.array([[2]]), np.array([[1]]), rows, sources)
    assert str(e.value) == (
        "serving check: row record 0 of x.tfrecord: signature 'predict' output 'class_ids' served 2, batch "
        "prediction 1; difference 1.0: the export does not serve the model that predicted; nothing is released"
    )
    with pytest.raises(ServingCheckError, match=r"output 'value' has 2 value\(s\) per row, the batch predictions 1"):
        compare_output("predict", "value", np.float32([[1, 2]]), np.float32([[1]]), rows, sources)


def test_strings_travel_exactly_through_the_request_files(tmp_path):
    path = str(tmp_path / "arrays.npz")
    strings = np.array([b"a\x00", b"", "é".encode()], dtype=object)
    serving_child.write_arrays(path, {"s": strings, "x": np.float32([[1.5], [2]])})
    back = serving_child.read_arrays(path)
    assert back["s"].tolist() == [b"a\x00", b"", "é".encode()]
    assert back["x"].dtype == np.float32 and back["x"].tolist() == [[1.5], [2.0]]


def test_the_child_runs_without_the_project_on_its_path(tmp_path):
    script = str(tmp_path / "probe.py")
    with open(serving_check.CHILD_SCRIPT, encoding="utf-8") as f:
        source = f.read()
    probe = "\n".join(
        [
            "sys.meta_path.insert(0, RefuseImports(sys.argv[1:]))",
            "try:",
            "    import estimator_lib",
            "except ModuleNotFoundError as e:",
            "    print('refused:', e, os.getcwd(), os.environ.get('PYTHONPATH'), sys.flags.isolated)",
        ]
    )
    with open(script, "w", encoding="utf-8") as f:
        f.write(source.replace('if __name__ == "__main__":\n    main(sys.argv[1:])', probe))
    done = subprocess.run(
        serving_check.child_command(script, *serving_check.PROJECT_PACKAGES),
        cwd=str(tmp_path),
        env={**serving_check.child_environment()},
        capture_output=True,
        text=True,
        check=True,
    )
    assert done.stdout == (
        f"refused: No module named 'estimator_lib' (the serving check runs without project code) {tmp_path} None 1\n"
    )


@pytest.fixture(scope="module")
def digits(tmp_path_factory):
    """examples/image_cnn trained 4 steps, its eval records predicted and the model exported."""
    job = JobConfig(
        tpu=TPUSettings(iterations_per_loop=4),
        training=TrainingConfig(train_batch_size=32, eval_batch_size=64, predict_batch_size=64, train_steps=4),
    )
    root = str(tmp_path_factory.mktemp("digits"))
    trained = trained_example("image_cnn", "digits_cnn.model:model_fn", "label", HPARAMS, job, root)
    predictions = os.path.join(root, "predictions")
    user.predict(job, trained.user, trained.records("eval.tfrecord"), trained.model_dir, predictions)
    export = user.export(job, trained.user, trained.model_dir, os.path.join(root, "export"))
    return export["export_dir"], predictions


def test_a_users_export_is_served_on_its_own_signatures(digits, tmp_path):
    export_dir, predictions = digits
    record = check_serving(export_dir, predictions)
    assert record["rows_checked"] == 64 and record["signatures"] == ["raw:serving_default", "serving_default"]
    assert record["skipped"] == {}
    for outputs in record["max_abs_diff"].values():
        assert sorted(outputs) == ["class_id", "probabilities"] and max(outputs.values()) <= 1e-5
    [bias] = [
        n
        for n, _ in tf.train.list_variables(os.path.join(export_dir, "variables", "variables"))
        if n.endswith("dense_1/bias")
    ]
    with pytest.raises(
        ServingCheckError,
        match=r"^serving check: row record 0 of \S+eval\.tfrecord: signature 'raw:serving_default' output "
        r"'probabilities' served \[",
    ):
        check_serving(tampered(export_dir, str(tmp_path), bias, 0.5), predictions)


def test_predictions_whose_inputs_are_gone_are_recorded_as_not_compared(served, tmp_path):
    export_dir, predictions = served
    copy = str(tmp_path / "predictions")
    shutil.copytree(predictions, copy)
    manifest = os.path.join(copy, "manifest.json")
    with open(manifest, encoding="utf-8") as f:
        recorded = json.load(f)
    recorded["inputs"] = [str(tmp_path / "scoring-tmp" / "part-0.tfrecord")]
    with open(manifest, "w", encoding="utf-8") as f:
        json.dump(recorded, f)
    record = check_serving(export_dir, copy)
    assert (record["rows_checked"], record["signatures"], record["max_abs_diff"]) == (0, [], {})
    assert record["compared"] == f"nothing: the predicted records {tmp_path}/scoring-tmp/part-0.tfrecord are gone"


FORKED_STAGE = """
import json, os, sys
from estimator_lib.predict import serving_check, serving_child  # TensorFlow imported, its runtime not started

calls = {name: serving_child.read_arrays(path) for name, path in json.loads(sys.argv[1]).items()}
serving_check.prestart()
waiting, folder = serving_check._waiting
pid = os.fork()
if pid == 0:  # the forked stage takes the prestarted child
    served = serving_check.run_child(sys.argv[2], calls)
    for name, outputs in served.items():
        serving_child.write_arrays(os.path.join(sys.argv[3], name + ".npz"), outputs)
    os._exit(0 if serving_check._waiting is None else 2)
assert os.waitpid(pid, 0)[1] == 0
assert waiting.wait(timeout=60) == 0 and not os.path.exists(folder)  # it served, and ended
"""


def _calls(export_dir, predictions):
    """The requests `check_serving` sends the child for these predictions."""
    manifest, rows = serving_check.first_rows(predictions, serving_check.SAMPLE_ROWS)
    sources = list(serving_check.input_records(manifest["inputs"], len(rows)))
    metadata = saved_model.read_export_metadata(export_dir)
    calls, _, _ = serving_check._plan(metadata, export_dir, rows, [s[2] for s in sources])
    return calls


def test_a_prestarted_child_serves_a_forked_stage(served, tmp_path):
    """As in a local run: the stage server (TensorFlow imported, never run) prestarts the child and a forked stage
    takes it; it serves what a child started for the request serves."""
    export_dir, predictions = served
    calls = _calls(export_dir, predictions)
    paths = {}
    for name, feeds in calls.items():
        paths[name] = str(tmp_path / f"in-{len(paths)}.npz")
        serving_child.write_arrays(paths[name], feeds)
    out = tmp_path / "out"
    out.mkdir()
    subprocess.run(
        [sys.executable, "-c", FORKED_STAGE, json.dumps(paths), export_dir, str(out)],
        check=True,
        timeout=300,
        cwd=repo.ROOT,
    )
    fresh = serving_check.run_child(export_dir, calls)
    assert sorted(fresh) == ["predict", "raw:predict"]
    for name, outputs in fresh.items():
        forked = serving_child.read_arrays(str(out / f"{name}.npz"))
        assert sorted(forked) == sorted(outputs)
        for key, value in outputs.items():
            np.testing.assert_array_equal(forked[key], value)


def test_a_prestarted_child_that_is_gone_is_replaced_by_a_fresh_one(served):
    export_dir, predictions = served
    serving_check.prestart()
    waiting, _ = serving_check._waiting
    waiting.kill()
    waiting.wait()
    assert check_serving(export_dir, predictions)["rows_checked"] == ROWS
    assert serving_check._waiting is None


def test_a_child_that_dies_before_its_status_fails_the_check_with_its_stderr(served, tmp_path):
    export_dir, _ = served
    script = str(tmp_path / "crash.py")
    with open(script, "w", encoding="utf-8") as f:
        f.write("import os, sys\nprint('about to abort', file=sys.stderr, flush=True)\nos.abort()\n")
    with pytest.raises(ServingCheckError, match=r"(?s)fresh serving process failed on .+about to abort"):
        serving_check.run_child(export_dir, {"predict": {}}, script=script)
