"""The evaluation report: every section, valid embedded images, nothing fetched from the network."""

from __future__ import annotations

import dataclasses
import re
import types

import numpy as np
import pytest
from markup_checks import HOSTILE, assert_html_shows, assert_markdown_shows
from report_checks import (
    CLASSIFICATION_PLOTS,
    CURVES_PLOTS,
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
    header = "<th>candidate</th><th>baseline (last published)</th><th>candidate - baseline</th><th>reference</th>"
    assert header in document
    assert "Missing values (imputed)" in document and "Class balance" in document and "abc123" in document
    assert "<h2>Slices" not in document and "<h2>Feature importance" not in document and "Intervals:" not in document
    assert '<section id="header">' not in document and '<section id="curves">' not in document
    assert '<section id="worst-rows">' not in document


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
    # The preflight is timed on the machine that trained: shown, but two runs' reports still compare equal.
    timed = dataclasses.replace(classification, preflight=["TPU preflight (v5e-8): step 4.1 ms (compiled in 2.3 s)"])
    assert (
        "TPU preflight (v5e-8)" in report_lib.render_html(timed)
        and written(timed, "t").fingerprint == first.fingerprint
    )
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
        '<td class="n">0.3820</td><td>too few rows to judge either way</td></tr>'
    ) in table
    dream, biscoe = table.index("island=Dream"), table.index("island=Biscoe")
    assert table.index("island=Torgersen") < dream < biscoe  # the given order: worst first
    assert '<tr class="fail"><td>island=Dream</td><td class="n">62</td><td class="n">0.8548</td>' in table
    assert table[biscoe:].startswith('island=Biscoe</td><td class="n">52</td><td class="n">0.9231</td>')
    assert "A slice of fewer than 10 rows is judged by the bootstrap interval of its metric" in document


def test_headline_metrics_show_their_intervals_and_the_change_against_the_baseline(findings):
    document = report_lib.render_html(findings)
    assert (
        "<tr><th>metric</th><th>candidate</th><th>baseline (last published)</th><th>candidate - baseline</th>"
        "<th>paired 95% interval</th><th>verdict</th></tr>"
        '<tr><td>accuracy</td><td class="n">0.8750 [0.82, 0.93] 95%</td><td class="n">0.7833</td>'
        '<td class="n">+0.0917</td><td class="n">[+0.0250, +0.1669]</td><td>better</td></tr></table>'
    ) in document
    assert "<p>Intervals: 95% bootstrap over the eval rows (200 replicates, seed 0).</p>" in document
    assert "candidate - baseline = " not in document  # the paired interval is in the table, not repeated


def test_the_change_against_the_baseline_covers_every_headline_metric(regression):
    both = dataclasses.replace(
        regression.blessing,
        candidate_metrics={"r2": 0.912345, "rmse": 1.0},
        baseline_metrics={"r2": 0.9, "rmse": 1.04321},
    )
    document = report_lib.render_html(dataclasses.replace(regression, blessing=both))
    assert (
        '<tr><td>r2</td><td class="n">0.9123</td><td class="n">0.9000</td><td class="n">+0.0123</td></tr>'
        '<tr><td>rmse</td><td class="n">1.0000</td><td class="n">1.0432</td><td class="n">-0.0432</td></tr>'
    ) in document
    assert "paired" not in document  # no intervals: no paired column


# -- the header, the loss curves, the worst rows ---------------------------------------------------------------
def test_the_header_gives_the_run_its_date_duration_data_code_and_model(findings):
    document = report_lib.render_html(findings)
    section = document[document.index('<section id="header">') : document.index("</section>")]
    assert section == (
        '<section id="header"><h2>This run</h2><table class="facts"><tr><th>what</th><th>value</th></tr>'
        "<tr><td>run</td><td>tpu-estimator-pipeline-20261125T211912Z-a1b2c3</td></tr>"
        "<tr><td>started</td><td>2026-11-25 21:19:12 UTC</td></tr>"
        "<tr><td>duration so far</td><td>2 min 35 s (prepare, train, evaluate until this report; batch prediction, "
        "export, the serving check and release run after it)</td></tr>"
        "<tr><td>data</td><td>penguins.csv (480 rows)</td></tr>"
        "<tr><td>data fingerprint</td><td>9f2c41d07be3</td></tr>"
        "<tr><td>code</td><td>commit 2f05c19a1b2c</td></tr>"
        "<tr><td>model</td><td>dnn family</td></tr></table>"
    )


@pytest.mark.parametrize(
    "started, written, shown",
    [
        ("2026-11-25T21:19:12+00:00", "2026-11-25T21:19:15+00:00", "3 s"),
        ("2026-11-25T21:19:12+00:00", "2026-11-25T21:21:47+00:00", "2 min 35 s"),
        ("2026-11-25T20:19:12+00:00", "2026-11-25T21:21:07+00:00", "1 h 01 min 55 s"),
        ("2026-11-25T21:19:12+00:00", "2026-11-25T21:19:11+00:00", "0 s"),  # clocks of two machines
    ],
)
def test_durations_read_as_hours_minutes_and_seconds(started, written, shown):
    assert report_lib._duration(started, written) == shown


