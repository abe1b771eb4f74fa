"""Runs the pipeline whole on this machine's CPU with the KFP local runner, and writes OUTPUT/summary.json.

`kfp.local.SubprocessRunner(use_venv=False)` runs every component as a subprocess of this Python (the project
is installed here), in the DAG's order; artifacts land under OUTPUT/pipeline-root/<pipeline>-<timestamp>/.
The local runner cannot run `dsl.If`, so gating lives in the components: evaluate writes the verdict and
export publishes only a blessed model (under OUTPUT/published by default).
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import re
import sys
import warnings
from collections.abc import Mapping
from typing import IO, Any

from kfp import local as kfp_local

from estimator_lib import storage
from estimator_lib.config import RunConfig
from pipelines.image import LOCAL_IMAGE
from pipelines.pipeline import build_pipeline

SUMMARY_FILE = "summary.json"
LOG_FILE = "pipeline.log"
# The local runner's own status lines ("00:22:55.606 - INFO - Task 'train-model' finished ..."); the stages'
# logs (TensorFlow's among them) are indented under them and go to the log file only.
_STATUS_LINE = re.compile(
    r"^\d\d:\d\d:\d\d\.\d{3} - (INFO|WARNING|ERROR|CRITICAL) - (Executing|Task|Pipeline)(?!.*outputs:$)"
)
PIPELINE_ROOT_DIR = "pipeline-root"
PUBLISH_DIR = "published"


def local_job_settings() -> dict[str, Any]:
    """What every local run fixes in the job config: CPU, with the TPU-strict checks on (they catch on CPU
    what a TPU would reject later)."""
    return {"tpu.use_tpu": False, "tpu.strict": True}


class _ConsoleFilter(io.TextIOBase):
    """A stdout stand-in: everything goes to the log file; the console gets the runner's status lines only
    (or everything, when verbose)."""

    def __init__(self, log: IO[str], console: IO[str], verbose: bool):
        self._log, self._console, self._verbose, self._pending = log, console, verbose, ""

    def writable(self) -> bool:
        return True

    def write(self, text: str) -> int:
        self._log.write(text)
        self._pending += text
        *lines, self._pending = self._pending.split("\n")
        for line in lines:
            if self._verbose or _STATUS_LINE.match(line):
                self._console.write(line + "\n")
        return len(text)

    def flush(self) -> None:
        self._log.flush()
        self._console.flush()


def run_pipeline(settings: RunConfig, output_dir: str, verbose: bool = False) -> dict[str, Any]:
    """Runs the pipeline with the KFP local runner; returns its outputs {name: artifact}.

    The stages' full logs go to OUTPUT/pipeline.log; the console shows one line per stage event.
    """
    pipeline_root = os.path.join(os.path.abspath(output_dir), PIPELINE_ROOT_DIR)
    os.makedirs(pipeline_root, exist_ok=True)
    log_path = os.path.join(os.path.abspath(output_dir), LOG_FILE)
    print(f"running the pipeline locally; full log: {log_path}", flush=True)
    try:
        with (
            open(log_path, "w", encoding="utf-8") as log,
            contextlib.redirect_stdout(_ConsoleFilter(log, sys.stdout, verbose)),
        ):
            kfp_local.init(
                runner=kfp_local.SubprocessRunner(use_venv=False),
                pipeline_root=pipeline_root,
                raise_on_error=True,
            )
            with warnings.catch_warnings():
                # The subprocess runner warns that our image name lacks "python": it never uses the image.
                warnings.filterwarnings("ignore", message=".*non-Python base image.*", category=RuntimeWarning)
                task = build_pipeline(LOCAL_IMAGE)(**settings.arguments())
    except RuntimeError as e:  # a stage failed: show its error, not only "Inner task failed"
        raise RuntimeError(f"{e}\n{failure_excerpt(log_path)}\nfull log: {log_path}") from e
    return dict(task.outputs)


def failure_excerpt(log_path: str, max_lines: int = 40) -> str:
    """The last Python traceback in the log (a failed stage's error), dedented; the log's tail without one."""
    with open(log_path, encoding="utf-8", errors="replace") as f:
        lines = f.read().splitlines()
    starts = [i for i, line in enumerate(lines) if line.strip() == "Traceback (most recent call last):"]
    excerpt = lines[starts[-1] :] if starts else lines[-max_lines:]
    excerpt = [line for line in excerpt if line.strip()][-max_lines:]
    return "\n".join(line.removeprefix("    ") for line in excerpt)


def _number(value: Any) -> Any:
    """Metadata ints come back from the local runner as floats; give whole numbers back as ints."""
    return int(value) if isinstance(value, float) and value.is_integer() else value


def summarize(outputs: Mapping[str, Any], settings: RunConfig) -> dict[str, Any]:
    """The run's summary: eval metrics, verdict, artifact URIs, predictions, export, fingerprints, config."""
    dataset, model, exported = outputs["dataset"], outputs["model"], outputs["exported"]
    blessing, predictions = outputs["blessing"], outputs["predictions"]
    metrics = {k: float(v) for k, v in outputs["metrics"].metadata.items() if k != "blessed"}
    counts = {k: _number(v) for k, v in dataset.metadata["counts"].items()}
    return {
        "metrics": metrics,
        "blessed": bool(blessing.metadata["blessed"]),
        "blessing": {
            "summary": blessing.metadata["summary"],
            "reasons": list(blessing.metadata["reasons"]),
            "candidate_metrics": dict(blessing.metadata["candidate_metrics"]),
            "baseline_metrics": dict(blessing.metadata["baseline_metrics"]),
            "baseline_uri": blessing.metadata["baseline_uri"],
        },
        "artifacts": {
            "prepare": dataset.uri,
            "train": model.uri,
            # blessing.json and both models' eval predictions; metrics live in metadata
            "evaluate": blessing.uri,
            "batch_predict": predictions.uri,
            "export": exported.uri,
        },
        "dataset": {
            "counts": counts,
            "schema_uri": dataset.metadata["schema_uri"],
            "task": dataset.metadata["task"],
        },
        "model": {"uri": model.uri, "global_step": _number(model.metadata["global_step"])},
        "predictions": {
            "uri": predictions.uri,
            "count": _number(predictions.metadata["count"]),
            "data": settings.predict_data,
            "shards": list(predictions.metadata["shards"]),
        },
        "export": {
            "uri": exported.metadata["export_dir"],
            "tag_sets": [list(t) for t in exported.metadata["tag_sets"]],
            "signatures": {k: sorted(v) for k, v in exported.metadata["signatures"].items()},
            "published": bool(exported.metadata["published"]),
            "published_uri": exported.metadata["published_uri"],
            "published_version": exported.metadata["published_version"],
            "reason": exported.metadata["publish_reason"],
        },
        "fingerprints": {
            name: outputs[name].metadata["fingerprint"]
            for name in ("dataset", "model", "blessing", "predictions", "exported")
        },
        "config": {**settings.arguments(), "job_config": model.metadata["config"]},
    }


def write_summary(summary: Mapping[str, Any], output_dir: str) -> str:
    path = os.path.join(os.path.abspath(output_dir), SUMMARY_FILE)
    storage.write_text(path, json.dumps(summary, indent=2, sort_keys=True) + "\n")
    return path


def run_local(settings: RunConfig, output_dir: str, verbose: bool = False) -> dict[str, Any]:
    """Runs the pipeline locally and writes OUTPUT/summary.json; returns the summary."""
    outputs = run_pipeline(settings, output_dir, verbose)
    summary = summarize(outputs, settings)
    write_summary(summary, output_dir)
    return summary
