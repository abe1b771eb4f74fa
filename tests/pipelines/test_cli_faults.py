"""Hostile input to the CLI: control characters in data and records (show, list, diff, reproduce print them
escaped), hand-edited or malformed records (one-line errors, exit 2, no rerun started), a glob matching a
directory, a CSV of another delimiter, and a `--set` key given twice."""

from __future__ import annotations

import json
import os
import re

import pytest
from test_reproduce import write_run
from test_show import OK_RUN

from pipelines import cli, local, runs
from pipelines.cli import commands
from pipelines.cli.parser import build_parser

ATTACK = "\x1b[2J\x1b]0;OWNED\x07"  # clears the screen, retitles the terminal
CONTROLS = [chr(c) for c in (*range(0x20), *range(0x7F, 0xA0))]  # C0, DEL, C1
RAW_CONTROL = re.compile("[\x00-\x09\x0b-\x1f\x7f-\x9f]")  # any but the newline that ends each line


def poisoned(value, text: str):
    """`value` (JSON) with `text` added to every string in it, and to the keys of its metrics."""
    if isinstance(value, str):
        return value + text
    if isinstance(value, list):
        return [poisoned(v, text) for v in value]
    if isinstance(value, dict):
        return {(k + text if k.startswith("auc/") else k): poisoned(v, text) for k, v in value.items()}
    return value


def hostile_summary(text: str) -> dict:
    """A finished run's summary whose every string (ids, metric names, the data's notes, slice names, TPU-strict
    findings) holds `text`, as a category value or a hand edit puts it there."""
    finding = {"name": "dtype:label", "severity": "note", "accepted_by": None}
    entry = {"name": "island=Dream", "features": ["island"], "rows": 26, "metrics": {"accuracy": 0.5}}
    slices = {"metric": "accuracy", "min_rows": 20, "overall": {"accuracy": 0.9}, "count": 1, "judged": 1}
    summary = {
        **OK_RUN,
        "run": {**OK_RUN["run"], "dir": "/out/runs/x", "log": "/out/runs/x/pipeline.log", "seconds": {"train": 1.0}},
        "metrics": {**OK_RUN["metrics"], "auc/Adelie": 1.0},
        "data": {**OK_RUN["data"], "notes": ["column island holds one value: Dream"], "columns_all_missing": {}},
        "slices": {**slices, "failed": [], "worst": [{**entry, "judged": True, "passed": False}], "uri": "/s"},
        "strict": {"checks": 1, "counts": {"notes": 1}, "findings": [finding], "uri": "/strict.json"},
    }
    summary = poisoned(summary, text)
    summary["strict"]["findings"][0]["severity"] = "note"
    return {**summary, "status": "ok", "report": None}


@pytest.mark.parametrize("text", [ATTACK, "".join(CONTROLS)], ids=["attack", "every-control"])
def test_show_and_list_print_no_raw_control_character_of_a_record(tmp_path, capsys, text):
    folder = runs.RunFolder(str(tmp_path), "20261122T100000Z-aaaaaa")
    folder.create()
    with open(folder.summary_path, "w", encoding="utf-8") as f:
        json.dump(hostile_summary(text), f)
    for command in (["show", folder.summary_path], ["list", str(tmp_path)]):
        assert cli.main(command) == 0
        out = capsys.readouterr().out
        assert not RAW_CONTROL.search(out), command
        assert "\\x1b" in out  # shown, escaped
    summary = folder.read_summary()
    run_local = commands.format_summary(summary, "s.json") + commands.format_failure(summary, verbose=False)
    assert not RAW_CONTROL.search(run_local) and "\\x1b" in run_local
    if text == ATTACK:
        assert cli.main(["show", folder.summary_path]) == 0
        assert "  warning: column island holds one value: Dream\\x1b[2J\\x1b]0;OWNED\\x07" in capsys.readouterr().out


def test_diff_escapes_every_control_character_of_hand_edited_ids_and_metric_names(tmp_path, capsys):
    a = write_run(str(tmp_path / "a"), "run-a")
    for char in CONTROLS:
        b = write_run(str(tmp_path / f"b{ord(char)}"), "run-b", metrics={f"acc{char}x": 0.8})
        with open(b, encoding="utf-8") as f:
            summary = json.load(f)
        summary["run"]["id"] = f"run{char}b"
        summary["blessing"]["summary"] = f"not{char}blessed"
        with open(b, "w", encoding="utf-8") as f:
            json.dump(summary, f)
        assert cli.main(["diff", a, b]) == 1
        out, shown = capsys.readouterr().out, f"\\x{ord(char):02x}"
        assert not RAW_CONTROL.search(out) and f"acc{char}x" not in out and f"acc{shown}x" in out, repr(char)
        assert out.startswith(f"run-a and run{shown}b differ in metrics, verdict"), repr(char)


