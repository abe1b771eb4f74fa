"""The evaluation report: one standalone HTML file (plots embedded as PNG, nothing fetched) and a short Markdown
summary, for a reviewer deciding whether a model should have been published.

It reads as a story, in this order: the verdict and its checks; the run's header (run, start, duration so far,
data, code, model); the headline metrics with their bootstrap confidence intervals and the change against the
baseline (with the paired interval and its verdict); the metrics per slice of the eval rows (worst first); the
features' permutation importance (and integrated-gradient attributions); the training and validation loss curves
with the selected step; the worst-predicted eval rows with their input file and line; the task's plots; the data;
the run's config. Each part the evaluation did not compute is left out.

Runs on the host CPU after evaluation, from what the evaluate stage already holds: the verdict and its checks,
the eval rows' labels, the candidate's (and baseline's) scores, the worst rows, the loss curves
(`evaluation.curves`), and the prepared data's manifest. Plots are drawn with matplotlib on figures of their own
(no pyplot, no display).
"""

from __future__ import annotations

import base64
import dataclasses
import hashlib
import html
import io
import json
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any, List, Mapping, Optional, Sequence, Tuple

import numpy as np
from matplotlib.figure import Figure
from matplotlib.ticker import MaxNLocator

from estimator_lib import storage
from estimator_lib.data.common import markdown_text
from estimator_lib.evaluation.blessing import Blessing
from estimator_lib.evaluation.metrics import Scores, Truth, precision_recall

if TYPE_CHECKING:  # the types only: this module stays free of TensorFlow
    from estimator_lib.data.prepare import PrepareResult
    from estimator_lib.evaluation.evaluate import Evaluation

_STYLE = """
body{font-family:system-ui,-apple-system,Segoe UI,Helvetica,Arial,sans-serif;margin:2rem auto;max-width:70rem;
color:#1d1d1f;padding:0 1rem}h1{margin-bottom:.2rem}h2{border-bottom:1px solid #ddd;padding-bottom:.2rem;
margin-top:2rem}table{border-collapse:collapse;margin:.5rem 0}td,th{border:1px solid #ddd;padding:.25rem .6rem;
text-align:left}th{background:#f5f5f7}td.n{text-align:right;font-variant-numeric:tabular-nums}.ok{color:#137333}
.fail{color:#b3261e}.badge{display:inline-block;padding:.2rem .7rem;border-radius:1rem;color:#fff;font-weight:600}
.badge.ok{background:#137333}.badge.fail{background:#b3261e}figure{display:inline-block;margin:.5rem}
img{max-width:32rem}pre{background:#f5f5f7;padding:.6rem;font-size:.8rem;white-space:pre-wrap;word-break:break-all}
summary{cursor:pointer;font-weight:600;margin:.8rem 0}.facts td{overflow-wrap:anywhere}
.facts td:first-child{white-space:nowrap}.wide{overflow-x:auto}tr.fail td{background:#fce8e6}
tr.unjudged td{color:#5f6368}#curves img{max-width:42rem}#worst-rows td:first-child{white-space:nowrap}
"""


@dataclasses.dataclass(frozen=True)
class ReportInputs:
    """What the report shows.

    Attributes:
      title: the report's heading (e.g. the run and the label).
      blessing: the verdict, its checks and the candidate's (and baseline's) blessing metrics.
      truth: the eval rows' labels (None for a user model_fn, whose metrics are its metric_fn's: no plots).
      candidate: the candidate's scores for those rows (None with `truth`).
      baseline: the baseline model's scores for the same rows, when there is one.
      model_metrics: every metric of the candidate on the eval rows (`metrics.reported_metrics`; the blessing's
        part of them is in `blessing.candidate_metrics`, the same values).
      reference_metrics: a reference model's metrics on the same rows, when one was fitted.
      manifest: the prepared data's manifest (counts, missing values, class counts, notes).
      drift: a drift summary {feature: {figure: value}} when the run checked one.
      run: facts about the run: fingerprints, config, versions (shown as JSON).
      slices: the metrics per slice of the eval rows (`Evaluation.slices`), when the run asked for slices.
      intervals: bootstrap confidence intervals of the headline metrics and the paired comparison with the
        baseline (`Evaluation.intervals`).
      importance: permutation importance per feature and integrated-gradient attributions
        (`Evaluation.importance`).
      leakage_threshold: `BlessingConfig.leakage_threshold`, the bound of the leakage check's row when no feature
        reached it (the blessing then records the scores but no check).
      no_baseline: why there is no baseline (shown under the metrics when there is none).
      preflight: the train stage's TPU preflight, its console block (`Preflight.lines`), when strict mode made one.
    """

    title: str
    blessing: Blessing
    truth: Optional[Truth]
    candidate: Optional[Scores]
    baseline: Optional[Scores] = None
    model_metrics: Mapping[str, float] = dataclasses.field(default_factory=dict)
    reference_metrics: Optional[Mapping[str, float]] = None
    manifest: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    drift: Optional[Mapping[str, Mapping[str, Any]]] = None
    run: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    slices: Optional[Mapping[str, Any]] = None
    intervals: Optional[Mapping[str, Any]] = None
    importance: Optional[Mapping[str, Any]] = None
    header: Optional["RunHeader"] = None
    curves: Optional[Mapping[str, Any]] = None
    worst_rows: Optional[Sequence[Mapping[str, Any]]] = None
    preflight: Optional[Sequence[str]] = None
    leakage_threshold: Optional[float] = None
    no_baseline: str = "no baseline given"


