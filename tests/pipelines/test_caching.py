"""The compiled pipeline's caching, task by task: a task is cached only when its inputs name all it reads."""

from __future__ import annotations

import pytest
from compiled import STAGE_TASKS, compiled_spec

from pipelines.pipeline import CACHED

IMAGE = "us-central1-docker.pkg.dev/proj/repo/tpu-pipeline@sha256:" + "ab" * 32


@pytest.fixture(scope="module", params=[("--cpu",), ("--tpu", "v3-8")], ids=["cpu", "tpu"])
def spec(request, tmp_path_factory):
    return compiled_spec(str(tmp_path_factory.mktemp("compiled") / "pipeline.yaml"), "--image", IMAGE, *request.param)


def _from_resolve(task: dict, parameter: str, output: str) -> bool:
    source = task["inputs"]["parameters"][parameter]["taskOutputParameter"]
    return source == {"producerTask": "resolve-inputs", "outputParameterKey": output}


def test_each_task_is_cached_exactly_when_it_may_be(spec):
    tasks = spec["root"]["dag"]["tasks"]
    assert set(tasks) == set(STAGE_TASKS) | {"record-run-cost"}  # the run's cost record: never cached
    cached = {name for name, task in tasks.items() if task.get("cachingOptions", {}).get("enableCache")}
    assert cached == {"prepare-data", "train-model", "batch-predict", "export-model", "check-serving"}
    assert cached == {name for name, stage in STAGE_TASKS.items() if CACHED[stage]}


def test_the_cached_tasks_are_keyed_by_what_they_read(spec):
    tasks = spec["root"]["dag"]["tasks"]
    # Prepare's key holds the data's content token and the reference model, resolved when the run starts.
    assert _from_resolve(tasks["prepare-data"], "data_version", "data_version")
    assert _from_resolve(tasks["prepare-data"], "reference", "reference")
    # Train's key holds the resolved warm-start source (a version directory, immutable), never "latest".
    assert _from_resolve(tasks["train-model"], "warm_start", "warm_start")
    # ... and the metrics the blessing names (checked against the data's task first), not their thresholds.
    assert _from_resolve(tasks["train-model"], "blessing_metrics", "blessing_metrics")
    assert "evaluate_spec" not in tasks["train-model"]["inputs"]["parameters"]
    # Batch predict and export read only artifacts of this run's (possibly cached) prepare and train ...
    for name in ("batch-predict", "export-model"):
        inputs = tasks[name]["inputs"]
        assert set(inputs["artifacts"]) == {"dataset", "model"}
        assert "publish_root" not in inputs.get("parameters", {})
    # ... and batch predict what the model predicted for the eval rows: evaluate's returned value (evaluate runs
    # every time; a parameter keys the cache by its value, where its new artifacts would miss every time).
    given = tasks["batch-predict"]["inputs"]["parameters"]["eval_predictions"]["taskOutputParameter"]
    assert given == {"producerTask": "evaluate-model", "outputParameterKey": "Output"}
    # The serving check reads only the export and the predictions.
    assert set(tasks["check-serving"]["inputs"]["artifacts"]) == {"exported", "predictions"}
    assert "parameters" not in tasks["check-serving"]["inputs"]


def test_the_tasks_that_read_latest_or_publish_run_every_time(spec):
    tasks = spec["root"]["dag"]["tasks"]
    for name in ("resolve-inputs", "evaluate-model", "release-model"):
        assert "publish_root" in tasks[name]["inputs"]["parameters"]
        assert not tasks[name].get("cachingOptions", {}).get("enableCache")
    assert tasks["resolve-inputs"].get("dependentTasks") is None  # first: nothing runs before it
