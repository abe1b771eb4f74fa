"""End to end: a CSV with 8 rows missing the label runs with default settings and reports 8 unlabelled rows.

The embedded penguins with 8 labels blanked ("" and NA): `run-local --data X.csv --label species --output TMP`
exits 0; the rows are set aside (in no split), the prepared dataset's manifest counts them and holds their cells
in unlabelled.jsonl, and summary.json, the console and show say so (a note, and the data line's count).
Slow: `pytest -m "not slow"` skips it.
"""

from __future__ import annotations

import csv
import json
import os
import subprocess
import sys

import pytest

from estimator_lib.data.embedded import default_dataset

pytestmark = pytest.mark.slow

TPU_PIPELINE = os.path.join(os.path.dirname(sys.executable), "tpu-pipeline")
BLANKED = [3, 40, 77, 100, 150, 200, 250, 300]  # data rows (0-based) whose label goes
NOTE = "8 row(s) have no label (data.csv lines 5, 42, 79, 102, 152, 202, 252, 302): set aside"


def penguins_without_8_labels(path) -> str:
    d = default_dataset()
    with open(d.path, newline="", encoding="utf-8") as f:
        header, *rows = list(csv.reader(f))
    for n, i in enumerate(BLANKED):
        rows[i][header.index(d.label)] = "" if n % 2 else "NA"
    with open(path, "w", newline="", encoding="utf-8") as f:
        csv.writer(f).writerows([header, *rows])
    return str(path)


def data_line(console: str) -> str:
    """The console's (or show's) one data line: rows, per split, then the unlabelled rows."""
    (line,) = [line for line in console.splitlines() if line.startswith("  data: ")]
    return line


def test_rows_missing_the_label_are_set_aside_and_reported(tmp_path):
    data = penguins_without_8_labels(tmp_path / "data.csv")
    output = str(tmp_path / "out")
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2")
    command = [TPU_PIPELINE, "run-local", "--data", data, "--label", "species", "--output", output]
    ran = subprocess.run(command, cwd=tmp_path, capture_output=True, text=True, timeout=900, env=env, check=False)
    assert ran.returncode == 0, ran.stdout[-4000:] + ran.stderr[-4000:]
    assert NOTE in ran.stdout and data_line(ran.stdout).endswith("), 8 unlabelled (set aside)")

    with open(os.path.join(output, "summary.json"), encoding="utf-8") as f:
        summary = json.load(f)
    assert summary["data"]["rows"] == 344 and sum(summary["data"]["counts"].values()) == 336
    assert any(note.startswith(NOTE) for note in summary["data"]["notes"])
    assert summary["data"]["quarantined"] == 0 and summary["data"]["unlabelled"] == 8
    dataset = os.path.dirname(summary["dataset"]["schema_uri"])
    with open(os.path.join(dataset, "manifest.json"), encoding="utf-8") as f:
        manifest = json.load(f)
    assert manifest["rows"]["unlabelled"] == 8
    assert manifest["unlabelled_lines"] == {"data.csv": [i + 2 for i in BLANKED]}
    with open(os.path.join(dataset, "unlabelled.jsonl"), encoding="utf-8") as f:
        assert [json.loads(line)["species"] for line in f] == ["NA", "", "NA", "", "NA", "", "NA", ""]

    shown = subprocess.run([TPU_PIPELINE, "show", "--output", output], capture_output=True, text=True, check=False)
    assert shown.returncode == 0 and NOTE in shown.stdout, shown.stdout + shown.stderr
    assert data_line(shown.stdout) == data_line(ran.stdout)