@dataclasses.dataclass(frozen=True)
class RunHeader:
    """The facts a reader wants first: which run, when, how long so far, on what data, with what code and model.

    Attributes:
      run: the pipeline run's name (a local run's directory "<pipeline>-<run id>", a Vertex AI PipelineJob's name).
      started: when the run's first counted stage started (ISO 8601 UTC).
      written: when the report was written (ISO 8601 UTC): the duration is from `started` to it.
      covers: which stages the duration covers (the report is written before the run ends).
      data: (input file name, rows) per input file.
      data_fingerprint: the input data's fingerprint (sha256 over the files' contents).
      code: the package's commit (and whether the checkout was modified), else its version (and image).
      model: the model family, or the user's model_fn.
    """

    run: str
    started: str
    written: str
    covers: str
    data: Tuple[Tuple[str, int], ...]
    data_fingerprint: str
    code: str
    model: str


# -- plots ------------------------------------------------------------------------------------------------------------
def _figure() -> Tuple[Figure, Any]:
    """A figure of its own (no pyplot: no global state, no display), drawn by the Agg canvas."""
    fig = Figure(figsize=(5.0, 4.0), dpi=90)
    return fig, fig.subplots()


def _png(fig: Figure) -> str:
    buffer = io.BytesIO()
    fig.tight_layout()
    fig.savefig(buffer, format="png", metadata={"Software": None})
    return base64.b64encode(buffer.getvalue()).decode("ascii")


def _plot_text(name: Any) -> str:
    """A class name as matplotlib text: a "$" would start mathtext (a name like "$\\frac$" fails the drawing),
    so it is escaped and the name shows as written."""
    return str(name).replace("$", "\\$")


def _legend(ax: Any, lines: List[Any], names: List[str], loc: str) -> None:
    """A legend of the given lines and class names, given explicitly: matplotlib leaves out a line whose label
    starts with "_" (a class "_other" would vanish from the legend)."""
    ax.legend(lines, [_plot_text(n) for n in names], loc=loc)


def _confusion_plot(truth: Truth, scores: Scores) -> str:
    classes = list(truth.classes)
    index = {c: i for i, c in enumerate(classes)}
    matrix = np.zeros((len(classes), len(classes)), dtype=int)
    for t, p in zip(truth.labels, scores.predicted):
        matrix[index[t], index[p]] += 1
    fig, ax = _figure()
    ax.imshow(matrix, cmap="Blues")
    for (i, j), n in np.ndenumerate(matrix):
        ax.text(j, i, str(n), ha="center", va="center", color="white" if n > matrix.max() / 2 else "black")
    labels = [_plot_text(c) for c in classes]
    ax.set_xticks(range(len(classes)), labels, rotation=45, ha="right")
    ax.set_yticks(range(len(classes)), labels)
    ax.set(xlabel="predicted", ylabel="true", title="Confusion matrix (eval rows)")
    return _png(fig)


def _one_vs_rest(truth: Truth, scores: Scores) -> List[Tuple[str, np.ndarray, np.ndarray]]:
    """(class, is that class [N] bool, its probability [N]) per class (the positive class only for two)."""
    classes = list(truth.classes)
    positive = classes[1:] if len(classes) == 2 else classes
    return [(c, truth.labels == c, scores.probabilities[:, classes.index(c)]) for c in positive]


LINE_STYLES = ("-", "--", "-.", ":")  # curves that coincide stay visible


def _roc_plot(truth: Truth, scores: Scores) -> str:
    fig, ax = _figure()
    lines, names = [], []
    for i, (name, is_class, probability) in enumerate(_one_vs_rest(truth, scores)):
        order = np.argsort(-probability, kind="stable")
        hits = is_class[order]
        tpr = np.concatenate([[0.0], np.cumsum(hits) / max(hits.sum(), 1)])
        fpr = np.concatenate([[0.0], np.cumsum(~hits) / max((~hits).sum(), 1)])
        lines += ax.plot(fpr, tpr, linestyle=LINE_STYLES[i % 4], alpha=0.85)
        names.append(name)
    ax.plot([0, 1], [0, 1], color="#999", linestyle=":")
    ax.set(xlabel="false positive rate", ylabel="true positive rate", title="ROC (one vs rest)")
    _legend(ax, lines, names, "lower right")
    return _png(fig)


def _pr_plot(truth: Truth, scores: Scores) -> str:
    fig, ax = _figure()
    lines, names = [], []
    for i, (name, is_class, probability) in enumerate(_one_vs_rest(truth, scores)):
        order = np.argsort(-probability, kind="stable")
        hits = np.cumsum(is_class[order])
        precision = hits / np.arange(1, len(hits) + 1)
        recall = hits / max(is_class.sum(), 1)
        lines += ax.plot(recall, precision, linestyle=LINE_STYLES[i % 4], alpha=0.85)
        names.append(name)
    ax.set(xlabel="recall", ylabel="precision", title="Precision-recall (one vs rest)", ylim=(0, 1.02))
    _legend(ax, lines, names, "lower left")
    return _png(fig)


