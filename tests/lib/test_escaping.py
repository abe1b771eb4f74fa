"""A name a user wrote (column, label, class, file) shows as text in every Markdown and HTML output, checked by
parsing them: the evaluation report (HTML) and its verdict (Markdown), the data validation report, and the
validation report of a user's own records."""

from __future__ import annotations

import csv
import json

import numpy as np
import pytest
import tensorflow as tf
from markup_checks import HOSTILE, assert_html_shows, assert_markdown_shows, markdown_table_cells

from estimator_lib.config import PrepareConfig, ValidationConfig
from estimator_lib.data import validation
from estimator_lib.data.common import markdown_text
from estimator_lib.data.prepare import prepare
from estimator_lib.evaluation import Blessing, Check, Scores, Truth, reported_metrics
from estimator_lib.evaluation import report as report_lib
from estimator_lib.model.user import prepare as user_prepare

COLUMN = "<img src=y onerror=alert(2)>|y"  # a second hostile name, for a feature column beside the label
OTHER = "_b$\\frac$"  # a class matplotlib would hide from a legend ("_") or fail to draw as mathtext ("$")


@pytest.mark.parametrize(
    "name, escaped",
    [
        (HOSTILE, "&lt;img src=x onerror=alert(1)&gt;\\|x"),
        ("a\\b`c`*d*_e_[f](g) #h", "a\\\\b\\`c\\`\\*d\\*\\_e\\_\\[f\\](g) \\#h"),
        ("tom & jerry &amp;", "tom &amp; jerry &amp;amp;"),
        ("two\nlines\r\nhere", "two lines  here"),
        ("bill length (mm)", "bill length (mm)"),
    ],
)
def test_markdown_text_escapes_every_character_that_starts_markup(name, escaped):
    assert markdown_text(name) == escaped


def test_an_escaped_pipe_keeps_its_cell_and_an_escaped_backslash_does_not_eat_the_next_pipe():
    table = f"| a | b |\n|---|---|\n| {markdown_text('x|y')} | {markdown_text('z' + chr(92))} |\n"
    assert markdown_table_cells(table) == [[2, 2, 2]]
    assert_markdown_shows(table, names=("x|y", "z\\"))


# -- the evaluation report --------------------------------------------------------------------------------------
@pytest.fixture
def hostile_inputs():
    """What an evaluate stage shows for a label, a class and a column named with markup (real scores)."""
    classes = (HOSTILE, OTHER, "c")  # three: the metrics then name each class ("recall/<class>")
    labels = np.array([classes[i % 3] for i in range(21)], dtype=object)
    probabilities = np.array([[0.6, 0.2, 0.2] if i % 4 else [0.2, 0.5, 0.3] for i in range(21)])
    predicted = np.array([classes[i] for i in probabilities.argmax(axis=1)], dtype=object)
    truth = Truth(tuple(f"k{i}" for i in range(21)), labels, classes)
    candidate = Scores(predicted, probabilities)
    metrics = reported_metrics(truth, candidate)
    metric = f"recall/{HOSTILE}"
    check = Check("minimum", metric, metrics[metric], 0.9, False, f"{metric}={metrics[metric]:.4f} < 0.9 fails")
    blessing = Blessing(False, (check,), {metric: metrics[metric]}, metric, 21)
    manifest = {
        "counts": {"train": 60, "eval": 20},
        "missing": {"train": {COLUMN: 1}, "eval": {COLUMN: 0}},
        "class_counts": {"train": {HOSTILE: 20, OTHER: 20, "c": 20}, "eval": {HOSTILE: 7, OTHER: 7, "c": 7}},
        "notes": [f"column {COLUMN!r} is constant (1.0) in the training split (std 1 used)"],
    }
    return report_lib.ReportInputs(
        title=f"{HOSTILE} (classification): model at step 20",
        blessing=blessing,
        truth=truth,
        candidate=candidate,
        model_metrics=metrics,
        manifest=manifest,
        drift={COLUMN: {"distance (PSI)": 0.5}},
        run={"data": f"/data/{HOSTILE}.csv", "config": {"prepare": {"label": HOSTILE}}},
    )


