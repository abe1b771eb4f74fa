"""The evaluation report: every section, valid embedded images, nothing fetched from the network."""

from __future__ import annotations

import dataclasses
import types

import numpy as np
import pytest
from markup_checks import HOSTILE, assert_html_shows, assert_markdown_shows
from report_checks import (
    CLASSIFICATION_PLOTS,
    IMPORTANCE_PLOTS,
    assert_complete_report,
    assert_valid_png,
    images,
    penguin_findings,
)

from estimator_lib.evaluation import Blessing, Check, Evaluation, Scores, Truth, reported_metrics
from estimator_lib.evaluation import report as report_lib

MANIFEST = {
    "counts": {"train": 80, "eval": 20, "test": 0},
    "rows": {"total": 101, "written": 100, "bad": 1, "quarantined": 1},
    "missing": {"train": {"bill": 2, "island": 0}, "eval": {"bill": 1, "island": 0}},
    "class_counts": {"train": {"a": 40, "b": 25, "c": 15}, "eval": {"a": 10, "b": 6, "c": 4}},
    "notes": ["column 'x' is constant (1.0) in the training split (std 1 used)"],
}


def blessing(blessed: bool, metric: str, value: float, baseline: float) -> Blessing:
    check = Check("baseline", metric, value, baseline, blessed, f"beats the baseline: {metric}={value:.4f} ...")
    return Blessing(blessed, (check,), {metric: value}, metric, 20, "/published/v1", {metric: baseline})


@pytest.fixture
def classification():
    rng = np.random.default_rng(0)
    classes = ("a", "b", "c")
    labels = np.array([classes[i % 3] for i in range(60)], dtype=object)
    probabilities = rng.dirichlet([1, 1, 1], size=60)
    probabilities[np.arange(60), [i % 3 for i in range(60)]] += 1.0  # mostly right
    probabilities /= probabilities.sum(axis=1, keepdims=True)
    predicted = np.array([classes[i] for i in probabilities.argmax(axis=1)], dtype=object)
    truth = Truth(tuple(f"k{i}" for i in range(60)), labels, classes)
    candidate = Scores(predicted, probabilities)
    metrics = reported_metrics(truth, candidate)  # as the evaluate stage: the blessing's accuracy is one of them
    return report_lib.ReportInputs(
        title="species on penguins",
        blessing=blessing(True, "accuracy", metrics["accuracy"], 0.5),
        truth=truth,
        candidate=candidate,
        model_metrics=metrics,
        reference_metrics={"accuracy": 0.85},
        manifest=MANIFEST,
        drift={"bill": {"psi": 0.02, "missing_rate_change": 0.0}},
        run={"fingerprints": {"dataset": "abc123"}, "config": {"training": {"train_steps": 100}}},
    )


@pytest.fixture
def regression():
    rng = np.random.default_rng(1)
    actual = rng.normal(10.0, 3.0, size=80)
    predicted = actual + rng.normal(0.0, 1.0, size=80)
    truth = Truth(tuple(f"k{i}" for i in range(80)), actual)
    return report_lib.ReportInputs(
        title="price",
        blessing=blessing(False, "rmse", 1.0, 0.9),
        truth=truth,
        candidate=Scores(predicted),
        manifest={"counts": {"train": 300, "eval": 80, "test": 0}},
    )


def test_classification_report_holds_every_section_and_plot(classification):
    document = report_lib.render_html(classification)
    assert_complete_report(document, classification=True)
    assert "<h2>Drift" in document and '<span class="badge ok">blessed</span>' in document
    assert "<th>candidate</th><th>baseline (last published)</th><th>reference</th>" in document
    assert "Missing values (imputed)" in document and "Class balance" in document and "abc123" in document
    assert "<h2>Slices" not in document and "<h2>Feature importance" not in document and "Intervals:" not in document


def test_regression_report_shows_residual_plots(regression):
    document = report_lib.render_html(regression)
    assert_complete_report(document, classification=False)
    assert '<span class="badge fail">not blessed</span>' in document and "<h2>Drift" not in document


def test_per_class_metrics_match_their_definition():
    truth = Truth(("1", "2", "3", "4"), np.array(["a", "a", "b", "b"], dtype=object), ("a", "b"))
    scores = Scores(np.array(["a", "b", "b", "b"], dtype=object), np.zeros((4, 2)))
    rows = report_lib.per_class_metrics(truth, scores)
    assert rows[0] == ("a", 1.0, 0.5, pytest.approx(2 / 3), 2)
    assert rows[1] == ("b", pytest.approx(2 / 3), 1.0, pytest.approx(0.8), 2)
    metrics = reported_metrics(truth, scores)  # the report's table and the metrics: one definition
    assert rows[1][1:3] == (metrics["precision"], metrics["recall"])


def test_markdown_summary_has_the_verdict_checks_and_metrics(classification):
    text = report_lib.render_markdown(classification)
    assert text.startswith("# species on penguins\n\n**Blessed**: ")
    assert "| baseline | passed | beats the baseline: accuracy=" in text
    assert "| metric | candidate | baseline | reference |" in text
    assert "Rows: eval 20, test 0, train 80" in text


def test_the_fingerprint_covers_what_the_report_shows_not_where_the_run_wrote(classification, tmp_path):
    def written(inputs, name):
        return report_lib.write_report(inputs, str(tmp_path / f"{name}.html"), str(tmp_path / f"{name}.md"))

    first = written(classification, "a")
    moved = dataclasses.replace(classification, run={"checkpoint": "/elsewhere/model.ckpt-100"})
    assert written(moved, "b").fingerprint == first.fingerprint
    other = dataclasses.replace(classification, model_metrics={**classification.model_metrics, "log_loss": 0.31})
    assert written(other, "c").fingerprint != first.fingerprint


