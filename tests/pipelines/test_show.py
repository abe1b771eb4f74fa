"""`tpu-pipeline show [RUN]`: a past run's record, printed; a clear error naming where it looked otherwise."""

from __future__ import annotations

import json
import os

import pytest

from pipelines import cli, runs, show
from pipelines.run_summary import RunSummary, Serving, Strict

with open(os.path.join(os.path.dirname(__file__), "recorded_summary.json"), encoding="utf-8") as f:
    RECORDED = json.load(f)  # a real run's summary.json, its paths under /out
OK_RUN = {
    **RECORDED,
    "run": {
        "id": "20261122T100000Z-aaaaaa",
        "attempts": 1,
        "started": "2026-11-22T10:00:00+00:00",
        "ended": "2026-11-22T10:01:30+00:00",
    },
    "data": {**RECORDED["data"], "rows": 344, "counts": {"train": 200, "valid": 60, "eval": 84}, "quarantined": 0},
    "metrics": {"accuracy": 0.9761904761904762, "auc": 1.0000001, "log_loss": 0.0712},
    "blessing": {**RECORDED["blessing"], "summary": "blessed: all 3 check(s) hold"},
    "strict": None,
    "export": {**RECORDED["export"], "reason": "published version v1 at /out/published/versions/v1"},
    "artifacts": {"prepare": "/out/p/dataset", "evaluate": "/out/e/blessing", "report": "/out/e/report"},
    "tensorboard_logdir": "/out/t/model",
}
FAILED_RUN = {  # a failed run's summary has no results
    "status": "failed",
    "stage": "train",
    "error": "ConfigError: training.train_batch_size=12 is not divisible by tpu.num_cores=8",
    "run": {"id": "20261122T110000Z-bbbbbb", "attempts": 2, "started": "2026-11-22T11:00:00+00:00"},
    "config": RECORDED["config"],
}
SERVING_LINE = "  serving check: 58 rows agree on predict, raw:predict (largest difference 0; rtol 1e-05 + atol 1e-06)"


def record(output: str, summary: dict, report: bool = False) -> runs.RunFolder:
    folder = runs.RunFolder(output, summary["run"]["id"])
    folder.create()
    summary = {**summary, "run": {**summary["run"], "dir": folder.path, "log": folder.log}}
    summary.pop("report", None)
    if report:
        summary["report"] = folder.report
    runs.publish_summary(folder, RunSummary.from_dict(summary))
    return folder


def test_show_prints_the_latest_runs_status_metrics_verdict_artifacts_and_report(tmp_path, capsys):
    output = str(tmp_path)
    folder = record(output, OK_RUN, report=True)
    assert cli.main(["show", "--output", output]) == 0
    assert capsys.readouterr().out.splitlines() == [
        "run 20261122T100000Z-aaaaaa: ok (started 2026-11-22T10:00:00+00:00, ended 2026-11-22T10:01:30+00:00)",
        "  data: 344 rows (train 200, eval 84, valid 60)",
        "  metrics (eval):",
        "    accuracy                 0.9762",
        "    auc                      1.000",
        "    log_loss                 0.0712",
        "  blessed: True (blessed: all 3 check(s) hold)",
        SERVING_LINE,
        "  published version v1 at /out/published/versions/v1",
        "  artifacts:",
        "    prepare        /out/p/dataset",
        "    evaluate       /out/e/blessing",
        "    report         /out/e/report",
        f"  report: {folder.report}",
        "  TensorBoard: tensorboard --logdir /out/t/model",
        f"  log: {folder.log}",
        f"summary: {folder.summary_path}",
    ]


def test_show_names_a_run_by_id_folder_or_file_and_tells_how_a_failed_one_ended(tmp_path, capsys):
    output = str(tmp_path)
    failed = record(output, FAILED_RUN)
    record(output, OK_RUN)  # the latest, now
    for run in (FAILED_RUN["run"]["id"], failed.path, failed.summary_path):
        assert cli.main(["show", run, "--output", output]) == 0
        lines = capsys.readouterr().out.splitlines()
        assert lines[:2] == [
            "run 20261122T110000Z-bbbbbb: failed (started 2026-11-22T11:00:00+00:00, 2 attempts)",
            "  failed at train: ConfigError: training.train_batch_size=12 is not divisible by tpu.num_cores=8",
        ]
        assert lines[-2:] == [f"  log: {failed.log}", f"summary: {failed.summary_path}"]
    assert cli.main(["show", "--json", FAILED_RUN["run"]["id"], "--output", output]) == 0
    assert json.loads(capsys.readouterr().out) == failed.read_summary().to_dict()
    assert cli.main(["show", failed.path]) == 0  # a run folder needs no --output
    assert capsys.readouterr().out.splitlines()[-1] == f"summary: {failed.summary_path}"


