"""`tpu-pipeline list`, and the did-you-mean of --label and --set, checked before any stage starts (exit 2).

The run folders are written as `pipelines.local` writes them (OUTPUT/runs/<id>/summary.json), the summaries a
recorded one with the values `list` reads changed."""

from __future__ import annotations

import json
import os

import pytest

from pipelines import cli, listing, runs
from pipelines.run_summary import RunSummary

PUBLISHED = "20261125T211745333824Z-b52fffd470d8"
with open(os.path.join(os.path.dirname(__file__), "recorded_summary.json"), encoding="utf-8") as f:
    RECORDED = json.load(f)  # a real run's summary.json


def summary(status: str, started: str, ended: str | None, **results) -> dict:
    run = {**RECORDED["run"], "id": "?", "started": started, "attempts": 1}
    run = {k: v for k, v in {**run, "ended": ended}.items() if v is not None}
    config = {**RECORDED["config"], "blessing_config": {"thresholds": {}}}
    return {"status": status, "stage": None, "error": None, "run": run, "config": config, **results}


def regression(blessed: bool, published: bool, reasons: list[str]) -> dict:
    results = {k: v for k, v in RECORDED.items() if k not in ("status", "stage", "error", "run", "config")}
    return {
        **results,
        "metrics": {"mae": 266.3839, "mse": 104949.48, "r2": 0.782362, "rmse": 323.959},
        "dataset": {**RECORDED["dataset"], "task": "regression"},
        "blessed": blessed,
        "blessing": {
            **RECORDED["blessing"],
            "summary": "blessed: all 2 check(s) hold" if blessed else "not blessed",
            "reasons": reasons,
        },
        "export": {
            **RECORDED["export"],
            "published": published,
            "published_version": PUBLISHED if published else "",
            "reason": f"published version {PUBLISHED}" if published else "identical to LATEST: not published again",
        },
    }


@pytest.fixture
def output(tmp_path):
    """Six runs: published, blessed but not published, not blessed, failed, unreadable, without a summary."""
    out = str(tmp_path / "out")
    written = {
        "20261125T100000Z-aaaaaa": summary(
            "ok", "2026-11-25T10:00:00+00:00", "2026-11-25T10:00:13+00:00", **regression(True, True, [])
        ),
        "20261125T110000Z-bbbbbb": summary(
            "ok", "2026-11-25T11:00:00+00:00", "2026-11-25T11:01:05+00:00", **regression(True, False, [])
        ),
        "20261125T120000Z-cccccc": summary(
            "ok",
            "2026-11-25T12:00:00+00:00",
            "2026-11-25T12:00:20+00:00",
            **regression(False, False, ["r2 0.7824 < threshold 0.9"]),
        ),
        "20261125T130000Z-dddddd": {
            **summary("failed", "2026-11-25T13:00:00+00:00", "2026-11-25T13:00:04+00:00"),
            "stage": "prepare",
            "error": "DataError: rows.csv line 3: bad number",
        },
    }
    for run_id, record in written.items():
        folder = runs.RunFolder(out, run_id)
        folder.create()
        folder.write_summary(RunSummary.from_dict({**record, "run": {**record["run"], "id": run_id}}))
    for run_id, text in (("20261125T140000Z-eeeeee", "{not json"), ("20261125T150000Z-ffffff", None)):
        folder = runs.RunFolder(out, run_id)
        folder.create()
        if text is not None:
            with open(folder.summary_path, "w", encoding="utf-8") as f:
                f.write(text)
    return out


