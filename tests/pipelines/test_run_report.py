"""A local run's report.html: the evaluate stage's report with the skew check of the rows batch prediction scored
after it (`pipelines.local.summary.copy_report`), its names escaped."""

from __future__ import annotations

import types

from markup_checks import HOSTILE, assert_html_shows

from pipelines import runs
from pipelines.local import summary

WARNED = {
    "status": "warned",
    "mode": "warn",
    "summary": f"warned: 1 of 7 features skewed: `{HOSTILE}`: 31% of its values are a category never seen in training",
    "worst": [
        {
            "feature": HOSTILE,
            "figures": {"distance (PSI)": 1.2, "missing change": 0.0, "unseen share": 0.31},
            "breaches": ["unseen share", "distance (PSI)"],
            "reading": f"`{HOSTILE}`: 31% of its values are a category never seen in training",
        }
    ],
    "predictions": "predicted class Gentoo: 61% of the scored rows, 36% of the eval rows the model was blessed on",
    "warning": "skew check warned: ...",
}
PAGE = "<!DOCTYPE html><html><head></head><body><h1>r</h1><h2>Metrics</h2><p>m</p><h2>Data</h2><p>d</p></body></html>"


def _outputs(tmp_path, skew):
    report = tmp_path / "report.html"
    report.write_text(PAGE, encoding="utf-8")
    predictions = types.SimpleNamespace(uri=str(tmp_path / "predictions"), metadata={"skew": skew} if skew else {})
    return {"report": types.SimpleNamespace(uri=str(report)), "predictions": predictions}


def test_the_run_report_shows_the_skew_check_before_the_data(tmp_path):
    folder = runs.RunFolder(str(tmp_path / "out"), "20261207T000000Z-abcdef")
    path = summary.copy_report(_outputs(tmp_path, WARNED), folder)
    with open(path, encoding="utf-8") as f:
        page = f.read()
    parsed = assert_html_shows(page, names=(HOSTILE, "unseen share 0.31, distance (PSI) 1.2", "Gentoo: 61%"))
    assert page.index('<section id="skew">') > page.index("<h2>Metrics</h2>")
    assert page.index('<section id="skew">') < page.index("<h2>Data</h2>")
    assert "predict.skew=warn" in parsed.text and str(tmp_path / "predictions" / "skew.json") in parsed.text


def test_without_a_skew_check_the_run_report_is_the_evaluate_stages(tmp_path):
    folder = runs.RunFolder(str(tmp_path / "out"), "20261207T000000Z-abcdef")
    with open(summary.copy_report(_outputs(tmp_path, None), folder), encoding="utf-8") as f:
        assert f.read() == PAGE  # predict.skew=off