def test_show_without_a_run_names_what_it_looked_for(tmp_path, capsys):
    output = str(tmp_path / "nothing")
    assert cli.main(["show", "--output", output]) == 2
    err = capsys.readouterr().err
    assert err == (
        f"tpu-pipeline show: error: no run under {output}: {os.path.join(output, 'latest')} names no run folder "
        f"with a summary.json; {os.path.join(output, 'runs')} holds no run; give the --output a run-local used, or "
        "a RUN\n"
    )


def test_show_of_an_unknown_run_lists_the_runs_there(tmp_path, capsys):
    output = str(tmp_path)
    record(output, FAILED_RUN)
    record(output, OK_RUN)
    assert cli.main(["show", "20261122T120000Z-cccccc", "--output", output]) == 2
    err = capsys.readouterr().err
    path = os.path.join(output, "runs", "20261122T120000Z-cccccc", "summary.json")
    assert err == (
        "tpu-pipeline show: error: no run '20261122T120000Z-cccccc': looked for "
        "20261122T120000Z-cccccc/summary.json (a run folder or an output directory) and "
        f"{path} (a run id under --output {output}); runs there: 20261122T110000Z-bbbbbb, 20261122T100000Z-aaaaaa\n"
    )


@pytest.mark.parametrize("count, shown", [(3, 3), (7, 5)])
def test_the_error_lists_the_newest_runs_first(tmp_path, count, shown):
    for i in range(count):
        runs.RunFolder(str(tmp_path), f"2026112{i}T000000Z-000000").create()
    message = runs._known(str(tmp_path))
    listed = message.split("runs there: ")[1].split(" and ")[0].split(", ")
    assert listed == [f"2026112{i}T000000Z-000000" for i in reversed(range(count))][:shown]
    assert message.endswith(f" and {count - shown} older") == (count > shown)


