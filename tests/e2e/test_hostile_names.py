"""End to end: a CSV whose label, a column and a class are named with markup (`<img src=x onerror=alert(1)>|x`)
goes through `run-local`, and every Markdown and HTML file the run wrote shows the names as text: parsed, no
element with an event handler, no image but the report's embedded plots, table rows with their header's cells.

Slow (a minute or so): `pytest -m "not slow"` skips it.
"""

from __future__ import annotations

import csv
import json
import os
import subprocess
import sys

import pytest
from markup_checks import HOSTILE, assert_html_shows, assert_markdown_shows
from repo import ROOT
from report_checks import CURVES_PLOTS, IMPORTANCE_PLOTS

pytestmark = pytest.mark.slow

COLUMN = "<img src=y onerror=alert(2)>|y"  # a categorical feature column's name
CLASSES = (HOSTILE, "plain", "_b$\\frac$")  # the label's values: markup, a plain one, one matplotlib mistook


def write_rows(path: str, n: int = 150, marked: int = 5) -> str:
    """x in [0, 3) decides the class; the markup column holds the class name, or its own name in every
    `marked`-th row (four values: with `prepare.max_vocabulary_size=2` the cap warns, naming the column)."""
    with open(path, "w", encoding="utf-8", newline="") as f:
        writer = csv.writer(f, lineterminator="\n")
        writer.writerow(["x", COLUMN, HOSTILE])
        for i in range(n):
            label = CLASSES[i % 3]
            writer.writerow([f"{i % 3 + (i % 7) / 10:.1f}", COLUMN if i % marked == 0 else label, label])
    return path


def run_local(output: str, *args: str) -> subprocess.CompletedProcess:
    """`python -m pipelines run-local` of this checkout, which must succeed."""
    command = [sys.executable, "-m", "pipelines", "run-local", "--output", output, *args]
    command += ["--set", "training.train_steps=20", "--set", "prepare.num_workers=1"]
    command += ["--set", "prepare.max_vocabulary_size=2"]
    # The rows are made for their names: 'x' gives the label away, and 20 steps do not reach the linear
    # reference. The first run must publish, so the second validates its data against the first's.
    command += ["--set", "blessing.allow_leakage=x", "--set", "blessing.reference_margin=null"]
    pythonpath = os.pathsep.join([ROOT, os.environ.get("PYTHONPATH", "")])
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", PYTHONPATH=pythonpath)
    proc = subprocess.run(command, capture_output=True, text=True, env=env, timeout=900, check=False)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    return proc


def summary_of(output: str) -> dict:
    with open(os.path.join(output, "summary.json"), encoding="utf-8") as f:
        return json.load(f)


@pytest.fixture(scope="module")
def hostile_runs(tmp_path_factory):
    """A first run, then a second that continues its published model on drifted rows (`validation.on_breach=warn`:
    the data validation report then lists every feature, the markup column among them): (stdout, summary) each."""
    root = tmp_path_factory.mktemp("hostile")
    output = str(root / "out")
    first = run_local(output, "--data", write_rows(str(root / "rows.csv")), "--label", HOSTILE)
    first_summary = summary_of(output)
    drifted = write_rows(str(root / "drifted.csv"), marked=2)
    second = run_local(
        output, "--data", drifted, "--label", HOSTILE, "--warm-start", "latest", "--set", "validation.on_breach=warn"
    )
    return [(first.stdout, first_summary), (second.stdout, summary_of(output))]


def markup_files(run_dir: str) -> tuple:
    """(HTML files, Markdown files) the run wrote, found by content (KFP artifacts have no file extension)."""
    pages, documents = [], []
    for directory, _, names in os.walk(run_dir):
        for name in names:
            path = os.path.join(directory, name)
            with open(path, "rb") as f:
                start = f.read(16)
            if start.startswith(b"<!DOCTYPE html"):
                pages.append(path)
            elif start.startswith(b"# "):
                documents.append(path)
    return sorted(pages), sorted(documents)


def read(path: str) -> str:
    with open(path, encoding="utf-8") as f:
        return f.read()


def test_the_runs_kept_the_names_as_written_and_warned_of_the_capped_column(hostile_runs):
    (first_stdout, first), (_, second) = hostile_runs
    for summary in (first, second):
        assert summary["status"] == "ok" and summary["config"]["label"] == HOSTILE
    assert second["validation"]["status"] == "warned" and COLUMN in second["validation"]["summary"]
    notes = first["data"]["notes"]
    assert len(notes) == 1 and notes[0].startswith(
        f"column {COLUMN!r}: vocabulary capped: 4 distinct values in the training split, the 2 most frequent kept"
    )
    assert f"  warning: {notes[0]}" in first_stdout.splitlines()


def test_every_html_file_the_runs_wrote_shows_the_names_as_text(hostile_runs):
    for _, summary in hostile_runs:
        pages, _ = markup_files(summary["run"]["dir"])
        assert pages == sorted([summary["report"], summary["artifacts"]["report"]])
        for page in pages:
            parsed = assert_html_shows(read(page), names=(HOSTILE, COLUMN) + CLASSES)
            images = [attrs["alt"] for tag, attrs in parsed.elements if tag == "img"]
            # importance charts name the user's features too; the loss curves name none
            performance = [alt for alt in images if alt not in IMPORTANCE_PLOTS + CURVES_PLOTS]
            assert performance == ["Confusion matrix", "ROC curves", "Precision-recall curves", "Calibration"], page


def test_every_markdown_file_the_runs_wrote_shows_the_names_as_text(hostile_runs):
    for _, summary in hostile_runs:
        _, documents = markup_files(summary["run"]["dir"])
        verdict, validation = summary["artifacts"]["verdict"], summary["validation"]["report_uri"]
        assert documents == sorted([verdict, validation])
        assert_markdown_shows(read(verdict), names=(HOSTILE,))
    validation = hostile_runs[1][1]["validation"]["report_uri"]
    assert_markdown_shows(read(validation), names=(COLUMN,))