def _calibration_plot(truth: Truth, scores: Scores, bins: int = 10) -> str:
    confidence = scores.probabilities.max(axis=1)
    correct = scores.predicted == truth.labels
    edges = np.linspace(0.0, 1.0, bins + 1)
    which = np.clip(np.digitize(confidence, edges) - 1, 0, bins - 1)
    centers, accuracy, counts = [], [], []
    for b in range(bins):
        mask = which == b
        if mask.any():
            centers.append(confidence[mask].mean())
            accuracy.append(correct[mask].mean())
            counts.append(int(mask.sum()))
    fig, ax = _figure()
    ax.plot([0, 1], [0, 1], color="#999", linestyle=":", label="perfectly calibrated")
    ax.plot(centers, accuracy, marker="o", label="model")
    for x, y, n in zip(centers, accuracy, counts):  # a bin of one row weighs as much as a bin of hundreds
        ax.annotate(str(n), (x, y), textcoords="offset points", xytext=(5, 5), fontsize=8)
    ax.set(
        xlabel="confidence (top probability)",
        ylabel="accuracy",
        title="Calibration (numbers: rows per bin)",
        xlim=(0, 1.05),
        ylim=(0, 1.12),
    )
    ax.legend(loc="upper left")
    return _png(fig)


def _regression_plots(truth: Truth, scores: Scores) -> List[Tuple[str, str]]:
    actual, predicted = truth.labels.astype(float), scores.predicted.astype(float)
    residual = actual - predicted
    fig, ax = _figure()
    low, high = float(min(actual.min(), predicted.min())), float(max(actual.max(), predicted.max()))
    ax.scatter(actual, predicted, s=8, alpha=0.6)
    ax.plot([low, high], [low, high], color="#999", linestyle=":")
    ax.set(xlabel="actual", ylabel="predicted", title="Predicted vs actual")
    scatter = _png(fig)
    fig, ax = _figure()
    ax.scatter(predicted, residual, s=8, alpha=0.6)
    ax.axhline(0.0, color="#999", linestyle=":")
    ax.set(xlabel="predicted", ylabel="actual - predicted", title="Residuals vs predicted")
    residuals = _png(fig)
    fig, ax = _figure()
    ax.hist(residual, bins=30)
    ax.yaxis.set_major_locator(MaxNLocator(integer=True))  # rows are whole
    ax.set(xlabel="actual - predicted", ylabel="rows", title="Residuals")
    histogram = _png(fig)
    return [("Predicted vs actual", scatter), ("Residuals vs predicted", residuals), ("Residual histogram", histogram)]


MAX_PLOTTED_FEATURES = 30  # a bar per feature stays readable; the table lists every feature


def _bar_plot(
    names: Sequence[str], values: Sequence[float], errors: Optional[Sequence[float]], title: str, xlabel: str
) -> str:
    """Horizontal bars, the first name on top (one row of bars per feature, the figure as tall as they need)."""
    if len(names) > MAX_PLOTTED_FEATURES:
        title = f"{title}, top {MAX_PLOTTED_FEATURES} of {len(names)}"
    names, values = list(names)[:MAX_PLOTTED_FEATURES], list(values)[:MAX_PLOTTED_FEATURES]
    fig = Figure(figsize=(5.0, max(2.5, 0.3 * len(names) + 1.2)), dpi=90)
    ax = fig.subplots()
    positions = np.arange(len(names))
    xerr = None if errors is None else list(errors)[: len(names)]
    ax.barh(positions, values, xerr=xerr, color="#4c72b0", ecolor="#333", capsize=2)
    ax.set_yticks(positions, [_plot_text(n) for n in names])
    ax.invert_yaxis()
    ax.axvline(0.0, color="#999", linewidth=0.8)
    ax.set(xlabel=_plot_text(xlabel), title=_plot_text(title))
    return _png(fig)


def importance_plots(importance: Mapping[str, Any]) -> List[Tuple[str, str]]:
    """(caption, base64 PNG): the permutation importance (its standard deviation over repeats as error bars),
    and the integrated-gradient attributions when there are some (largest magnitude first)."""
    permutation = importance.get("permutation") or []
    worse = "drop" if importance.get("higher_is_better", True) else "rise"
    plots = []
    if permutation:
        title = f"Permutation importance ({importance.get('repeats')} repeats)"
        xlabel = f"{worse} in {importance.get('metric')} when the feature is shuffled"
        names, values = [p["feature"] for p in permutation], [p["importance"] for p in permutation]
        plots.append(
            ("Permutation importance", _bar_plot(names, values, [p["std"] for p in permutation], title, xlabel))
        )
    attributions = importance.get("attributions")
    if attributions and attributions.get("features"):
        ranked = sorted(attributions["features"], key=lambda a: -abs(a["attribution"]))
        title = f"Integrated gradients ({attributions.get('steps')} steps)"
        xlabel = f"mean attribution to {attributions.get('output')}"
        names, values = [a["feature"] for a in ranked], [a["attribution"] for a in ranked]
        plots.append(("Integrated gradients", _bar_plot(names, values, None, title, xlabel)))
    return plots


def curves_plot(curves: Mapping[str, Any]) -> str:
    """The training loss and the validation rounds' loss over steps, the selected (best) step marked."""
    fig = Figure(figsize=(7.0, 4.0), dpi=90)
    ax = fig.subplots()
    train, validation = curves.get("train") or [], curves.get("validation") or []
    if train:
        ax.plot([s for s, _ in train], [v for _, v in train], color="#4c72b0", label="training (batch)")
    if validation:
        steps, losses = [s for s, _ in validation], [v for _, v in validation]
        ax.plot(steps, losses, color="#dd8452", marker="o", label="validation (every row)")
    best = curves.get("best_step")
    if best is not None:
        ax.axvline(best, color="#137333", linestyle="--", linewidth=2, label=f"selected: best step {best}")
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))  # steps are whole
    ax.set(xlabel="step", ylabel="loss", title="Loss during training")
    ax.legend(loc="best")  # "upper right" hid a validation curve that rises
    return _png(fig)


