"""A preempted training stage, retried by its task's retry policy, ends with the variables of an uninterrupted run.

Prepare and train run under the real KFP local runner with the retry policy set on their tasks as the compiled
pipeline sets it (`RetryPolicy.apply`), and honoured as `pipelines.retry` honours it. The training stage's
processes are killed with SIGKILL once it has recorded a checkpoint (what a Spot VM's preemption does to them);
the retry continues from that checkpoint, and its final variables equal, byte for byte on CPU, those of the
same job trained without interruption.

Slow (two stage processes importing TensorFlow, and a reference training): `pytest -m "not slow"` skips it.
(No `from __future__ import annotations`: KFP reads the pipeline function's annotations as types.)
"""

import glob
import json
import os
import re
import signal
import threading
import time

import pytest
from kfp import dsl
from kfp import local as kfp_local
from kfp.dsl import Model

from components import build_stages
from estimator_lib.config.run import resolve_run
from pipelines import local
from pipelines.image import LOCAL_IMAGE
from pipelines.local.supervisor import _process_table
from pipelines.retry import RetryPolicy, honour_retry_policies
from pipelines.tpu import CPU_SETTINGS

pytestmark = pytest.mark.slow

BUDGET, KILL_AFTER = 500, 100  # steps; checkpoints every 100 (the default)
RETRY = RetryPolicy(retries=1)
_CHECKPOINT = re.compile(r'^model_checkpoint_path: "(?:.*/)?model\.ckpt-(\d+)"$', re.MULTILINE)


def prepare_and_train(policy: RetryPolicy):
    """The pipeline's prepare and train stages alone, each task with `policy`."""
    stages = build_stages(LOCAL_IMAGE)

    @dsl.pipeline(name="preempted-training")
    def pipeline(prepare_spec: str, train_spec: str, publish_root: str) -> Model:
        prepare = policy.apply(stages.prepare(spec=prepare_spec, data_version="v1", reference="none"))
        train = stages.train(
            dataset=prepare.outputs["dataset"],
            spec=train_spec,
            tpu=json.dumps(CPU_SETTINGS),
            warm_start="none",
            publish_root=publish_root,
            blessing_metrics="[]",
        )
        return policy.apply(train).outputs["model"]

    return pipeline


def recorded_step(model_dir: str) -> int:
    """The step of the checkpoint the model directory's `checkpoint` state file names (-1: none yet)."""
    try:
        with open(os.path.join(model_dir, "checkpoint"), encoding="utf-8") as f:
            found = _CHECKPOINT.search(f.read())
    except FileNotFoundError:
        return -1
    return int(found.group(1)) if found else -1


def descendants(pid: int) -> list[int]:
    table = _process_table()  # {pid: (parent, group)}
    found, frontier = [], [pid]
    while frontier:
        parent = frontier.pop()
        children = [p for p, (ppid, _) in table.items() if ppid == parent]
        found += children
        frontier += children
    return found


def preempt_training(root: str, killed: dict, timeout: float = 600) -> None:
    """Kills every process this test started once training recorded a checkpoint of step >= KILL_AFTER."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for model_dir in glob.glob(os.path.join(root, "*", "train-model", "model")):
            step = recorded_step(model_dir)
            if step >= KILL_AFTER:
                for pid in descendants(os.getpid()):
                    try:
                        os.kill(pid, signal.SIGKILL)
                    except ProcessLookupError:  # it exited on its own since the listing
                        pass
                killed.update(step=step, model_dir=model_dir)
                return
        time.sleep(0.05)


def test_training_killed_after_a_checkpoint_is_retried_and_ends_bitwise_as_an_uninterrupted_run(tmp_path, capfd):
    import tensorflow as tf

    from estimator_lib import estimator
    from estimator_lib.config import JobConfig
    from estimator_lib.data import prepare

    overrides = [f"training.train_steps={BUDGET}", "prepare.num_workers=1"]
    given = {"publish_root": str(tmp_path / "published"), "baseline": "none"}
    arguments = resolve_run(None, overrides, given, local.local_job_defaults()).arguments()
    root = str(tmp_path / "root")
    kfp_local.init(runner=kfp_local.SubprocessRunner(use_venv=False), pipeline_root=root, raise_on_error=True)
    pipeline, killed = prepare_and_train(RETRY), {}
    watcher = threading.Thread(target=preempt_training, args=(root, killed), daemon=True)
    watcher.start()
    with honour_retry_policies(pipeline):
        model = pipeline(
            prepare_spec=arguments["prepare_spec"],
            train_spec=arguments["train_spec"],
            publish_root=arguments["publish_root"],
        ).output
    watcher.join(timeout=1)
    assert KILL_AFTER <= killed.get("step", -1) < BUDGET, "training was not interrupted"
    assert model.uri == killed["model_dir"]
    printed = capfd.readouterr()
    assert "retry 1/1 of comp-train-model" in printed.out + printed.err
    restored = re.findall(r"Restoring parameters from \S*/model\.ckpt-(\d+)", printed.out + printed.err)
    assert restored and int(restored[0]) >= killed["step"]  # the retry continued from the checkpoint

    with open(os.path.join(model.uri, "job_config.json"), encoding="utf-8") as f:
        job = JobConfig.from_json(f.read()).with_overrides({"tpu.strict": False})
    [dataset] = glob.glob(os.path.join(root, "*", "prepare-data", "dataset"))
    reference = str(tmp_path / "uninterrupted")
    result = estimator.train_prepared(job, prepare.load_prepared(dataset), reference)
    assert result.trained_steps == model.metadata["trained_steps"]
    resumed, whole = tf.train.load_checkpoint(model.uri), tf.train.load_checkpoint(reference)
    names = sorted(whole.get_variable_to_shape_map())
    assert names == sorted(resumed.get_variable_to_shape_map()) and len(names) > 10
    for name in names:
        assert resumed.get_tensor(name).tobytes() == whole.get_tensor(name).tobytes(), name