def test_the_curves_mark_the_selected_step(findings):
    document = report_lib.render_html(findings)
    section = document[document.index('<section id="curves">') :]
    assert section.startswith(
        "<section id=\"curves\"><h2>Training curves</h2><p>Training loss: each logged batch's (TensorBoard's "
        "training loss). Validation loss: over every validation row after each round. The evaluated model is the "
        "checkpoint of step 600, the lowest validation loss.</p>"
    )
    captions = [caption for caption, _ in images(document)]
    assert captions == IMPORTANCE_PLOTS + CURVES_PLOTS + CLASSIFICATION_PLOTS
    assert_valid_png(images(document)[2][1])
    newest = dict(findings.curves, validation=[], best_step=None)
    assert "No validation split: the evaluated model is the last checkpoint." in report_lib._curves_section(newest)


def test_the_worst_rows_show_their_input_line_prediction_and_values(findings):
    document = report_lib.render_html(findings)
    table = document[
        document.index('<table id="worst-rows-table">') : document.index("</table>", document.index("worst-rows-table"))
    ]
    assert table.count("<tr") == 11  # the header and 10 rows
    assert (
        "<tr><th>key</th><th>input</th><th>label</th><th>predicted</th><th>probability</th><th>log loss</th>"
        "<th>bill</th><th>flipper</th><th>noise</th><th>island</th></tr>"
        '<tr><td>k79</td><td>penguins.csv line 81</td><td>Chinstrap</td><td>Gentoo</td><td class="n">0.9625</td>'
        '<td class="n">3.2833</td><td class="n">1.9</td><td class="n">0.79</td><td class="n">0.68</td>'
        "<td>Biscoe</td></tr>"
    ) in table
    losses = [
        float(x) for x in re.findall(r'<td class="n">[0-9.]+</td><td class="n">([0-9.]+)</td><td class="n">', table)
    ]
    assert len(losses) == 10 and losses == sorted(losses, reverse=True)
    assert "The 10 eval rows of highest log loss, worst first" in document


def test_a_worst_row_without_a_recorded_line_or_value_says_so(regression):
    row = {"key": "r1", "label": 3.0, "predicted": 5.5, "probability": None, "loss": 2.5, "source": None}
    document = report_lib.render_html(dataclasses.replace(regression, worst_rows=[{**row, "values": {"x": None}}]))
    assert (
        "<tr><th>key</th><th>input</th><th>label</th><th>predicted</th><th>absolute error</th><th>x</th></tr>"
        '<tr><td>r1</td><td>not recorded</td><td class="n">3.0000</td><td class="n">5.5000</td>'
        '<td class="n">2.5000</td><td>missing</td></tr>'
    ) in document


def test_the_fingerprint_leaves_out_the_header(findings, tmp_path):
    first = report_lib.write_report(findings, str(tmp_path / "a.html"), str(tmp_path / "a.md"))
    later = dataclasses.replace(findings.header, run="another", written="2026-11-26T00:00:00+00:00")
    moved = dataclasses.replace(findings, header=later)
    assert report_lib.write_report(moved, str(tmp_path / "b.html"), str(tmp_path / "b.md")).fingerprint == (
        first.fingerprint
    )


def test_importance_is_charted_and_tabled(findings):
    document = report_lib.render_html(findings)
    captions = [caption for caption, _ in images(document)]
    assert captions == IMPORTANCE_PLOTS + CURVES_PLOTS + CLASSIFICATION_PLOTS
    for _, data in images(document)[:2]:
        assert_valid_png(data)
    assert "<th>feature</th><th>permutation importance</th><th>std</th><th>integrated gradients</th>" in document
    row = '<tr><td>bill</td><td class="n">0.5611</td><td class="n">0.0039</td><td class="n">0.4853</td></tr>'
    assert row in document
    without = dict(findings.importance, attributions=None)
    assert [c for c, _ in report_lib.importance_plots(without)] == ["Permutation importance"]