# -- tables -----------------------------------------------------------------------------------------------------------
class _Figure(str):
    """A number already written out (e.g. with its interval): right-aligned like a number, escaped like text."""


def _cell(value: Any) -> str:
    """A table cell: numbers right-aligned (floats to 4 places), text left-aligned and escaped."""
    if isinstance(value, _Figure):
        return f'<td class="n">{html.escape(value)}</td>'
    if isinstance(value, bool) or not isinstance(value, (int, float, np.number)):
        return f"<td>{html.escape(str(value))}</td>"
    text = f"{value:.4f}" if isinstance(value, (float, np.floating)) else str(value)
    return f'<td class="n">{text}</td>'


def _table(header: Sequence[str], rows: Sequence[Sequence[Any]], row_classes: Optional[Sequence[str]] = None) -> str:
    """An HTML table; `row_classes` (one per row, "" for none) marks rows (a failed slice)."""
    head = "".join(f"<th>{html.escape(h)}</th>" for h in header)
    marks = [f' class="{c}"' if c else "" for c in row_classes] if row_classes else [""] * len(rows)
    body = "".join(f"<tr{mark}>" + "".join(_cell(v) for v in row) + "</tr>" for mark, row in zip(marks, rows))
    return f"<table><tr>{head}</tr>{body}</table>"


def per_class_metrics(truth: Truth, scores: Scores) -> List[Tuple[str, float, float, float, int]]:
    """(class, precision, recall, F1, support) per class; precision of a never-predicted class is 0."""
    out = []
    for c in truth.classes:
        actual = truth.labels == c
        precision, recall = precision_recall(actual, scores.predicted == c)
        f1 = 2 * precision * recall / (precision + recall) if precision + recall else 0.0
        out.append((c, precision, recall, f1, int(actual.sum())))
    return out


def interval_text(interval: Mapping[str, float], confidence: float, places: int = 2) -> str:
    """A value with its confidence interval, e.g. "0.9710 [0.93, 1.00] 95%"."""
    low, high = f"{interval['low']:.{places}f}", f"{interval['high']:.{places}f}"
    return f"{interval['value']:.4f} [{low}, {high}] {confidence * 100:g}%"


def comparison_text(intervals: Mapping[str, Any]) -> Optional[str]:
    """The paired comparison with the baseline on the same rows, e.g. "accuracy: candidate - baseline = +0.0120
    [-0.0100, 0.0300] 95%: no different" (None without a baseline)."""
    paired = intervals.get("baseline")
    if not paired:
        return None
    confidence = intervals["confidence"]
    span = f"[{paired['low']:+.4f}, {paired['high']:+.4f}] {confidence * 100:g}%"
    return f"{paired['metric']}: candidate - baseline = {paired['difference']:+.4f} {span}: {paired['verdict']}"


UNDEFINED = "undefined here"  # a metric a set of rows does not define (AUC of rows of one class)


def _metrics_table(inputs: ReportInputs) -> str:
    """Each headline metric: the candidate's (with its confidence interval where the run computed one), the
    baseline's and the change against it (with the paired interval and its verdict for the metric the paired
    comparison judged), and the reference's."""
    intervals = inputs.intervals or {}
    candidate, baseline = inputs.blessing.candidate_metrics, inputs.blessing.baseline_metrics or {}
    reference = inputs.reference_metrics or {}
    paired = intervals.get("baseline") or {}
    header = ["metric", "candidate"]
    if baseline:
        header += ["baseline (last published)", "candidate - baseline"]
        header += [f"paired {intervals['confidence'] * 100:g}% interval", "verdict"] if paired else []
    header += ["reference"] if reference else []
    names = sorted({*candidate, *baseline, *reference})
    rows = [_metric_row(name, inputs, paired) for name in names]
    missing = "" if baseline else f"<p>No baseline column: {html.escape(inputs.no_baseline)}.</p>"
    return _table(header, rows) + missing + _intervals_note(intervals)


def _metric_row(name: str, inputs: ReportInputs, paired: Mapping[str, Any]) -> List[Any]:
    intervals = inputs.intervals or {}
    candidate, baseline = inputs.blessing.candidate_metrics, inputs.blessing.baseline_metrics or {}
    span = (intervals.get("metrics") or {}).get(name)
    shown = _Figure(interval_text(span, intervals["confidence"])) if span else candidate.get(name, UNDEFINED)
    row: List[Any] = [name, shown]
    if baseline:
        both = name in candidate and name in baseline
        change = _Figure(f"{candidate[name] - baseline[name]:+.4f}") if both else "n/a: not in both"
        row += [baseline.get(name, "not recorded by the baseline"), change]
        if paired:
            judged = paired["metric"] == name
            only = f"paired on {paired['metric']} only"
            row += [_Figure(f"[{paired['low']:+.4f}, {paired['high']:+.4f}]") if judged else only]
            row += [paired["verdict"] if judged else only]
    if inputs.reference_metrics:
        row.append(inputs.reference_metrics.get(name, "not computed for the reference"))
    return row


def _intervals_note(intervals: Mapping[str, Any]) -> str:
    if not intervals:
        return ""
    note = (
        f"<p>Intervals: {intervals['confidence'] * 100:g}% bootstrap over the eval rows "
        f"({intervals['replicates']} replicates, seed {intervals['seed']}).</p>"
    )
    if intervals.get("baseline"):
        note += (
            "<p>The paired interval is of candidate - baseline, both scored on the same eval rows: the verdict "
            "says whether the candidate is better or worse beyond the noise, or no different.</p>"
        )
    return note