# -- slices, confidence intervals, feature importance --------------------------------------------------------------
@pytest.fixture(scope="module")
def findings():
    return penguin_findings()


def test_the_slice_table_lists_slices_worst_first_with_rows_metrics_and_results(findings):
    document = report_lib.render_html(findings)
    assert_complete_report(document, classification=True)
    table = document[document.index('<table id="slice-table">') : document.index("</table>", document.index("slice-"))]
    assert table.count("<tr") == 5  # the header, every eval row, three islands
    assert "<th>slice</th><th>rows</th><th>accuracy</th><th>log_loss</th><th>result</th>" in table
    assert '<tr><td>all eval rows</td><td class="n">120</td><td class="n">0.8750</td>' in table
    assert (
        '<tr class="unjudged"><td>island=Torgersen</td><td class="n">6</td><td class="n">0.6667</td>'
        '<td class="n">0.3820</td><td>too few rows, not judged</td></tr>'
    ) in table
    dream, biscoe = table.index("island=Dream"), table.index("island=Biscoe")
    assert table.index("island=Torgersen") < dream < biscoe  # the given order: worst first
    assert '<tr class="fail"><td>island=Dream</td><td class="n">62</td><td class="n">0.8548</td>' in table
    assert table[biscoe:].startswith('island=Biscoe</td><td class="n">52</td><td class="n">0.9231</td>')
    assert "A slice of fewer than 10 rows is shown but too few rows to judge." in document


def test_headline_metrics_show_their_intervals_and_the_paired_comparison(findings):
    document = report_lib.render_html(findings)
    assert '<tr><td>accuracy</td><td class="n">0.8750 [0.82, 0.93] 95%</td><td class="n">0.7833</td></tr>' in document
    assert "<p>Intervals: 95% bootstrap over the eval rows (200 replicates, seed 0).</p>" in document
    assert (
        "<p>Against the baseline, paired on the same rows: accuracy: candidate - baseline = +0.0917 "
        "[+0.0250, +0.1669] 95%: better</p>"
    ) in document


def test_importance_is_charted_and_tabled(findings):
    document = report_lib.render_html(findings)
    captions = [caption for caption, _ in images(document)]
    assert captions == CLASSIFICATION_PLOTS + IMPORTANCE_PLOTS
    for _, data in images(document)[-2:]:
        assert_valid_png(data)
    assert "<th>feature</th><th>permutation importance</th><th>std</th><th>integrated gradients</th>" in document
    row = '<tr><td>bill</td><td class="n">0.5611</td><td class="n">0.0039</td><td class="n">0.4853</td></tr>'
    assert row in document
    without = dict(findings.importance, attributions=None)
    assert [c for c, _ in report_lib.importance_plots(without)] == ["Permutation importance"]


def test_the_markdown_verdict_names_the_interval_the_worst_judged_slice_and_the_top_features(findings):
    text = report_lib.render_markdown(findings)
    assert (
        "- accuracy: 0.8750 [0.82, 0.93] 95% (bootstrap, 200 replicates, seed 0)\n"
        "- Against the baseline (paired, same rows): accuracy: candidate - baseline = +0.0917 \\[+0.0250, "
        "+0.1669\\] 95%: better\n"
        "- Worst judged slice: island=Dream (62 rows): accuracy 0.8548, FAILED\n"
        "- Top features (permutation importance, accuracy): bill 0.5611 ± 0.0039, flipper 0.0250 ± 0.0068, "
        "noise 0.0000 ± 0.0000\n"
    ) in text


def test_slice_and_feature_names_show_as_text(findings):
    slices = dict(findings.slices, slices=[dict(row, name=f"{HOSTILE}=1") for row in findings.slices["slices"]])
    permutation = [
        dict(p, feature=f"{HOSTILE}$\\frac$" if p["feature"] == "bill" else p["feature"])
        for p in findings.importance["permutation"]
    ]
    hostile = dataclasses.replace(
        findings, slices=slices, importance=dict(findings.importance, permutation=permutation)
    )
    document = report_lib.render_html(hostile)
    assert_html_shows(document, names=(f"{HOSTILE}=1", f"{HOSTILE}$\\frac$"))
    assert_markdown_shows(report_lib.render_markdown(hostile), names=(f"{HOSTILE}=1", f"{HOSTILE}$\\frac$"))


def test_both_report_inputs_carry_the_evaluations_findings(findings):
    evaluation = Evaluation(
        dict(findings.model_metrics),
        100,
        "/m/model.ckpt-100",
        findings.blessing,
        truth=findings.truth,
        candidate=findings.candidate,
        slices=findings.slices,
        intervals=findings.intervals,
        importance=findings.importance,
    )
    label = types.SimpleNamespace(name="species", task="classification")
    prepared = types.SimpleNamespace(schema=types.SimpleNamespace(label=label), manifest=findings.manifest)
    for shown in (
        report_lib.report_inputs(evaluation, prepared, run={}),
        report_lib.user_report_inputs(evaluation, {"label": "species"}, run={}),
    ):
        parts = (shown.slices, shown.intervals, shown.importance)
        assert parts == (findings.slices, findings.intervals, findings.importance)
        document = report_lib.render_html(shown)
        assert '<section id="slices">' in document and '<section id="importance">' in document
        assert "0.8750 [0.82, 0.93] 95%" in document
