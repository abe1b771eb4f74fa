"""Preflight of the built-in families (linear, dnn on the embedded penguins) and of both user model_fns of
examples/, for v2-8 and v3-8, each through its own train input: all fit and keep up. Wall times are printed
(`pytest -s`); docs/preflight.md has the figures."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import pytest
from repo import ROOT

from estimator_lib.config import JobConfig, PrepareConfig
from estimator_lib.config.feature_spec import FeatureSpec
from estimator_lib.config.job import ModelConfig
from estimator_lib.data.embedded import default_dataset
from estimator_lib.data.prepare import prepare
from estimator_lib.engine.user import UserModel
from estimator_lib.model import inputs
from estimator_lib.model.model_fn import build_model_fn
from estimator_lib.model.user import inputs as user_inputs
from estimator_lib.preflight import FITS, run_preflight

TPUS = ("TPU_V2", "TPU_V3")
EXAMPLES = {
    "image_cnn": ("digits_cnn.model:model_fn", "label"),
    "text_classifier": ("token_transformer.model:model_fn", "label_ids"),
}


@pytest.fixture(scope="module")
def penguins(tmp_path_factory):
    data = default_dataset()
    config = PrepareConfig(data=(data.path,), label=data.label, task=data.task, num_workers=1)
    return prepare(config, str(tmp_path_factory.mktemp("penguins")))


def _preflight(name: str, accelerator: str, *args, **kwargs):
    started = time.perf_counter()
    # One compile, at the job's batch: what fits (tests/lib/preflight/test_run.py tests the search for the largest
    # batch; its next compile here would be at a predicted batch of thousands, slow to compile); the input's rate
    # over 1 s.
    found = run_preflight(*args, accelerator=accelerator, cores=8, input_seconds=1.0, max_compiles=1, **kwargs)
    print(f"\n{name} {accelerator}: {time.perf_counter() - started:.1f} s, {found.compiles} compiles")
    print(found.describe())
    return found


@pytest.mark.parametrize("family", ["linear", "dnn"])
@pytest.mark.parametrize("accelerator", TPUS)
def test_a_builtin_family_fits_and_its_input_keeps_up(penguins, family, accelerator):
    schema = penguins.schema
    job = JobConfig(model=ModelConfig(family=family)).for_data(penguins.counts["train"], len(schema.features))
    input_fn = inputs.train_input_fn_builder(penguins.files("train"), schema, 1, job.training.shuffle_buffer_size)
    found = _preflight(family, accelerator, job, schema, build_model_fn(schema, job), train_input_fn=input_fn)
    assert found.verdict == FITS and found.input.keeps_up
    assert found.largest_batch >= 8 and found.memory.parameters > 0 and found.memory.slots > 0
    assert found.train_steps == job.training.train_steps and found.run_seconds > 0


@pytest.fixture(scope="module")
def records(tmp_path_factory):
    """example -> the folder its make_records.py wrote (made once for both TPUs)."""
    made = {}

    def make(example: str) -> str:
        if example not in made:
            root = str(tmp_path_factory.mktemp(example))
            script = os.path.join(ROOT, "examples", example, "make_records.py")
            subprocess.run([sys.executable, script, root], check=True, capture_output=True)
            made[example] = root
        return made[example]

    return make


@pytest.mark.parametrize("example", sorted(EXAMPLES))
@pytest.mark.parametrize("accelerator", TPUS)
def test_a_user_example_fits_and_its_input_keeps_up(records, example, accelerator):
    model_fn_name, label = EXAMPLES[example]
    code, root = os.path.join(ROOT, "examples", example), records(example)
    spec = FeatureSpec.read(os.path.join(root, "feature_spec.json"), label=label)
    with open(os.path.join(code, "hparams.json"), encoding="utf-8") as f:
        user = UserModel(model_fn_name, spec, json.load(f), code_dir=code)
    wrapped = user.load()

    def model_fn(features, labels, mode, params, config):  # the hyperparameters in params, as the engine gives them
        return wrapped(features, labels, mode, {**user.params, **params}, config)

    input_fn = user_inputs.train_input_fn_builder(os.path.join(root, "train.tfrecord"), spec, 1, 1000)
    found = _preflight(example, accelerator, JobConfig(), None, model_fn, train_input_fn=input_fn)
    assert found.verdict == FITS and found.input.keeps_up and found.largest_batch >= 8
    assert found.top_buffers and found.flops > 0