def slice_result(row: Mapping[str, Any]) -> str:
    """A slice's verdict as the report words it."""
    if not row["judged"]:
        return "too few rows to judge either way"
    return {True: "passed", False: "FAILED", None: "no threshold"}[row["passed"]]


def _slices_section(slices: Mapping[str, Any], total_rows: int) -> str:
    """The slice table, in the order given (worst first by the slice metric), the whole eval split on top."""
    metric, rows = slices["metric"], slices["slices"]
    others = sorted({m for row in rows for m in row["metrics"]} - {metric})
    header = ["slice", "rows", metric] + others + ["result"]
    overall = slices.get("overall") or {}
    overall_values = [overall.get(m, UNDEFINED) for m in [metric] + others]
    table = [["all eval rows", total_rows] + overall_values + ["the whole split"]]
    marks = [""]
    for row in rows:
        values = [row["metrics"].get(m, UNDEFINED) for m in [metric] + others]
        table.append([row["name"], row["rows"]] + values + [slice_result(row)])
        marks.append("fail" if row["passed"] is False else "" if row["judged"] else "unjudged")
    note = (
        f"<p>Worst first by {html.escape(str(metric))}. A slice of fewer than {slices['min_rows']} rows is judged by "
        "the bootstrap interval of its metric: it fails (or passes) when the interval lies wholly on the wrong (or "
        "the right) side of a bound; otherwise it has too few rows to judge either way.</p>"
    )
    return (
        note
        + '<div class="wide">'
        + _table(header, table, marks).replace("<table>", '<table id="slice-table">', 1)
        + "</div>"
    )


def _importance_section(importance: Mapping[str, Any]) -> str:
    """The importance charts and the same numbers as a table (one row per feature)."""
    record = importance.get("attributions") or {}
    attributions = {a["feature"]: a["attribution"] for a in record.get("features", [])}
    header = ["feature", "permutation importance", "std"] + (["integrated gradients"] if attributions else [])
    why = {f: "not attributed: no gradient (a categorical id has none)" for f in record.get("not_attributed", [])}
    rows = [
        [p["feature"], p["importance"], p["std"]]
        + ([attributions.get(p["feature"], why.get(p["feature"], "not attributed"))] if attributions else [])
        for p in importance.get("permutation") or []
    ]
    note = (
        f"<p>Permutation importance: how much {html.escape(str(importance.get('metric')))} gets worse on "
        f"{importance.get('rows')} eval rows when one feature's values are shuffled (mean and standard deviation over "
        f"{importance.get('repeats')} repeats).</p>"
    )
    return note + _figures(importance_plots(importance)) + _table(header, rows)


def _duration(started: str, written: str) -> str:
    """Whole seconds between two ISO times, as "1 h 02 min 03 s", "2 min 03 s" or "3 s"."""
    seconds = max(0, round((datetime.fromisoformat(written) - datetime.fromisoformat(started)).total_seconds()))
    hours, rest = divmod(seconds, 3600)
    minutes, seconds = divmod(rest, 60)
    if hours:
        return f"{hours} h {minutes:02d} min {seconds:02d} s"
    return f"{minutes} min {seconds:02d} s" if minutes else f"{seconds} s"