def test_the_markdown_verdict_names_the_interval_the_worst_judged_slice_and_the_top_features(findings):
    text = report_lib.render_markdown(findings)
    assert "20261125T211912Z" not in text and "| check | result | reason |" in text  # no header: reproducible
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
    header = dataclasses.replace(findings.header, run=HOSTILE, data=((HOSTILE, 1),), model=f"your model_fn {HOSTILE}")
    worst = [
        dict(row, key=HOSTILE, source={"file": HOSTILE, "line": 2}, values={**row["values"], "island": HOSTILE})
        for row in findings.worst_rows
    ]
    permutation = [
        dict(p, feature=f"{HOSTILE}$\\frac$" if p["feature"] == "bill" else p["feature"])
        for p in findings.importance["permutation"]
    ]
    hostile = dataclasses.replace(
        findings,
        slices=slices,
        importance=dict(findings.importance, permutation=permutation),
        header=header,
        worst_rows=worst,
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


# -- every check that decided, missing cells that say why, captions of the task -------------------------------------
LEAKAGE_SCORES = {"x": {"r2": 0.2, "skill": 0.2}, "y": {"r2": 0.35, "skill": 0.35}}


def test_a_leakage_check_that_passed_without_a_check_of_its_own_is_a_row_of_the_checks_table(regression):
    scored = dataclasses.replace(regression.blessing, blessed=True, leakage=LEAKAGE_SCORES)
    document = report_lib.render_html(dataclasses.replace(regression, blessing=scored, leakage_threshold=0.99))
    assert (
        '<tr><td>leakage</td><td>skill</td><td class="n">0.3500</td><td class="n">0.9900</td><td>passed</td>'
        "<td>no feature alone predicts the label: the most predictive, &#x27;y&#x27;, removes 0.3500 of the trivial "
        "model&#x27;s errors (blessing.leakage_threshold=0.99)</td></tr>"
    ) in document
    assert '<span class="badge ok">blessed</span> blessed: every check holds' in document
    assert "| leakage | passed | no feature alone predicts the label: the most predictive, " in (
        report_lib.render_markdown(dataclasses.replace(regression, blessing=scored, leakage_threshold=0.99))
    )


def test_no_leakage_row_without_scores_or_beside_a_leakage_check_of_its_own(regression):
    assert report_lib.leakage_rows(regression.blessing, 0.99) == []  # not checked (a user model, or turned off)
    found = Check("leakage", "r2", 0.999, 0.99, False, "leakage: feature 'x' alone predicts the label ...")
    flagged = dataclasses.replace(regression.blessing, checks=(found,), leakage=LEAKAGE_SCORES)
    assert report_lib.leakage_rows(flagged, 0.99) == []
    empty = dataclasses.replace(regression.blessing, leakage={})
    assert report_lib.leakage_rows(empty, 0.99)[0][-1] == "no feature scored: the eval rows hold one label"


def test_missing_metric_cells_say_why(regression):
    inputs = dataclasses.replace(regression, reference_metrics={"r2": 0.5})
    rows = re.findall(r"<tr><td>(rmse|r2)</td>(.*?)</tr>", report_lib.render_html(inputs))
    assert rows == [
        (
            "r2",
            "<td>undefined here</td><td>not recorded by the baseline</td><td>n/a: not in both</td>"
            '<td class="n">0.5000</td>',
        ),
        (
            "rmse",
            '<td class="n">1.0000</td><td class="n">0.9000</td><td class="n">+0.1000</td>'
            "<td>not computed for the reference</td>",
        ),
    ]
    assert "| r2 | n/a | n/a | 0.5000 |" in report_lib.render_markdown(inputs)


def test_a_report_without_a_baseline_says_why(regression):
    alone = dataclasses.replace(regression.blessing, baseline_uri=None, baseline_metrics=None)
    why = "nothing is published under /out/published yet"
    document = report_lib.render_html(dataclasses.replace(regression, blessing=alone, no_baseline=why))
    assert f"<p>No baseline column: {why}.</p>" in document and "<th>baseline (last published)</th>" not in document


def test_a_feature_without_an_attribution_says_why(findings):
    attributions = dict(findings.importance["attributions"], not_attributed=["flipper"])
    attributions["features"] = [a for a in attributions["features"] if a["feature"] != "flipper"]
    document = report_lib.render_html(
        dataclasses.replace(findings, importance=dict(findings.importance, attributions=attributions))
    )
    assert re.search(
        r"<tr><td>flipper</td>.*?<td>not attributed: no gradient \(a categorical id has none\)</td>", document
    )


def test_regression_captions_speak_of_errors_not_classes(regression, findings):
    row = {"key": "r1", "label": 3.0, "predicted": 5.5, "probability": None, "loss": 2.5, "source": None}
    document = report_lib.render_html(dataclasses.replace(regression, worst_rows=[{**row, "values": {"x": 1.0}}]))
    body = document[document.index("</style>") :]
    shown = re.sub(r"<[^>]+>", " ", body) + " ".join(re.findall(r'alt="([^"]*)"', body))  # the text and captions
    for word in ("class", "probabilit", "accuracy", "log loss"):
        assert word not in shown.lower(), word
    assert "(probability: of the predicted class)" in report_lib.render_html(findings)


def test_the_run_config_is_folded(classification):
    document = report_lib.render_html(classification)
    assert "<details><summary>config</summary><pre>" in document
    assert "<details><summary>fingerprints</summary><pre>" in document
