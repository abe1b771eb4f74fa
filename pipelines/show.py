"""`tpu-pipeline show [RUN]`: a past local run, as its record (OUTPUT/runs/<id>/summary.json) has it.

The run is OUTPUT's latest (`OUTPUT/latest`) by default, or RUN: a run id under OUTPUT/runs/, a run folder, or
a summary.json. What is printed comes from the record alone (status, the failed stage and its error, data and
preparation's warnings, metrics, verdict, artifacts, the report, the TensorBoard command, the log), so it works
for runs of any age, failed and interrupted ones included, and loads no TensorFlow.
"""

from __future__ import annotations

import re

from components import registry
from estimator_lib import vocabulary
from estimator_lib.config.run import PREPARED_SPLITS
from pipelines import runs
from pipelines.run_summary import Data, Results, RunSummary, Serving, Skew, Slices, Strict

# The record's artifacts in DAG order (summary.json keeps its keys sorted); others follow by name.
ARTIFACT_ORDER = tuple(key for key, _ in registry.SUMMARY_ARTIFACTS)
_CONTROL = re.compile("[\x00-\x1f\x7f-\x9f]")  # C0 (ESC, BEL, newline, ...), DEL and C1
SKEW_READINGS = 3  # the worst features' readings printed under the skew line (skew.json has them all)
SKEW_CLEAN = "passed"  # the skew verdict the end of a run does not repeat


def printable(text: str) -> str:
    """`text` with every control character written as `\\xNN`: a string from data or a record printed to a
    terminal can neither move the cursor, clear the screen, retitle the window nor start a line of its own."""
    return _CONTROL.sub(lambda m: f"\\x{ord(m[0]):02x}", text)


def format_run(summary: RunSummary, path: str) -> str:
    """The record as lines: how the run ended, then what it produced (as far as it got)."""
    run, results = summary.run, summary.results
    lines = [_headline(summary)]
    if run.seconds:
        lines.append(
            "  stages: " + ", ".join(f"{stage} {seconds:.1f} s" for stage, seconds in in_run_order(run.seconds))
        )
    if summary.status != runs.OK:  # the error's first line and the list it continues with
        lines += f"  {summary.status} at {summary.stage or 'start-up'}: {summary.error}".split("\n")
    if results is not None:
        lines += _result_lines(results)
    if summary.report:
        lines.append(f"  report: {summary.report}")
    if results is not None:
        lines.append(f"  TensorBoard: tensorboard --logdir {results.tensorboard_logdir}")
    lines += [f"  log: {run.log}", f"summary: {path}"]
    return "\n".join(map(printable, lines))


def in_run_order(seconds: dict[str, float]) -> list[tuple[str, float]]:
    """(stage, seconds) in the order the stages run (summary.json keeps its keys sorted)."""
    order = ("resolve", *ARTIFACT_ORDER)
    return sorted(seconds.items(), key=lambda item: (order.index(item[0]) if item[0] in order else 99, item))


def _result_lines(results: Results) -> list[str]:
    """Data and preparation's warnings, metrics, slices, verdict, TPU-strict and serving checks, artifacts."""
    lines = data_lines(results.data)
    if results.metrics:
        lines.append("  metrics (eval):")
        lines += [f"    {name:<24} {vocabulary.format_value(value)}" for name, value in sorted(results.metrics.items())]
    if results.slices:
        lines += slice_lines(results.slices)
    lines.append(f"  blessed: {results.blessed} ({results.blessing.summary})")
    if results.strict:
        lines += strict_lines(results.strict)
    if results.predictions.skew:
        lines += skew_lines(results.predictions.skew)
    lines += [f"  {serving_line(results.serving)}", f"  {results.export.reason}", "  artifacts:"]
    artifacts = results.artifacts
    order = sorted(
        artifacts, key=lambda k: (ARTIFACT_ORDER.index(k) if k in ARTIFACT_ORDER else len(ARTIFACT_ORDER), k)
    )
    return lines + [f"    {stage:<14} {artifacts[stage]}" for stage in order]


def slice_lines(slices: Slices) -> list[str]:
    """The worst slices by the slice metric, each with its rows and whether it failed its checks; where the full
    table is."""
    metric = slices.metric
    overall = slices.overall.get(metric)
    lines = [
        f"  slices by {metric} ({slices.count}, {slices.judged} judged; overall "
        f"{'-' if overall is None else vocabulary.format_value(overall)}), worst first:"
    ]
    for entry in slices.worst:
        value = entry.metrics.get(metric)
        shown = "-" if value is None else vocabulary.format_value(value)
        if not entry.judged:
            verdict = f"  (under {slices.min_rows} rows: not judged)"
        else:
            verdict = "  FAILED" if entry.passed is False else ""
        lines.append(f"    {entry.name:<32} {entry.rows:>6} rows  {metric} {shown}{verdict}")
    if slices.uri:
        lines.append(f"    full table: {slices.uri}")
    return lines