def _utc(moment: str) -> str:
    """An ISO time as "2026-11-25 21:19:12 UTC"."""
    return datetime.fromisoformat(moment).astimezone(timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC")


def _header_section(header: RunHeader) -> str:
    """The run's facts, one per line: run, date, duration so far (and what it covers), data, code, model."""
    files = ", ".join(f"{name} ({rows} rows)" for name, rows in header.data) or "none recorded"
    facts = [
        ["run", header.run],
        ["started", _utc(header.started)],
        ["duration so far", f"{_duration(header.started, header.written)} ({header.covers})"],
        ["data", files],
        ["data fingerprint", header.data_fingerprint[:12] or "none recorded"],
        ["code", header.code],
        ["model", header.model],
    ]
    return _table(["what", "value"], facts).replace("<table>", '<table class="facts">', 1)


def _curves_section(curves: Mapping[str, Any]) -> str:
    """The loss curves, and which step is the model."""
    best = curves.get("best_step")
    if best is not None:
        chosen = f"The evaluated model is the checkpoint of step {best}, the lowest validation loss."
    else:
        chosen = "No validation split: the evaluated model is the last checkpoint."
    note = (
        "<p>Training loss: each logged batch's (TensorBoard's training loss). Validation loss: over every "
        f"validation row after each round. {chosen}</p>"
    )
    return note + _figures([("Loss during training", curves_plot(curves))])


def _original_value(value: Any) -> Any:
    """A feature's value as prepared: a number to float32's 7 significant digits (39.1, not 39.0999985), a
    missing one as "missing"."""
    if value is None:
        return "missing"
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return _Figure(f"{value:.7g}")
    return value


def _worst_rows_section(rows: Sequence[Mapping[str, Any]], classification: bool) -> str:
    """The worst-predicted eval rows: where each came from, its label and prediction, its loss, its values."""
    features = list(rows[0]["values"]) if rows else []
    loss = "log loss" if classification else "absolute error"
    header = ["key", "input", "label", "predicted"] + (["probability"] if classification else []) + [loss]
    table = []
    for row in rows:
        source = row.get("source")
        place = f"{source['file']} line {source['line']}" if source else "not recorded"
        shown = [row["key"], place, row["label"], row["predicted"]]
        shown += [row["probability"]] if classification else []
        values = [_original_value(row["values"][f]) for f in features]
        table.append(shown + [row["loss"]] + values)
    probability = " (probability: of the predicted class)" if classification else ""
    note = (
        f"<p>The {len(rows)} eval rows of highest {loss}, worst first, with their input file and line and their "
        f"feature values as prepared{probability}.</p>"
    )
    return (
        note
        + '<div class="wide">'
        + _table(header + features, table).replace("<table>", '<table id="worst-rows-table">', 1)
        + "</div>"
    )


def _checks_table(inputs: ReportInputs) -> str:
    """Every check that decided the verdict: the blessing's, and the leakage check when it passed without a row."""
    rows = [
        [check.name, check.metric, check.value, check.bound, "passed" if check.passed else "FAILED", check.message]
        for check in inputs.blessing.checks
    ]
    rows += leakage_rows(inputs.blessing, inputs.leakage_threshold)
    return _table(["check", "metric", "value", "bound", "result", "reason"], rows)


def leakage_rows(blessing: Blessing, threshold: Optional[float]) -> List[List[Any]]:
    """The leakage check as a passed row when it ran and no feature reached `threshold` (`blessing.decide` then
    records the scores but no check); [] when it has a check of its own, or did not run."""
    scores = blessing.leakage
    if scores is None or threshold is None or any(c.name == "leakage" for c in blessing.checks):
        return []
    if not scores:
        return [["leakage", "skill", "n/a", threshold, "passed", "no feature scored: the eval rows hold one label"]]
    feature, top = max(sorted(scores.items()), key=lambda item: item[1]["skill"])
    message = (
        f"no feature alone predicts the label: the most predictive, {feature!r}, removes {top['skill']:.4f} of the "
        f"trivial model's errors (blessing.leakage_threshold={threshold:g})"
    )
    return [["leakage", "skill", top["skill"], threshold, "passed", message]]


def _data_section(manifest: Mapping[str, Any]) -> str:
    parts = []
    counts = manifest.get("counts") or {}
    if counts:
        parts.append("<h3>Rows per split</h3>" + _table(["split", "rows"], sorted(counts.items())))
    rows = manifest.get("rows") or {}
    if rows:
        parts.append("<h3>Rows read</h3>" + _table(["rows", "count"], list(rows.items())))
    for key, heading, first in (
        ("missing", "Missing values (imputed)", "column"),
        ("class_counts", "Class balance", "class"),
    ):
        per_split = manifest.get(key) or {}
        if per_split:
            parts.append(f"<h3>{heading}</h3>" + _split_table(per_split, first))
    caps = manifest.get("vocabulary_caps") or []
    if caps:
        parts.append("<h3>Vocabularies capped (prepare.max_vocabulary_size)</h3>" + _caps_table(caps))
    notes = manifest.get("notes") or []
    if notes:
        parts.append("<h3>Notes</h3><ul>" + "".join(f"<li>{html.escape(n)}</li>" for n in notes) + "</ul>")
    return "".join(parts) or "<p>No data summary was given.</p>"


def _caps_table(caps: Sequence[Mapping[str, Any]]) -> str:
    """The prepared manifest's `vocabulary_caps`: per column, what the cap kept and the training rows left out."""
    header = ["column", "distinct values", "kept", "training rows left out", "share left out"]
    rows = [
        [
            c["column"],
            c["distinct"] if c["distinct_exact"] else f"at least {c['distinct']}",
            c["kept"],
            f"{c['rows_outside']} of {c['rows']}",
            f"{c['share_outside']:.1%}",
        ]
        for c in caps
    ]
    return _table(header, rows)


def _split_table(per_split: Mapping[str, Mapping[str, Any]], first: str) -> str:
    """{split: {name: count}} as one row per name and one column per split."""
    splits = sorted(per_split)
    names = sorted({n for s in splits for n in per_split[s]})
    return _table([first] + splits, [[n] + [per_split[s].get(n, 0) for s in splits] for n in names])


def _drift_section(drift: Mapping[str, Mapping[str, Any]]) -> str:
    figures = sorted({name for values in drift.values() for name in values})
    rows = [
        [feature] + [values.get(name, "n/a for this feature's type") for name in figures]
        for feature, values in sorted(drift.items())
    ]
    return _table(["feature"] + figures, rows)


def _run_section(run: Mapping[str, Any]) -> str:
    """The run's facts: single values (fingerprints, the checkpoint, the baseline) as a table, each nested one
    (a config) as JSON under its name."""
    facts = [[name, "none" if value is None else value] for name, value in sorted(run.items()) if not _nested(value)]
    parts = [_table(["what", "value"], facts).replace("<table>", '<table class="facts">', 1)] if facts else []
    for name, value in sorted(run.items()):
        if _nested(value):
            text = json.dumps(value, indent=2, sort_keys=True, default=str)
            parts.append(
                f"<details><summary>{html.escape(str(name))}</summary><pre>{html.escape(text)}</pre></details>"
            )
    return "".join(parts) or "<p>No run facts were given.</p>"


def _nested(value: Any) -> bool:
    return isinstance(value, (Mapping, list, tuple))


def _figures(items: Sequence[Tuple[str, str]]) -> str:
    return "".join(
        f'<figure><img alt="{html.escape(c)}" src="data:image/png;base64,{png}"></figure>' for c, png in items
    )


# -- the report -------------------------------------------------------------------------------------------------------
def performance_plots(truth: Truth, scores: Scores) -> List[Tuple[str, str]]:
    """(caption, base64 PNG) of the candidate's plots for its task."""
    if truth.classes:
        return [
            ("Confusion matrix", _confusion_plot(truth, scores)),
            ("ROC curves", _roc_plot(truth, scores)),
            ("Precision-recall curves", _pr_plot(truth, scores)),
            ("Calibration", _calibration_plot(truth, scores)),
        ]
    return _regression_plots(truth, scores)


def render_html(inputs: ReportInputs) -> str:
    """The standalone HTML report, in the order a reviewer reads it: the verdict and its checks, the run's facts,
    the metrics (with their intervals and the change against the baseline), the TPU preflight, the slices, the
    features' importance, the loss curves, the worst-predicted rows, the task's plots, the data, and the run's
    config."""
    blessing = inputs.blessing
    badge = (
        '<span class="badge ok">blessed</span>' if blessing.blessed else '<span class="badge fail">not blessed</span>'
    )
    sections = [
        f"<h1>{html.escape(inputs.title)}</h1><p>{badge} {html.escape(blessing.summary())}</p>",
        "<h2>Verdict</h2>" + _checks_table(inputs),
    ]
    if inputs.header:
        sections.append('<section id="header"><h2>This run</h2>' + _header_section(inputs.header) + "</section>")
    sections.append("<h2>Metrics</h2>" + _metrics_table(inputs))
    if inputs.preflight:  # an estimate made on the CPU (docs/preflight.md)
        block = html.escape("\n".join(inputs.preflight))
        sections.append(f'<section id="preflight"><h2>TPU preflight (an estimate)</h2><pre>{block}</pre></section>')
    sections += _findings_sections(inputs)
    sections += _performance_sections(inputs)
    sections.append("<h2>Data</h2>" + _data_section(inputs.manifest))
    if inputs.drift:
        sections.append("<h2>Drift against the last published model's data</h2>" + _drift_section(inputs.drift))
    sections.append("<h2>Run</h2>" + _run_section(inputs.run))
    return (
        '<!DOCTYPE html><html lang="en"><head><meta charset="utf-8">'
        f"<title>{html.escape(inputs.title)}</title><style>{_STYLE}</style></head><body>"
        + "".join(sections)
        + "</body></html>\n"
    )


def _findings_sections(inputs: ReportInputs) -> List[str]:
    """Slices, importance, loss curves and the worst rows: each when the evaluation has it."""
    sections = []
    if inputs.slices:
        body = _slices_section(inputs.slices, inputs.blessing.num_examples)
        sections.append('<section id="slices"><h2>Slices</h2>' + body + "</section>")
    if inputs.importance:
        body = _importance_section(inputs.importance)
        sections.append('<section id="importance"><h2>Feature importance</h2>' + body + "</section>")
    if inputs.curves:
        sections.append('<section id="curves"><h2>Training curves</h2>' + _curves_section(inputs.curves) + "</section>")
    if inputs.worst_rows:
        classification = bool(inputs.truth is not None and inputs.truth.classes)
        body = _worst_rows_section(inputs.worst_rows, classification)
        sections.append('<section id="worst-rows"><h2>Worst-predicted eval rows</h2>' + body + "</section>")
    return sections


def _performance_sections(inputs: ReportInputs) -> List[str]:
    """The task's plots, the per-class table and every metric of the candidate (folded)."""
    truth, sections = inputs.truth, []
    if truth is not None and inputs.candidate is not None:
        plots = performance_plots(truth, inputs.candidate)
        sections.append("<h2>Performance on the eval rows</h2>" + _figures(plots))
        if truth.classes:
            rows = per_class_metrics(truth, inputs.candidate)
            sections.append("<h3>Per class</h3>" + _table(["class", "precision", "recall", "F1", "rows"], rows))
    if inputs.model_metrics:  # long (every class's precision, recall, AUCs): folded, to keep the plots in view
        sections.append(
            "<details><summary>All of the candidate's metrics (exact, on the eval rows)</summary>"
            + _table(["metric", "value"], sorted(inputs.model_metrics.items()))
            + "</details>"
        )
    return sections


def render_markdown(inputs: ReportInputs) -> str:
    """The verdict and headline metrics as Markdown (what Vertex AI's run page renders). Every name and message
    is `markdown_text`: a label, class or column name shows as written, never as markup. It has no header (run,
    times): the same evaluation gives the same verdict file, which a reproduced run compares."""
    blessing, md = inputs.blessing, markdown_text
    lines = [
        f"# {md(inputs.title)}",
        "",
        f"**{'Blessed' if blessing.blessed else 'Not blessed'}**: {md(blessing.summary())}",
        "",
    ]
    lines += ["| check | result | reason |", "|---|---|---|"]
    lines += [f"| {md(c.name)} | {'passed' if c.passed else 'FAILED'} | {md(c.message)} |" for c in blessing.checks]
    lines += [f"| leakage | passed | {md(row[-1])} |" for row in leakage_rows(blessing, inputs.leakage_threshold)]
    columns = [("candidate", blessing.candidate_metrics)]
    if blessing.baseline_metrics:
        columns.append(("baseline", blessing.baseline_metrics))
    if inputs.reference_metrics:
        columns.append(("reference", inputs.reference_metrics))
    names = sorted({n for _, m in columns for n in m})
    lines += ["", "| metric | " + " | ".join(label for label, _ in columns) + " |", "|---" * (len(columns) + 1) + "|"]
    for name in names:
        values = [f"{m[name]:.4f}" if name in m else "n/a" for _, m in columns]
        lines.append(f"| {md(name)} | " + " | ".join(values) + " |")
    lines += _markdown_findings(inputs)
    counts = inputs.manifest.get("counts") or {}
    if counts:
        lines += ["", "Rows: " + ", ".join(f"{md(split)} {n}" for split, n in sorted(counts.items()))]
    return "\n".join(lines) + "\n"


def _markdown_findings(inputs: ReportInputs) -> List[str]:
    """The comparison metric's interval and the paired comparison, the worst judged slice, the top 3 features,
    as a list (nothing when the evaluation computed none of them)."""
    lines = _interval_lines(inputs.intervals or {}, inputs.blessing.comparison_metric)
    lines += _worst_slice_line(inputs.slices) + _top_features_line(inputs.importance)
    return ["", *[f"- {line}" for line in lines]] if lines else []


def _interval_lines(intervals: Mapping[str, Any], metric: str) -> List[str]:
    lines = []
    span = (intervals.get("metrics") or {}).get(metric)
    if span:
        runs = f"bootstrap, {intervals['replicates']} replicates, seed {intervals['seed']}"
        lines.append(f"{markdown_text(metric)}: {interval_text(span, intervals['confidence'])} ({runs})")
    comparison = comparison_text(intervals) if intervals else None
    if comparison:
        lines.append(f"Against the baseline (paired, same rows): {markdown_text(comparison)}")
    return lines


def _worst_slice_line(slices: Optional[Mapping[str, Any]]) -> List[str]:
    judged = [row for row in (slices or {}).get("slices", []) if row["judged"]]
    if not judged:
        return []
    worst, metric = judged[0], slices["metric"]
    value = worst["metrics"].get(metric)
    shown = f"{value:.4f}" if isinstance(value, (int, float)) else "n/a"
    where = f"{markdown_text(worst['name'])} ({worst['rows']} rows)"
    return [f"Worst judged slice: {where}: {markdown_text(metric)} {shown}, {slice_result(worst)}"]


def _top_features_line(importance: Optional[Mapping[str, Any]]) -> List[str]:
    top = ((importance or {}).get("permutation") or [])[:3]
    if not top:
        return []
    features = ", ".join(f"{markdown_text(p['feature'])} {p['importance']:.4f} ± {p['std']:.4f}" for p in top)
    return [f"Top features (permutation importance, {markdown_text(importance['metric'])}): {features}"]


@dataclasses.dataclass(frozen=True)
class WrittenReport:
    """Where `write_report` put the report, and what it showed."""

    html_uri: str
    markdown_uri: str
    inputs: ReportInputs

    @property
    def fingerprint(self) -> str:
        """The HTML report's content fingerprint: everything it shows but the run's facts and header (paths,
        times, and fingerprints a stage manifest records anyway) and the TPU preflight (timed on the machine that
        trained), so the same evaluation written elsewhere or later has the same fingerprint."""
        shown = render_html(dataclasses.replace(self.inputs, run={}, header=None, preflight=None))
        return hashlib.sha256(shown.encode("utf-8")).hexdigest()


def report_inputs(
    evaluation: "Evaluation",
    prepared: "PrepareResult",
    run: Mapping[str, Any],
    drift: Optional[Mapping[str, Mapping[str, Any]]] = None,
) -> ReportInputs:
    """What the report of an evaluate stage shows: its verdict and scores, the prepared data's manifest, the
    drift summary when there is one, and the run's facts (fingerprints, config)."""
    if evaluation.truth is None or evaluation.candidate is None:
        raise ValueError("the evaluation holds no eval-row scores to report; build it with evaluate_and_bless")
    label = prepared.schema.label
    return ReportInputs(
        title=f"{label.name} ({label.task}): model at step {evaluation.global_step}",
        blessing=evaluation.blessing,
        truth=evaluation.truth,
        candidate=evaluation.candidate,
        baseline=evaluation.baseline,
        model_metrics=dict(evaluation.metrics),
        reference_metrics=evaluation.blessing.reference_metrics,
        manifest=prepared.manifest,
        drift=drift,
        run=run,
        slices=evaluation.slices,
        intervals=evaluation.intervals,
        importance=evaluation.importance,
        worst_rows=evaluation.worst_rows,
    )


def user_report_inputs(evaluation: "Evaluation", manifest: Mapping[str, Any], run: Mapping[str, Any]) -> ReportInputs:
    """What the report of a user model's evaluate stage shows: the verdict, the metric_fn's metrics beside the
    published model's, the prepared records' manifest, and the run's facts."""
    return ReportInputs(
        title=f"{manifest.get('label')} (your model_fn): model at step {evaluation.global_step}",
        blessing=evaluation.blessing,
        truth=None,
        candidate=None,
        model_metrics=dict(evaluation.metrics),
        manifest=manifest,
        run=run,
        slices=evaluation.slices,
        intervals=evaluation.intervals,
        importance=evaluation.importance,
    )


def write_report(inputs: ReportInputs, html_uri: str, markdown_uri: str) -> WrittenReport:
    """Writes the standalone HTML report to `html_uri` and the Markdown summary to `markdown_uri` (local or
    gs://; each written in one step)."""
    storage.write_text(html_uri, render_html(inputs))
    storage.write_text(markdown_uri, render_markdown(inputs))
    return WrittenReport(html_uri, markdown_uri, inputs)