def test_the_html_report_shows_every_user_name_as_text(hostile_inputs):
    document = report_lib.render_html(hostile_inputs)
    parsed = assert_html_shows(document, names=(HOSTILE, COLUMN, OTHER, f"/data/{HOSTILE}.csv"))
    title = document[document.index("<title>") + 7 : document.index("</title>")]
    assert title == "&lt;img src=x onerror=alert(1)&gt;|x (classification): model at step 20"
    images = [attrs for tag, attrs in parsed.elements if tag == "img"]
    assert [attrs["alt"] for attrs in images] == [
        "Confusion matrix",
        "ROC curves",
        "Precision-recall curves",
        "Calibration",
    ]
    per_class = "<tr><td>&lt;img src=x onerror=alert(1)&gt;|x</td>"
    assert per_class in document  # the per-class table's first row names the class, escaped


def test_the_markdown_verdict_shows_every_user_name_as_text(hostile_inputs):
    text = report_lib.render_markdown(hostile_inputs)
    assert_markdown_shows(text, names=(HOSTILE, f"recall/{HOSTILE}"))
    assert text.splitlines()[0] == "# &lt;img src=x onerror=alert(1)&gt;\\|x (classification): model at step 20"
    assert markdown_table_cells(text) == [[3, 3, 3], [2, 2, 2]]


# -- the data validation report ---------------------------------------------------------------------------------
def _write(path, rows):
    with open(path, "w", encoding="utf-8", newline="") as f:
        writer = csv.writer(f, lineterminator="\n")
        writer.writerow([HOSTILE, COLUMN, "x"])
        writer.writerows(rows)
    return str(path)


def test_the_data_validation_report_shows_feature_names_and_the_reference_as_text(tmp_path):
    def prepared(name, shift):
        rows = [[HOSTILE if i % 2 else "b", f"v{i % 3 + shift}", i * (1 + shift)] for i in range(40)]
        config = PrepareConfig(data=(_write(tmp_path / f"{name}.csv", rows),), label=HOSTILE, num_workers=1)
        return prepare(config, str(tmp_path / name))

    reference, new = prepared("reference", 0), prepared("new", 2)
    uri = f"gs://models/{HOSTILE}/v1"
    report = validation.validate_data(
        reference.profile(), new.profile(), ValidationConfig(), uri, new_columns=[f"{COLUMN} new"]
    )
    assert report.status == validation.FAILED and f"{COLUMN}: unseen share 0.625 beyond 0.1" in report.summary()
    text = report.markdown()
    assert_markdown_shows(text, names=(COLUMN, f"{COLUMN} new", uri))
    assert "| &lt;img src=y onerror=alert(2)&gt;\\|y | unseen share | 0.625 | 0.1 |" in text
    assert "Reference: gs://models/&lt;img src=x onerror=alert(1)&gt;\\|x/v1, 29 training rows" in text


# -- a user's own records ---------------------------------------------------------------------------------------
def _example(label: str, values) -> bytes:
    feature = {
        HOSTILE: tf.train.Feature(bytes_list=tf.train.BytesList(value=[label.encode("utf-8")])),
        COLUMN: tf.train.Feature(float_list=tf.train.FloatList(value=values)),
    }
    return tf.train.Example(features=tf.train.Features(feature=feature)).SerializeToString()


def test_the_records_validation_report_shows_feature_and_class_names_as_text(tmp_path):
    path = tmp_path / "records.tfrecord"
    with tf.io.TFRecordWriter(str(path)) as writer:
        for i in range(30):
            writer.write(_example(HOSTILE if i % 3 else OTHER, [float(i), 1.0]))
    spec = tmp_path / "spec.json"
    spec.write_text(json.dumps({HOSTILE: {"dtype": "bytes", "shape": []}, COLUMN: {"dtype": "float32", "shape": [2]}}))
    config = PrepareConfig(data=(str(path),), label=HOSTILE, feature_spec=str(spec), eval_fraction=0.3)
    prepared = user_prepare.prepare_records(config, str(tmp_path / "prepared"))
    text = user_prepare.validation_markdown(prepared)
    assert_markdown_shows(text, names=(HOSTILE, COLUMN, OTHER))
    assert "| &lt;img src=y onerror=alert(2)&gt;\\|y | input | float32 | [2] |" in text
    assert "| \\_b$\\\\frac$ | " in text
    assert markdown_table_cells(text) == [[2, 2, 2, 2], [4, 4, 4, 4], [3, 3, 3, 3]]
