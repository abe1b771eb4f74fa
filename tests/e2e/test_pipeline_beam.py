"""End to end with `--engine beam`: the README's local run with preparation and batch prediction on Apache
Beam's DirectRunner; the prepared data is the in-process preparation's, byte for byte (its manifest
fingerprint), and batch prediction scored the exported CPU SavedModel. Slow (a minute or two)."""

from __future__ import annotations

import json
import os

import pytest
from run_fingerprints import compared
from test_pipeline import load_summary, prediction_rows, run_cli

from estimator_lib.config import PrepareConfig
from estimator_lib.data.embedded import default_dataset
from estimator_lib.data.prepare import prepare

pytestmark = pytest.mark.slow
pytest.importorskip("apache_beam")


def test_run_local_with_the_beam_engine(tmp_path):
    output = str(tmp_path / "run")
    proc = run_cli("run-local", "--engine", "beam", "--output", output)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    summary = load_summary(output)
    assert summary["config"]["engine"] == "beam" and summary["config"]["beam_options"] == {"runner": "DirectRunner"}

    with open(os.path.join(summary["artifacts"]["prepare"], "manifest.json"), encoding="utf-8") as f:
        beam_manifest = json.load(f)
    penguins = default_dataset()
    here = prepare(PrepareConfig(data=(penguins.path,), label=penguins.label), str(tmp_path / "inprocess"))
    assert beam_manifest["fingerprint"] == here.manifest["fingerprint"]

    with open(os.path.join(summary["predictions"]["uri"], "manifest.json"), encoding="utf-8") as f:
        predictions = json.load(f)
    assert predictions["source"]["kind"] == "saved_model"
    assert (
        predictions["count"]
        == summary["dataset"]["counts"]["eval"]
        == len(prediction_rows(summary["predictions"]["uri"]))
    )
    assert "dataset" in compared("beam", summary)  # the recorded bytes (tests/run_fingerprints.py)