def test_an_error_message_prints_no_raw_control_character(tmp_path, capsys):
    runs.RunFolder(str(tmp_path), f"run{ATTACK}").create()
    assert cli.main(["show", "nothing", "--output", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert not RAW_CONTROL.search(err) and "runs there: run\\x1b[2J\\x1b]0;OWNED\\x07" in err


# -- malformed records: one line naming the file and what is wrong, exit 2, nothing rerun ---------------------
def _edited_manifest(summary: dict, tmp_path, stage: str, edit) -> dict:
    with open(summary["manifests"][stage], encoding="utf-8") as f:
        found = json.load(f)
    path = tmp_path / f"edited-{stage}.json"
    path.write_text(edit(found) if callable(edit) else edit, encoding="utf-8")
    return {**summary, "manifests": {**summary["manifests"], stage: str(path)}}


EDITS = {
    "null metrics": (lambda s, t: {**s, "metrics": None}, "metrics is null, not an object"),
    "a list": (lambda s, t: [s], "the file is not a JSON object"),
    "no run": (lambda s, t: {k: v for k, v in s.items() if k != "run"}, "missing key run"),
    "manifest not JSON": (
        lambda s, t: _edited_manifest(s, t, "train", "{"),
        r"manifests.train \(.*edited-train.json\) is not valid JSON",
    ),
    "manifest a list": (
        lambda s, t: _edited_manifest(s, t, "train", "[1]"),
        r"manifests.train \(.*edited-train.json\) is not the train stage's manifest",
    ),
    "manifest of another stage": (
        lambda s, t: {**s, "manifests": {**s["manifests"], "train": s["manifests"]["export"]}},
        r"manifests.train \(.*export-task/stage_manifest.json\) is not the train stage's manifest",
    ),
    "manifest without config": (
        lambda s, t: _edited_manifest(s, t, "train", lambda m: json.dumps({**m, "config": None})),
        r"manifests.train \(.*\): its config is null, not an object",
    ),
    "manifest without outputs": (
        lambda s, t: _edited_manifest(s, t, "evaluate", lambda m: json.dumps({k: m[k] for k in m if k != "outputs"})),
        r"manifests.evaluate \(.*\): its outputs is null, not an object",
    ),
    "manifest output not an object": (
        lambda s, t: _edited_manifest(s, t, "export", lambda m: json.dumps({**m, "outputs": {"exported": "x"}})),
        r"manifests.export \(.*\): its outputs.exported is not an object with a uri and a fingerprint",
    ),
    "unknown stage": (
        lambda s, t: {**s, "manifests": {**s["manifests"], "bogus": s["manifests"]["train"]}},
        r"manifests.bogus \(.*\): bogus is not a stage",
    ),
}


@pytest.mark.parametrize("edit", EDITS, ids=list(EDITS))
def test_a_malformed_record_is_one_line_naming_the_file_and_nothing_reruns(tmp_path, capsys, monkeypatch, edit):
    change, message = EDITS[edit]
    good = write_run(str(tmp_path / "good"), "run-good")
    with open(good, encoding="utf-8") as f:
        summary = json.load(f)
    path = tmp_path / "summary.json"
    path.write_text(json.dumps(change(summary, tmp_path)), encoding="utf-8")

    def rerun(*args, **kwargs):
        raise AssertionError("reproduce started a rerun of a malformed record")

    monkeypatch.setattr(local, "run_local", rerun)
    commands = [["diff", str(path), good], ["reproduce", str(path), "--output", str(tmp_path / "rerun")]]
    if "manifest" not in edit and "stage" not in edit:
        commands.append(["show", str(path)])  # show reads no manifest
    for command in commands:
        assert cli.main(command) == 2, command
        err = capsys.readouterr().err
        assert len(err.splitlines()) == 1 and str(path) in err and re.search(message, err), err
    assert not os.path.exists(tmp_path / "rerun" / "runs")


@pytest.mark.parametrize(
    "config, message",
    [
        ({}, "the train stage's manifest records no config.job"),
        (
            {"job": [1]},
            "its stages' manifests record settings that cannot be read: job must be a JSON object, got list",
        ),
    ],
)
def test_reproduce_names_a_setting_its_manifests_do_not_hold_and_reruns_nothing(
    tmp_path, capsys, monkeypatch, config, message
):
    good = write_run(str(tmp_path / "good"), "run-good")
    with open(good, encoding="utf-8") as f:
        summary = _edited_manifest(json.load(f), tmp_path, "train", lambda m: json.dumps({**m, "config": config}))
    path = tmp_path / "summary.json"
    path.write_text(json.dumps(summary), encoding="utf-8")
    monkeypatch.setattr(local, "run_local", None)  # called, it would fail the test
    assert cli.main(["reproduce", str(path), "--output", str(tmp_path / "rerun")]) == 2
    assert capsys.readouterr().err == f"tpu-pipeline reproduce: error: {path}: {message}\n"


def test_show_and_list_read_hand_edited_findings_and_blessing_settings(tmp_path, capsys):
    summary = hostile_summary("")
    summary["strict"]["findings"] = [{"name": ["x"]}, {"severity": "unheard-of", "accepted_by": None}]
    summary["config"] = {**summary["config"], "blessing_config": ["comparison_metric"]}
    folder = runs.RunFolder(str(tmp_path), summary["run"]["id"])
    folder.create()
    with open(folder.summary_path, "w", encoding="utf-8") as f:
        json.dump(summary, f)
    assert cli.main(["show", folder.summary_path]) == 0
    assert "  TPU-strict: 1 checks, 1 notes (['x'], ?); details in /strict.json" in capsys.readouterr().out
    assert cli.main(["list", str(tmp_path)]) == 0
    assert "accuracy*=0.9762" in capsys.readouterr().out


# -- the data: a glob matching a directory, another delimiter --------------------------------------------------
def test_a_data_glob_matching_a_directory_is_refused_naming_it(tmp_path, capsys):
    (tmp_path / "a.csv").mkdir()
    (tmp_path / "b.csv").write_text("x,y\n1,2\n", encoding="utf-8")
    pattern = str(tmp_path / "*.csv")
    assert cli.main(["run-local", "--data", pattern, "--label", "y", "--output", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert err == (
        f"tpu-pipeline run-local: error: --data {pattern}: {tmp_path / 'a.csv'} is a directory; a glob must match "
        "files only\n"
    )


@pytest.mark.parametrize("delimiter, shown", [(";", "';'"), ("\t", "'\\t'")])
def test_a_csv_of_another_delimiter_is_named_as_such(tmp_path, capsys, delimiter, shown):
    data = tmp_path / "rows.csv"
    data.write_text(delimiter.join(["a", "b", "species"]) + "\n" + delimiter.join("12x") + "\n", encoding="utf-8")
    assert cli.main(["run-local", "--data", str(data), "--label", "species", "--output", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err
    assert err == (
        f"tpu-pipeline run-local: error: {data} seems to be {shown}-delimited: its header is one column "
        f"({'a' + delimiter + 'b' + delimiter + 'species'!r}); CSV must be comma-separated: save it with commas\n"
    )


# -- --set -----------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("flag", ["--set", "--hparams"])
def test_a_key_given_twice_is_refused_naming_it(capsys, flag):
    key = "training.train_steps" if flag == "--set" else "units"
    with pytest.raises(SystemExit) as exit_:
        build_parser().parse_args(["run-local", flag, f"{key}=1", flag, "other=3", flag, f" {key} =2"])
    assert exit_.value.code == 2
    assert capsys.readouterr().err.splitlines()[-1] == (
        f"tpu-pipeline run-local: error: argument {flag}: {key} is given twice ({key}=1, then  {key} =2); give it once"
    )
    args = build_parser().parse_args(["run-local", flag, f"{key}=1", flag, "other=3"])
    assert getattr(args, "overrides" if flag == "--set" else "hparams") == [f"{key}=1", "other=3"]


def test_a_manifest_input_naming_the_patterns_of_the_files_read_is_a_good_record(tmp_path, capsys):
    """The prepare stage records its data as the patterns it read (`records.files_source`: a list)."""
    good = write_run(str(tmp_path / "good"), "run-good")
    with open(good, encoding="utf-8") as f:
        summary = json.load(f)

    def patterns(found: dict) -> str:
        source = {"uri": ["/data/*.csv", "/more.csv"], "files": 2, "fingerprint": "f" * 64}
        return json.dumps({**found, "inputs": {**found["inputs"], "files": source}})

    path = tmp_path / "summary.json"
    path.write_text(json.dumps(_edited_manifest(summary, tmp_path, "prepare", patterns)), encoding="utf-8")
    assert cli.main(["diff", str(path), str(path)]) == 0, capsys.readouterr().err