def skew_lines(skew: Skew, indent: str = "  ") -> list[str]:
    """Batch prediction's skew check: "skew: <verdict>" (the count of skewed features, whether the predictions
    moved, `predict.skew`, where skew.json is), then the worst features' one-line readings (at most
    `SKEW_READINGS`) and the predictions' when they moved. Not yet printable: the caller escapes every line."""
    head = skew.summary
    # "warned: 2 of 7 features skewed: <readings>; the predictions moved: <reading>": the readings get their own lines
    if skew.worst:
        head = skew.summary.partition(" skewed: ")[0] + " skewed"
        head += "; the predictions moved" if skew.predictions else ""
    elif skew.predictions:
        head = skew.summary.partition(": the predictions moved")[0] + ": the predictions moved"
    where = f"; {skew.uri}" if skew.uri else ""
    lines = [f"{indent}skew: {head} (predict.skew={skew.mode}{where})"]
    lines += [f"{indent}  {feature.reading}" for feature in skew.worst[:SKEW_READINGS]]
    return lines + ([f"{indent}  {skew.predictions}"] if skew.predictions else [])


def serving_line(serving: Serving) -> str:
    """The serving check in one line: rows and signatures, the largest difference and the tolerance."""
    if not serving.rows_checked:
        return f"serving check: {serving.compared}"
    worst = max((d for outputs in serving.max_abs_diff.values() for d in outputs.values()), default=0.0)
    return (
        f"serving check: {serving.rows_checked} rows agree on {', '.join(serving.signatures)} "
        f"(largest difference {worst:.3g}; rtol {serving.rtol:g} + atol {serving.atol:g})"
    )


STRICT_CLASSES = ("fails", "accepted", "differs", "notes")
_STRICT_GROUP = {"fails": "fails", "differs": "differs", "note": "notes"}  # a finding's class: its count's name


def strict_line(strict: Strict) -> str:
    """The train stage's TPU-strict check in one line: the checks, then each class's count with the names of
    its findings (the record at `uri` has their messages)."""
    named: dict[str, list[str]] = {}
    for finding in strict.findings:  # a hand-edited one counts as a note
        group = "accepted" if finding.get("accepted_by") else _STRICT_GROUP.get(finding.get("severity"), "notes")
        named.setdefault(group, []).append(str(finding.get("name", "?")))
    parts = []
    for group in STRICT_CLASSES:
        count = strict.counts.get(group, 0)
        if count:
            shown = list(dict.fromkeys(named.get(group, [])))
            parts.append(f"{count} {group} ({', '.join(shown)})" if shown else f"{count} {group}")
    found = "; ".join(parts) if parts else "nothing a TPU would refuse"
    return f"TPU-strict: {strict.checks} checks, {found}" + (f"; details in {strict.uri}" if parts else "")


def strict_lines(strict: Strict) -> list[str]:
    """The TPU-strict line, then its preflight's verdict line when it made one."""
    return [f"  {strict_line(strict)}", *([f"  {strict.preflight.line}"] if strict.preflight else [])]


def _headline(summary: RunSummary) -> str:
    run = summary.run
    times = f"started {run.started}" + (f", ended {run.ended}" if run.ended else "")
    return f"run {run.id}: {summary.status} ({times}" + (f", {run.attempts} attempts)" if run.attempts > 1 else ")")


def data_lines(data: Data) -> list[str]:
    """The data lines: rows per split (and unlabelled rows), and what a user should look at (quarantined rows,
    empty columns, and the prepared manifest's notes as warnings: a capped vocabulary, a constant column, a class
    without rows)."""
    counts = ", ".join(f"{split} {data.counts[split]}" for split in PREPARED_SPLITS if data.counts.get(split))
    unlabelled = f", {data.unlabelled} unlabelled (set aside)" if data.unlabelled else ""
    lines = [f"  data: {data.rows} rows ({counts}){unlabelled}"]
    if data.quarantined:
        lines.append(f"  quarantined: {data.quarantined} bad rows set aside in {data.quarantine_uri}")
    for split, columns in data.columns_all_missing.items():
        lines.append(f"  no value in any {split} row: {', '.join(columns)}")
    return lines + [f"  warning: {note}" for note in data.notes]
