"""The evaluation report: every section, valid embedded images, nothing fetched from the network."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from report_checks import assert_complete_report

from estimator_lib.evaluation import Blessing, Check, Scores, Truth, reported_metrics
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
    other = dataclasses.replace(classification, model_metrics={**classification.model_metrics, "mean_loss": 0.31})
    assert written(other, "c").fingerprint != first.fingerprint
