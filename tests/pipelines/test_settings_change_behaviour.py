"""Three settings set through `--set` change what the stages do, not only what their specs say: the eval
fraction the split sizes, the hidden units the layer shapes, the step budget the steps trained. The settings are
resolved by the CLI, and each stage runs as its component function (the real library calls) on tiny data.
Slow (two preparations and two trainings, about a minute): `pytest -m "not slow"` skips it."""

from __future__ import annotations

import csv
import os

import pytest
import synthetic
import tensorflow as tf
from kfp.dsl import Dataset, Markdown, Model

from components.prepare import prepare_data
from components.train import train_model
from pipelines import cli, local

pytestmark = pytest.mark.slow
CPU = '{"use_tpu": false}'


def write_csv(path: str, n: int = 400) -> str:
    with open(path, "w", newline="", encoding="utf-8") as f:
        writer = csv.writer(f)
        writer.writerow(["x 1", "x-2", "colour", "label"])
        for row in synthetic.make_rows(n, 3, "binary"):
            writer.writerow([row[c] for c in ("x 1", "x-2", "colour", "target")])
    return path


def run(work, name: str, data: str, *overrides: str) -> tuple[Dataset, Model]:
    """The prepare and train stages of the run `--set overrides` resolves to, as their component functions."""
    argv = ["run-local", "--data", data, "--label", "label", "--set", "tpu.strict=false"]
    args = cli.build_parser().parse_args([*argv, *[a for o in overrides for a in ("--set", o)]])
    arguments = cli.resolve_settings(args, str(work / "published"), local.local_job_defaults()).arguments()
    task = work / name
    dataset = Dataset(name="dataset", uri=str(task / "prepare" / "dataset"), metadata={})
    validation = Markdown(name="validation", uri=str(task / "prepare" / "validation"), metadata={})
    prepare_data(arguments["prepare_spec"], "v1", "none", dataset, validation)
    model = Model(name="model", uri=str(task / "train" / "model"), metadata={})
    train_model(dataset, arguments["train_spec"], CPU, "none", str(work / "published"), "[]", model)
    return dataset, model


def hidden_widths(model: Model) -> list[int]:
    """The widths of the DNN's hidden layers (dnn/hidden_<i>/kernel) in the final checkpoint, in layer order."""
    shapes = dict(tf.train.list_variables(model.metadata["checkpoint"]))
    return [shapes[f"dnn/hidden_{i}/kernel"][1] for i in range(len(shapes)) if f"dnn/hidden_{i}/kernel" in shapes]


def test_eval_fraction_hidden_units_and_train_steps_change_the_run(tmp_path):
    data = write_csv(str(tmp_path / "rows.csv"))
    common = ("prepare.valid_fraction=0", "prepare.num_workers=1")
    dataset_a, model_a = run(tmp_path, "a", data, *common, "training.train_steps=5")
    dataset_b, model_b = run(
        tmp_path,
        "b",
        data,
        *common,
        "prepare.eval_fraction=0.4",
        "model.hidden_units=6,3",
        "training.train_steps=9",
    )
    counts_a, counts_b = dataset_a.metadata["counts"], dataset_b.metadata["counts"]
    # A row's split follows from a hash of its contents: about 20% and 40% of the 400 rows are held out.
    assert (counts_a["train"], counts_a["eval"], counts_b["train"], counts_b["eval"]) == (324, 76, 250, 150)
    assert (model_a.metadata["global_step"], model_b.metadata["global_step"]) == (5, 9)
    assert hidden_widths(model_a) == [64, 32] and hidden_widths(model_b) == [6, 3]
    assert os.path.exists(os.path.join(model_b.uri, "job_config.json"))
