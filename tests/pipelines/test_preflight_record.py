"""Strict mode's preflight in a run's record: the train stage writes preflight.json beside strict.json, the summary's
`strict.preflight` carries its verdict line, `show` prints it under the TPU-strict line, and the report shows its
block."""

from __future__ import annotations

import html
import json
import os

import pytest

from pipelines import cli, runs, show
from pipelines.run_summary import RunSummary

with open(os.path.join(os.path.dirname(__file__), "recorded_summary.json"), encoding="utf-8") as f:
    RECORDED = json.load(f)  # a real run's summary.json, its paths under /out
LINE = (
    "preflight v3-8: fits (peak 345 KiB of 16 GiB per core; largest per-core batch >= 65536); step >= 3.12 us; "
    "input 1,100,941 ex/s needed 64,000: keeps up"
)
PREFLIGHT = {"tpu_type": "v3-8", "verdict": "fits", "line": LINE, "uri": "/out/t/model/preflight.json"}


def test_the_summary_reads_the_preflight_and_show_prints_its_line_under_the_strict_line(tmp_path, capsys):
    summary = RunSummary.from_dict({**RECORDED, "strict": {**RECORDED["strict"], "preflight": PREFLIGHT}})
    assert summary.results.strict.preflight.verdict == "fits"
    assert json.loads(summary.to_json())["strict"]["preflight"] == PREFLIGHT
    assert (
        RunSummary.read(os.path.join(os.path.dirname(__file__), "recorded_summary.json")).results.strict.preflight
        is None
    )
    folder = runs.RunFolder(str(tmp_path), summary.run.id)
    folder.create()
    runs.publish_summary(folder, summary)
    assert cli.main(["show", folder.path]) == 0
    lines = capsys.readouterr().out.splitlines()
    strict = lines.index(f"  {show.strict_line(summary.results.strict)}")
    assert lines[strict + 1] == f"  {LINE}"


@pytest.mark.slow
def test_a_local_run_records_the_train_stages_preflight(tmp_path, capsys):
    output = str(tmp_path / "out")
    assert cli.main(["run-local", "--output", output, "--set", "training.train_steps=20"]) == 0
    summary = RunSummary.read(os.path.join(output, runs.SUMMARY_FILE))
    preflight = summary.results.strict.preflight
    with open(preflight.uri, encoding="utf-8") as f:
        recorded = json.load(f)
    assert os.path.dirname(preflight.uri) == summary.results.model.uri  # beside strict.json and the checkpoints
    assert (preflight.tpu_type, preflight.verdict, recorded["accelerator"], recorded["cores"]) == (
        "v3-8",
        "fits",
        "TPU_V3",
        8,
    )
    assert preflight.line == recorded["line"] and preflight.line.startswith("preflight v3-8: fits (peak ")
    assert f"  {preflight.line}" in capsys.readouterr().out.splitlines()
    with open(os.path.join(output, "latest", runs.REPORT_FILE), encoding="utf-8") as f:
        report = f.read().split('<section id="preflight">')[1].split("</section>")[0]
    assert html.escape("\n".join(recorded["lines"])) in report and recorded["lines"][0] == preflight.line
