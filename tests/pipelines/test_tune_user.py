"""`tpu-pipeline tune` on a user's own model_fn (examples/image_cnn on scikit-learn's digits): trials over its
`--hparams`, each trained through the engine's user stages and judged by its metric_fn on a validation split
carved from its train records, the winner by the user's metric in its direction; the same trial as a Vertex AI
trial runs it (`python -m pipelines.tune_trial`)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

import pytest
import repo
import tensorflow as tf

from estimator_lib.config import ConfigError
from estimator_lib.config.tuning import load_space
from pipelines import cli, tune, tune_trial
from pipelines.cli.settings import resolve_local_settings

CODE = os.path.join(repo.ROOT, "examples", "image_cnn")
SPACE = """
metric: accuracy
parameters:
  hparams.units: {type: int, min: 8, max: 32}
  hparams.filters: {type: categorical, values: [4, 8]}
"""
# A model_fn of the test's own with a metric the vocabulary does not name (lower is better).
ERROR_MODEL = """
import tensorflow as tf
from digits_cnn.model import model_fn as cnn_model_fn


def metric_fn(labels, logits):
    wrong = tf.cast(tf.not_equal(labels, tf.argmax(logits, axis=-1, output_type=tf.int32)), tf.float32)
    return {"error_rate": tf.compat.v1.metrics.mean(wrong)}


def model_fn(features, labels, mode, params):
    spec = cnn_model_fn(features, labels, mode, params)
    if mode != tf.estimator.ModeKeys.EVAL:
        return spec
    return spec._replace(eval_metrics=(metric_fn, spec.eval_metrics[1]))