def test_list_shows_every_run_newest_first_with_metrics_and_verdict(output, capsys):
    assert [tuple(vars(line).values()) for line in listing.list_runs(output)] == [
        ("20261125T150000Z-ffffff", "unreadable", "?", "?", "", "no summary.json"),
        (
            "20261125T140000Z-eeeeee",
            "unreadable",
            "?",
            "?",
            "",
            "summary.json unreadable (not valid JSON: Expecting property name enclosed in double quotes: line 1 "
            "column 2 (char 1))",
        ),
        (
            "20261125T130000Z-dddddd",
            "failed",
            "2026-11-25T13:00:00+00:00",
            "4 s",
            "",
            "failed at prepare: DataError: rows.csv line 3: bad number",
        ),
        (
            "20261125T120000Z-cccccc",
            "ok",
            "2026-11-25T12:00:00+00:00",
            "20 s",
            "rmse*=323.96 mae=266.38 r2=0.7824",
            "not blessed: r2 0.7824 < threshold 0.9",
        ),
        (
            "20261125T110000Z-bbbbbb",
            "ok",
            "2026-11-25T11:00:00+00:00",
            "1 min 05 s",
            "rmse*=323.96 mae=266.38 r2=0.7824",
            "blessed, not published: identical to LATEST: not published again",
        ),
        (
            "20261125T100000Z-aaaaaa",
            "ok",
            "2026-11-25T10:00:00+00:00",
            "13 s",
            "rmse*=323.96 mae=266.38 r2=0.7824",
            f"published {PUBLISHED}",
        ),
    ]
    assert cli.main(["list", output]) == 0
    printed = capsys.readouterr().out.splitlines()
    assert printed[0].split() == ["RUN", "STATUS", "STARTED", "DURATION", "METRICS", "(*:", "compared)", "VERDICT"]
    assert printed[-1] == (
        "20261125T100000Z-aaaaaa  ok          2026-11-25T10:00:00+00:00  13 s        "
        f"rmse*=323.96 mae=266.38 r2=0.7824  published {PUBLISHED}"
    )


def test_list_takes_the_output_folder_as_show_does_or_as_its_argument(output, capsys):
    assert cli.main(["list", "--output", output]) == 0
    by_flag = capsys.readouterr().out
    assert cli.main(["list", output]) == 0
    assert capsys.readouterr().out == by_flag and len(by_flag.splitlines()) == 7
    with pytest.raises(SystemExit) as exit_:
        cli.main(["list", output, "--output", output])
    assert exit_.value.code == 2
    assert capsys.readouterr().err.endswith("error: argument --output: not allowed with argument OUTPUT\n")


@pytest.mark.parametrize("flag", [[], ["--output"]])
def test_list_of_a_folder_without_runs_says_so(tmp_path, capsys, flag):
    assert cli.main(["list", *flag, str(tmp_path)]) == 2
    assert capsys.readouterr().err == (
        f"tpu-pipeline list: error: no runs under {tmp_path}: {tmp_path}/runs does not exist; give the --output a "
        "run-local used\n"
    )


def test_a_misspelt_label_is_refused_before_any_stage_with_the_closest_columns(tmp_path, capsys):
    data = tmp_path / "houses.csv"
    data.write_text("area,Price,rooms\n50,100,2\n")
    output = tmp_path / "out"
    assert cli.main(["run-local", "--data", str(data), "--label", "price", "--output", str(output)]) == 2
    assert capsys.readouterr().err == (
        f"tpu-pipeline run-local: error: --label 'price' is not a column of {data}; did you mean 'Price'? give one "
        "of its columns: area, Price, rooms (e.g. --label Price)\n"
    )
    assert not output.exists()  # no run started
    assert cli.main(["run-local", "--set", "prepare.label=specis", "--output", str(output)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("tpu-pipeline run-local: error: prepare.label 'specis' is not a column of ")
    assert "penguins.csv; did you mean 'species'? give one of its columns: species, island," in err
    assert "resume" not in err and not output.exists()


@pytest.mark.parametrize(
    "key, hint",
    [
        ("train_steps", "did you mean 'training.train_steps'?"),
        ("learning_rate", "did you mean 'training.optimizer.learning_rate'?"),
        ("trainng.train_steps", "did you mean 'training'?"),
        ("training.train_step", "did you mean 'train_steps'?"),
    ],
)
def test_an_unknown_set_key_names_the_closest_valid_key(key, hint, tmp_path, capsys):
    assert cli.main(["run-local", "--set", f"{key}=3", "--output", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"tpu-pipeline run-local: error: --set {key}: unknown ") and err.endswith(hint + "\n")
    assert not os.path.exists(tmp_path / "out")
