"""`tpu-pipeline list [--output OUTPUT]`: the local runs under an output folder, newest first, one line each.

Each line comes from the run's record (OUTPUT/runs/<id>/summary.json) alone: run id, status, when it started,
how long it took, the headline metrics (the comparison metric first, marked with *), and the verdict (blessed and
published, or why not). A run folder whose record is missing or unreadable is listed as such: one damaged run
does not hide the others. No TensorFlow is loaded.
"""

from __future__ import annotations

import dataclasses
import datetime
import json
import os
from typing import Any, Optional

from estimator_lib import vocabulary
from estimator_lib.config.blessing import DEFAULT_COMPARISON
from pipelines import runs
from pipelines.run_summary import RunSummary, SummaryError
from pipelines.show import printable

SHOWN_METRICS = 3


@dataclasses.dataclass(frozen=True)
class RunLine:
    """One run as `list` shows it; every field is display text."""

    run_id: str
    status: str
    started: str
    duration: str
    metrics: str
    verdict: str


def list_runs(output: str) -> list[RunLine]:
    """The runs under `output`, newest first (run ids start with their UTC start time).

    Raises:
      FileNotFoundError: `output` holds no runs/ folder; the message names it.
    """
    directory = os.path.join(output, runs.RUNS_DIR)
    if not os.path.isdir(directory):
        raise FileNotFoundError(
            f"no runs under {output}: {directory} does not exist; give the --output a run-local used"
        )
    ids = sorted((name for name in os.listdir(directory) if not name.startswith(".")), reverse=True)
    return [describe(runs.RunFolder(output, run_id)) for run_id in ids]


def describe(folder: runs.RunFolder) -> RunLine:
    """The line of one run folder; an unreadable record gives a line that says what is wrong with it."""
    try:
        summary = folder.read_summary()
    except FileNotFoundError:
        return _unreadable(folder.run_id, f"no {runs.SUMMARY_FILE}")
    except SummaryError as e:
        return _unreadable(folder.run_id, f"{runs.SUMMARY_FILE} unreadable ({e.reason})")
    except OSError as e:
        return _unreadable(folder.run_id, f"{runs.SUMMARY_FILE} unreadable ({type(e).__name__}: {e})")
    return RunLine(
        run_id=folder.run_id,
        status=summary.status,
        started=summary.run.started,
        duration=duration_of(summary.run.started, summary.run.ended),
        metrics=metrics_text(summary),
        verdict=verdict_text(summary),
    )


def _unreadable(run_id: str, why: str) -> RunLine:
    return RunLine(run_id, "unreadable", "?", "?", "", why)


def duration_of(started: Optional[str], ended: Optional[str]) -> str:
    """'1 min 05 s' between two ISO times; '?' when either is missing or not a time (a running run has no end)."""
    try:
        seconds = (datetime.datetime.fromisoformat(ended) - datetime.datetime.fromisoformat(started)).total_seconds()
    except (TypeError, ValueError):
        return "?"
    minutes, rest = divmod(int(round(seconds)), 60)
    return f"{minutes} min {rest:02d} s" if minutes else f"{rest} s"


def comparison_metric(summary: RunSummary) -> Optional[str]:
    """The metric a finished run's blessing compared models on: the config's, else the task's default."""
    blessing = summary.config.get("blessing_config") or {}
    if isinstance(blessing, str):  # recorded as JSON text by older runs
        try:
            blessing = json.loads(blessing)
        except ValueError:
            blessing = {}
    metric = blessing.get("comparison_metric") if isinstance(blessing, dict) else None  # not one: hand-edited
    return metric if metric and isinstance(metric, str) else DEFAULT_COMPARISON.get(summary.results.dataset.task)


def metrics_text(summary: RunSummary) -> str:
    """'rmse*=323.96 mae=266.38 r2=0.7824': the comparison metric (starred) first, then headline metrics."""
    metrics = summary.results.metrics if summary.results else {}
    if not metrics:
        return ""
    compared = comparison_metric(summary)
    names = [compared] if compared in metrics else []
    # Then the task's headline metrics (`vocabulary.HEADLINE`); a user model's metrics are its metric_fn's own names.
    names += [n for n in vocabulary.headline(metrics) if n not in names]
    names = (names or sorted(metrics))[:SHOWN_METRICS]
    return " ".join(f"{n}{'*' if n == compared else ''}={_number(metrics[n])}" for n in names)


def _number(value: Any) -> str:
    """Four significant decimals for small values, two for large ones (an RMSE in hundreds)."""
    if not isinstance(value, (int, float)):
        return str(value)
    return f"{value:.4f}" if abs(value) < 100 else f"{value:.2f}"


def verdict_text(summary: RunSummary) -> str:
    """'published', 'blessed, not published: <why>', 'not blessed: <why>', or how a failed run ended."""
    status, stage, results = summary.status, summary.stage or "start-up", summary.results
    if status != runs.OK or results is None:  # an error's first line: the list it continues with has many
        error = (summary.error or "").partition("\n")[0]
        return f"{status} at {stage}: {error}" if status != runs.RUNNING else f"running ({stage})"
    if results.export.published:  # also a rerun reporting what its killed first attempt published
        return f"published {results.export.published_version}"
    if not results.blessed:
        return "not blessed: " + "; ".join(results.blessing.reasons or [results.blessing.summary])
    return f"blessed, not published: {results.export.reason}"


def format_runs(output: str, lines: list[RunLine]) -> str:
    """The runs as aligned columns under a header (`printable`); * marks the metric blessing compares on."""
    if not lines:
        return printable(f"no runs under {output}")
    header = RunLine("RUN", "STATUS", "STARTED", "DURATION", "METRICS (*: compared)", "VERDICT")
    rows = [header, *(RunLine(*map(printable, dataclasses.astuple(line))) for line in lines)]
    fields = [f.name for f in dataclasses.fields(RunLine)]
    widths = {f: max(len(getattr(r, f)) for r in rows) for f in fields[:-1]}
    return "\n".join(
        "  ".join([*(getattr(r, f).ljust(widths[f]) for f in fields[:-1]), r.verdict]).rstrip() for r in rows
    )