def test_show_prints_the_serving_check_in_one_line(tmp_path, capsys):
    serving = {
        "rows_checked": 58,
        "signatures": ["predict", "raw:predict"],
        "max_abs_diff": {"predict": {"probabilities": 2.5e-7, "class_ids": 0.0}, "raw:predict": {}},
        "rtol": 1e-5,
        "atol": 1e-6,
        "compared": "the first 58 predicted records of ['/out/eval-0.tfrecord']",
        "skipped": {},
        "record_uri": "/out/c/serving_check.json",
    }
    folder = record(str(tmp_path), {**OK_RUN, "serving": serving})
    assert cli.main(["show", folder.path]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[lines.index("  blessed: True (blessed: all 3 check(s) hold)") + 1] == (
        "  serving check: 58 rows agree on predict, raw:predict (largest difference 2.5e-07; rtol 1e-05 + atol 1e-06)"
    )
    serving = Serving(**{**serving, "rows_checked": 0, "compared": "nothing: no rows"})
    assert show.serving_line(serving) == ("serving check: nothing: no rows")


def test_show_prints_the_worst_slices_with_their_verdicts(tmp_path, capsys):
    def entry(name, rows, accuracy, judged, passed):
        return {
            "name": name,
            "features": ["island"],
            "rows": float(rows),
            "metrics": {"accuracy": accuracy},
            "judged": judged,
            "passed": passed,
        }

    slices = {
        "metric": "accuracy",
        "min_rows": 20.0,
        "overall": {"accuracy": 0.9},
        "count": 4.0,
        "judged": 3.0,
        "failed": ["island=Dream"],
        "worst": [
            entry("island=Dream", 26, 0.5385, True, False),
            entry("island=Torgersen", 12, 0.75, False, None),
            entry("island=Biscoe", 40, 0.975, True, True),
        ],
        "uri": "/out/e/blessing/slices.json",
    }
    folder = record(str(tmp_path), {**OK_RUN, "slices": slices})
    assert cli.main(["show", folder.path]) == 0
    lines = capsys.readouterr().out.splitlines()
    start = lines.index("  slices by accuracy (4, 3 judged; overall 0.9000), worst first:")
    assert lines[start + 1 : start + 6] == [
        "    island=Dream                         26 rows  accuracy 0.5385  FAILED",
        "    island=Torgersen                     12 rows  accuracy 0.7500  (under 20 rows: not judged)",
        "    island=Biscoe                        40 rows  accuracy 0.9750",
        "    full table: /out/e/blessing/slices.json",
        "  blessed: True (blessed: all 3 check(s) hold)",
    ]  # KFP's float counts shown as the ints they are


def test_show_prints_each_stages_seconds_after_the_headline(tmp_path, capsys):
    run = {**OK_RUN["run"], "seconds": {"release": 0.1, "prepare": 2.04, "train": 11.96}}
    folder = record(str(tmp_path), {**OK_RUN, "run": run})
    assert cli.main(["show", folder.path]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[1] == "  stages: prepare 2.0 s, train 12.0 s, release 0.1 s"  # in the DAG's order


def test_the_strict_line_counts_each_class_and_names_its_findings():
    def finding(name, severity, accepted_by=None):
        return {"name": name, "severity": severity, "accepted_by": accepted_by}

    strict = {
        "checks": 26,
        "counts": {"fails": 0, "accepted": 1, "differs": 1, "notes": 2},
        "findings": [
            finding("dtype:label", "note"),
            finding("cross-shard:train_op", "differs"),
            finding("dtype:label", "note"),
            finding("spec:infer", "fails", "spec:*"),
        ],
        "uri": "/m/strict.json",
    }
    assert show.strict_line(Strict(**strict)) == (
        "TPU-strict: 26 checks, 1 accepted (spec:infer); 1 differs (cross-shard:train_op); 2 notes (dtype:label); "
        "details in /m/strict.json"
    )
    clean = {"checks": 26, "counts": {"fails": 0, "accepted": 0, "differs": 0, "notes": 0}, "findings": [], "uri": "u"}
    assert show.strict_line(Strict(**clean)) == "TPU-strict: 26 checks, nothing a TPU would refuse"


SKEW = {
    "status": "warned",
    "mode": "warn",
    "summary": "warned: 2 of 7 features skewed: island: 100% of rows are categories training never saw (limit 5%); "
    "bill_length_mm: 96% of rows outside training's range (limit 5%)",
    "worst": [
        {
            "feature": "island",
            "figures": {"unseen_share": 1.0},
            "breaches": ["max_unseen_share"],
            "reading": "island: 100% of rows are categories training never saw (limit 5%)",
        },
        {
            "feature": "bill_length_mm",
            "figures": {"out_of_range": 0.96},
            "breaches": ["max_out_of_range"],
            "reading": "bill_length_mm: 96% of rows outside training's range (limit 5%)",
        },
    ],
    "uri": "/out/b/predictions/skew.json",
}


def test_show_and_the_end_of_a_run_print_the_skew_check_and_its_worst_features(tmp_path, capsys):
    from pipelines.cli import commands

    predictions = {**RECORDED["predictions"], "skew": SKEW}
    folder = record(str(tmp_path), {**OK_RUN, "predictions": predictions})
    assert cli.main(["show", folder.path]) == 0
    lines = capsys.readouterr().out.splitlines()
    at = lines.index("  skew: warned: 2 of 7 features skewed (predict.skew=warn; /out/b/predictions/skew.json)")
    assert lines[at + 1 : at + 3] == [f"    {w['reading']}" for w in SKEW["worst"]]
    summary = RunSummary.read(runs.find_summary(str(tmp_path), None))
    assert summary.results.predictions.skew.worst[0].figures == {"unseen_share": 1.0}
    end = commands.format_summary(summary, "s.json").splitlines()
    predicted = next(i for i, line in enumerate(end) if line.startswith("  predictions: 58 rows"))
    assert (
        end[predicted + 1]
        == "    skew: warned: 2 of 7 features skewed (predict.skew=warn; /out/b/predictions/skew.json)"
    )
    # Rows that passed: show says so, the end of a run does not repeat it; a run before the check has no line.
    passed = {**SKEW, "status": "passed", "summary": "passed: 7 features of 58 scored rows within their thresholds"}
    clean = RunSummary.from_dict({**summary.to_dict(), "predictions": {**predictions, "skew": {**passed, "worst": []}}})
    assert "  skew: passed: 7 features of 58 scored rows within their thresholds (predict.skew=warn; " in (
        show.format_run(clean, "s.json")
    )
    assert "skew" not in commands.format_summary(clean, "s.json")
    before = RunSummary.from_dict(RECORDED)
    assert "skew" not in commands.format_summary(before, "s.json") + show.format_run(before, "s.json")


def test_show_names_the_predictions_that_moved_after_the_worst_features():
    reading = "predicted class Gentoo: 61% of the scored rows, 36% of the eval rows the model was blessed on"
    both = {**SKEW, "summary": SKEW["summary"] + f"; the predictions moved: {reading}", "predictions": reading}
    skew = RunSummary.from_dict({**RECORDED, "predictions": {**RECORDED["predictions"], "skew": both}})
    assert show.skew_lines(skew.results.predictions.skew) == [
        "  skew: warned: 2 of 7 features skewed; the predictions moved (predict.skew=warn; "
        "/out/b/predictions/skew.json)",
        *(f"    {w['reading']}" for w in SKEW["worst"]),
        f"    {reading}",
    ]
    alone = {**both, "summary": f"warned: the predictions moved: {reading}", "worst": []}
    skew = RunSummary.from_dict({**RECORDED, "predictions": {**RECORDED["predictions"], "skew": alone}})
    assert show.skew_lines(skew.results.predictions.skew) == [
        "  skew: warned: the predictions moved (predict.skew=warn; /out/b/predictions/skew.json)",
        f"    {reading}",
    ]