"""


@pytest.fixture(scope="module")
def digits(tmp_path_factory):
    root = tmp_path_factory.mktemp("digits")
    subprocess.run([sys.executable, os.path.join(CODE, "make_records.py"), str(root)], check=True)
    shutil.copytree(os.path.join(CODE, "digits_cnn"), root / "code" / "digits_cnn")
    (root / "code" / "error_model.py").write_text(ERROR_MODEL, encoding="utf-8")
    return root


def resolver(digits, output, model_fn="digits_cnn.model:model_fn", code=CODE):
    args = cli.build_parser().parse_args(
        ["tune", "--space", "s.yaml", "--model-fn", model_fn, "--code", str(code), "--label", "label"]
        + ["--feature-spec", str(digits / "feature_spec.json"), "--hparams-file", os.path.join(CODE, "hparams.json")]
        + ["--data", str(digits / "train.tfrecord"), "--eval-data", str(digits / "eval.tfrecord")]
        + [
            "--set",
            "training.train_steps=30",
            "--set",
            "blessing.comparison_metric=accuracy",
            "--set",
            "tpu.strict=false",
        ]
    )
    given = list(args.overrides)

    def resolve(extra):
        args.overrides = [*given, *extra]
        return resolve_local_settings(args, str(output))

    return resolve


def kernel_shapes(trial_dir) -> tuple:
    shapes = dict(tf.train.list_variables(os.path.join(trial_dir, "model")))
    return tuple(shapes["cnn/conv2d/kernel"]), tuple(shapes["cnn/dense/kernel"])


def test_trials_tune_the_hparams_and_the_best_by_the_users_metric_wins(digits, tmp_path):
    work = tmp_path / "work"
    found = tune.search(load_space("s.yaml", SPACE), 3, resolver(digits, tmp_path), str(work), echo=lambda _: None)

    assert found.trials[0].default and found.trials[0].values == {"hparams.units": 32, "hparams.filters": "8"}
    for trial in found.trials:
        assert sorted(trial.metrics) == ["accuracy"] and (trial.global_step, trial.stopped) == (30, "budget")
        units, filters = trial.values["hparams.units"], int(trial.values["hparams.filters"])
        hparams = json.loads(trial.overrides[-1].partition("=")[2])
        assert hparams == {"filters": filters, "units": units, "learning_rate": 0.01}  # over the run's own
        assert kernel_shapes(work / f"trial-{trial.number:03d}") == ((3, 3, 1, filters), (16 * filters, units))
    best = max(found.trials, key=lambda t: (t.objective, -t.number))
    assert found.winner == best and found.record["direction"] == "higher"
    carved = json.loads((work / "validation" / "manifest.json").read_text())
    assert carved["counts"]["train"] + carved["counts"]["valid"] == 1500  # train records only: eval is unseen


def test_a_metric_of_the_users_own_is_optimised_in_the_direction_the_file_gives(digits, tmp_path):
    space = load_space(
        "s.yaml", "metric: error_rate\ndirection: minimize\nparameters:\n  hparams.units: {type: int, min: 4, max: 32}"
    )
    resolve = resolver(digits, tmp_path, "error_model:model_fn", digits / "code")
    found = tune.search(space, 2, resolve, str(tmp_path / "work"), echo=lambda _: None)
    assert [sorted(t.metrics) for t in found.trials] == [["error_rate"], ["error_rate"]]
    assert found.winner == min(found.trials, key=lambda t: (t.objective, t.number))
    assert found.record["direction"] == "lower"


def test_a_metric_the_metric_fn_does_not_report_fails_after_the_first_trial_naming_those_it_does(digits, tmp_path):
    space = load_space(
        "s.yaml", "metric: f1\ndirection: maximize\nparameters:\n  hparams.units: {type: int, min: 8, max: 32}"
    )
    with pytest.raises(ConfigError) as raised:
        tune.search(space, 3, resolver(digits, tmp_path), str(tmp_path / "work"), echo=lambda _: None)
    assert str(raised.value) == (
        "the search space's metric 'f1' is not among the trial's metrics (the task's, or your metric_fn's): "
        "['accuracy']; set the space file's metric to one of them"
    )
    assert os.listdir(tmp_path / "work" / "trial-000") and not os.path.exists(tmp_path / "work" / "trial-001")


def test_a_vertex_trial_of_a_user_model_trains_its_hparams_and_reports_the_metric_fns_metric(
    digits, tmp_path, monkeypatch
):
    from estimator_lib import engine

    settings = resolver(digits, tmp_path)([])
    given = settings.stage_specs().prepare
    engine.prepare(given, given.prepare, str(tmp_path / "prepared"), None, str(tmp_path / "report.md"))
    metric_file = tmp_path / "hypertune" / "output.metrics"
    monkeypatch.setenv("CLOUD_ML_HP_METRIC_FILE", str(metric_file))
    argv = ["--dataset", str(tmp_path / "prepared"), "--spec", settings.arguments()["train_spec"]]
    argv += ["--tpu", '{"use_tpu": false}', "--space", load_space("s.yaml", SPACE).to_json()]
    argv += ["--output", str(tmp_path / "trial"), "--hparams__units=12", "--hparams__filters=4"]
    assert tune_trial.main(argv) == 0

    assert kernel_shapes(tmp_path / "trial") == ((3, 3, 1, 4), (64, 12))
    [line] = [json.loads(text) for text in metric_file.read_text().splitlines()]
    assert line["global_step"] == "30" and 0.0 < float(line["accuracy"]) <= 1.0
    assert set(json.loads((tmp_path / "trial" / "validation" / "manifest.json").read_text())["splits"]) == {
        "train",
        "valid",
    }


@pytest.mark.slow
def test_the_winner_runs_the_whole_pipeline_with_its_hparams_evaluated_by_the_users_metric_fn(digits, tmp_path):
    space = load_space("s.yaml", SPACE)
    outcome = tune.tune(space, 2, resolver(digits, tmp_path), str(tmp_path), echo=lambda _: None)
    summary = outcome.run.summary.to_dict()
    assert summary["status"] == "ok", summary.get("error")
    hparams = summary["config"]["job_config"]["model"]["hparams"]
    winner = outcome.winner.values
    assert (hparams["units"], hparams["filters"]) == (winner["hparams.units"], int(winner["hparams.filters"]))
    assert sorted(summary["metrics"]) == ["accuracy"]  # on the eval split, by the user's metric_fn
    record = json.loads(open(os.path.join(outcome.run.folder.path, "tuning.json"), encoding="utf-8").read())
    assert record["winner"] == outcome.winner.number
