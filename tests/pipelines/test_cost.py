"""The cost estimate: hours x the shipped price table's price per hour, per stage, plus the run fee; prices the
table does not hold are named, never guessed; `submit --dry-run` prints it for a v3-8 run (and with --spot)."""

from __future__ import annotations

import json
import os
import re

import pytest
import tomllib
from google.auth.credentials import AnonymousCredentials
from repo import ROOT as REPO
from vertex_api import FakeVertexAPI

from estimator_lib.cloud import cost
from pipelines import cli, vertex
from pipelines.tpu import TPUTarget, preset

IMAGE = "us-central1-docker.pkg.dev/proj/repo/tpu-pipeline@sha256:" + "cd" * 32
ROOT = "gs://bucket/pipeline-root"
COMMON = ["--project", "proj", "--pipeline-root", ROOT, "--image", IMAGE, "--dry-run"]
STAGES = ("resolve", "prepare", "train", "evaluate", "batch_predict", "export", "serving_check", "release")
TPU_STAGES = ("train", "evaluate", "batch_predict")
CPU_STAGES = tuple(s for s in STAGES if s not in TPU_STAGES)


def shipped() -> dict:
    with open(cost.PRICES_FILE, encoding="utf-8") as f:
        return json.load(f)


def table_file(tmp_path, machines, run_fee=0.03, name="prices.json") -> str:
    path = tmp_path / name
    body = {"date": "2026-01-02", "source": "https://example.test/prices", "currency": "USD", "machines": machines}
    if run_fee is not None:
        body["runFee"] = {"price": run_fee}
    path.write_text(json.dumps(body), encoding="utf-8")
    return str(path)


def row(machine, accelerator, on_demand, spot=None, region="us-central1") -> dict:
    return {"region": region, "machineType": machine, "accelerator": accelerator, "onDemand": on_demand, "spot": spot}


def plan(tpu: TPUTarget | None, region: str = "us-central1") -> dict:
    target = vertex.VertexTarget(project="p", location=region, pipeline_root=ROOT)
    return vertex.describe_run(target, "t.yaml", IMAGE, tpu)["stages"]


def test_the_shipped_table_is_dated_sourced_and_packaged():
    table = shipped()
    assert table["date"] == "2026-11-25" and table["source"] == "https://cloud.google.com/vertex-ai/pricing"
    assert table["runFee"]["price"] == 0.03 and table["runFee"]["source"].startswith("https://cloud.google.com/")
    keys = {(r["region"], r["machineType"], r["accelerator"]) for r in table["machines"]}
    for region in ("us-central1", "europe-west4"):  # every machine the presets and the CPU stages use is listed
        assert {(region, "e2-standard-4", None), (region, "cloud-tpu", "TPU_V2 x8")} <= keys
        assert (region, "cloud-tpu", "TPU_V3 x8") in keys
    assert all(r["source"] for r in table["machines"])
    with open(os.path.join(REPO, "pyproject.toml"), "rb") as f:
        assert "cloud/prices.json" in tomllib.load(f)["tool"]["setuptools"]["package-data"]["estimator_lib"]


def test_each_stage_costs_its_hours_times_the_shipped_price_and_the_total_adds_the_run_fee():
    table = cost.read_prices()
    stages = {name: {"machineType": "n1-standard-4", "accelerator": None, "spot": False} for name in ("a", "b")}
    costs, total = cost.estimate(stages, "us-central1", table, expected={"a": 2.0, "b": 0.5})
    price = next(r["onDemand"] for r in shipped()["machines"] if r["machineType"] == "n1-standard-4" and r["onDemand"])
    assert price == 0.21849885
    assert (costs["a"]["pricePerHour"], costs["a"]["cost"]) == (price, round(2.0 * price, 6))
    assert costs["b"]["cost"] == round(0.5 * price, 6) == 0.109249
    assert total["total"] == round(2.5 * price + 0.03, 6) == 0.576247
    assert (total["complete"], total["missing"]) == (True, [])
    assert total["priceTable"] == {"date": "2026-11-25", "source": shipped()["source"], "file": cost.PRICES_FILE}


def test_a_price_the_table_lacks_is_named_and_left_out_of_the_total():
    costs, total = cost.estimate(plan(TPUTarget(preset("v3-8"))), "europe-west4", cost.read_prices())
    assert costs["train"]["missing"] == "no price for cloud-tpu + TPU_V3 x8 in region europe-west4"
    assert costs["train"]["cost"] is None and costs["release"]["cost"] is None
    assert total["missing"] == [
        "no price for cloud-tpu + TPU_V3 x8 in region europe-west4",
        "no price for e2-standard-4 in region europe-west4",
    ]
    assert (total["total"], total["complete"]) == (0.03, False)
    text = cost.format_estimate(costs, total)
    assert "estimated total: at least 0.03 USD, without:\n  no price for cloud-tpu + TPU_V3 x8 in region" in text


def test_spot_stages_are_priced_at_the_spot_price(tmp_path):
    machines = [row("cloud-tpu", "TPU_V3 x8", 8.0, spot=2.5), row("e2-standard-4", None, 0.2)]
    table = cost.read_prices(table_file(tmp_path, machines))
    costs, total = cost.estimate(plan(TPUTarget(preset("v3-8"), spot=True)), "us-central1", table, 1000)
    assert costs["train"]["hours"] == round(0.25 + 1000 / 10 / 3600, 6) == 0.277778
    assert costs["train"]["hoursBasis"] == "0.25 h start-up + 1000 steps at an assumed 10 steps/s"
    assert (costs["evaluate"]["pricePerHour"], costs["evaluate"]["cost"]) == (2.5, 0.625)
    assert (costs["export"]["pricePerHour"], costs["export"]["cost"]) == (0.2, 0.05)
    expected = round(0.277778 * 2.5, 6) + 2 * 0.625 + 5 * 0.05 + 0.03
    assert total["total"] == pytest.approx(expected, abs=1e-6) and total["complete"]
    without_spot = cost.read_prices(table_file(tmp_path, [row("cloud-tpu", "TPU_V3 x8", 8.0)], name="b.json"))
    costs, _ = cost.estimate(plan(TPUTarget(preset("v3-8"), spot=True)), "us-central1", without_spot)
    assert costs["train"]["missing"] == "no price for cloud-tpu + TPU_V3 x8 (Spot) in region us-central1"


@pytest.mark.parametrize(
    "texts, message",
    [
        (["train"], "--expected-hours 'train' must look like STAGE=HOURS"),
        (["fit=2"], "--expected-hours 'fit=2' must look like STAGE=HOURS"),
        (["train=-1"], "--expected-hours 'train=-1': HOURS must be a number >= 0, e.g. train=1.5"),
        (["train=many"], "--expected-hours 'train=many': HOURS must be a number >= 0"),
    ],
)
def test_bad_expected_hours_are_refused(texts, message):
    with pytest.raises(ValueError, match=message.replace("(", r"\(").replace(")", r"\)")):
        cost.parse_expected_hours(texts, STAGES)


def test_a_bad_price_table_names_the_file_and_the_row(tmp_path):
    path = table_file(tmp_path, [row("cloud-tpu", "TPU_V3 x8", "8 dollars")])
    with pytest.raises(ValueError, match=r"machines\[0\].onDemand is '8 dollars'; give a price >= 0, or null for"):
        cost.read_prices(path)
    with pytest.raises(ValueError, match="undated.json: a price table is an object with date, source, currency and"):
        cost.read_prices(_undated(tmp_path))


def _undated(tmp_path) -> str:
    path = tmp_path / "undated.json"
    path.write_text(json.dumps({"source": "s", "currency": "USD", "machines": []}), encoding="utf-8")
    return str(path)


def test_implied_cost_prices_the_measured_seconds_of_the_stages_that_ran(tmp_path):
    table = cost.read_prices(
        table_file(tmp_path, [row("cloud-tpu", "TPU_V3 x8", 8.0), row("e2-standard-4", None, 0.2)])
    )
    costs, total = cost.implied_cost(
        plan(TPUTarget(preset("v3-8"))), "us-central1", {"train": 1800, "export": 360}, table
    )
    assert set(costs) == {"train", "export"}
    assert (costs["train"]["cost"], costs["export"]["cost"], costs["train"]["hoursBasis"]) == (4.0, 0.02, "measured")
    assert total["total"] == 4.05


def dry_run(monkeypatch, capsys, *argv: str) -> tuple[dict, str]:
    api = FakeVertexAPI(monkeypatch)
    assert cli.main(["submit", *argv, *COMMON], credentials=AnonymousCredentials()) == 0
    assert api.pipeline_jobs == []
    out, err = capsys.readouterr()
    return json.loads(out), err


def test_dry_run_for_v3_8_prints_a_cost_table_from_the_prices_given(monkeypatch, capsys, tmp_path):
    prices = table_file(tmp_path, [row("cloud-tpu", "TPU_V3 x8", 8.0, 2.4), row("e2-standard-4", None, 0.2)])
    argv = ("--tpu", "v3-8", "--spot", "--region", "us-central1", "--prices", prices, "--expected-hours", "train=2")
    printed, err = dry_run(monkeypatch, capsys, *argv)
    stages = printed["plan"]["stages"]
    assert stages["train"]["estimatedCost"] == {
        "machine": "cloud-tpu",
        "accelerator": "TPU_V3 x8",
        "spot": True,
        "hours": 2.0,
        "hoursBasis": "given (--expected-hours)",
        "pricePerHour": 2.4,
        "cost": 4.8,
        "missing": None,
    }
    assert [stages[s]["estimatedCost"]["cost"] for s in STAGES] == [0.05, 0.05, 4.8, 0.6, 0.6, 0.05, 0.05, 0.05]
    total = printed["plan"]["costEstimate"]
    assert (total["total"], total["complete"], total["priceTable"]["date"]) == (6.28, True, "2026-01-02")
    assert err.splitlines()[:4] == [
        "stage             machine        accelerator     hours  USD/hour   USD",
        "resolve           e2-standard-4  -                0.25    0.2000  0.05",
        "prepare           e2-standard-4  -                0.25    0.2000  0.05",
        "train             cloud-tpu      TPU_V3 x8 Spot   2.00    2.4000  4.80",
    ]
    assert (
        "estimated total: 6.28 USD\nprices: " + prices + ", compiled 2026-01-02, from https://example.test/prices"
        in err
    )
    assert "  train: given (--expected-hours)\n" in err


def test_dry_run_with_the_shipped_table_says_what_it_has_no_price_for(monkeypatch, capsys):
    printed, err = dry_run(monkeypatch, capsys, "--tpu", "v3-8", "--region", "us-central1")
    total = printed["plan"]["costEstimate"]
    assert total["priceTable"]["file"] == cost.PRICES_FILE and total["total"] == 0.03
    assert "no price for cloud-tpu + TPU_V3 x8 in region us-central1" in total["missing"]
    assert err.splitlines()[0] == (
        "cost estimate incomplete: no price for cloud-tpu + TPU_V3 x8 in region us-central1; no price for "
        f"e2-standard-4 in region us-central1; give prices with --prices FILE (as in {cost.PRICES_FILE})"
    )
    # training.train_steps is null: the budget the data sets, at preflight's bound on a step
    train = printed["plan"]["stages"]["train"]["estimatedCost"]
    steps, bound = re.fullmatch(
        r"0\.25 h start-up \+ (\d+) steps at preflight's bound of (\S+) ms a step \(a lower bound\)",
        train["hoursBasis"],
    ).groups()
    assert train["hours"] == pytest.approx(0.25 + int(steps) * float(bound) / 1000 / 3600, rel=1e-2)
    # --predict-data eval: the eval split's rows at the bound of the compiled predict step
    predict = printed["plan"]["stages"]["batch_predict"]["estimatedCost"]
    rows, seconds = re.fullmatch(
        r"0\.25 h start-up \+ ([\d,]+) rows at preflight's bound of the predict step \((\S+) s, a lower bound\)",
        predict["hoursBasis"],
    ).groups()
    assert 40 < int(rows.replace(",", "")) < 100  # about a fifth of the 344 penguins
    assert predict["hours"] == pytest.approx(0.25 + float(seconds) / 3600, rel=1e-2)
    assert any(line.startswith(f"  batch prediction of {rows} rows: ") for line in err.splitlines())
    assert any(line.startswith("preflight v3-8: fits (peak ") for line in err.splitlines())
    assert f"compiled 2026-11-25, from {shipped()['source']}" in err


def test_a_vertex_runs_task_details_give_the_seconds_each_stage_ran(tmp_path):
    details = [
        {
            "taskName": "train-model",
            "state": "SUCCEEDED",
            "startTime": "2026-11-25T10:00:00Z",
            "endTime": "2026-11-25T10:30:00.500000Z",
        },
        {
            "taskName": "export-model",
            "state": "SUCCEEDED",
            "startTime": "2026-11-25T10:30:00Z",
            "endTime": "2026-11-25T10:36:00Z",
        },
        {
            "taskName": "prepare-data",
            "state": "CACHED",
            "startTime": "2026-11-25T09:59:00Z",
            "endTime": "2026-11-25T09:59:01Z",
        },
        {"taskName": "evaluate-model", "state": "RUNNING", "startTime": "2026-11-25T10:31:00Z"},
        {
            "taskName": "tpu-estimator-pipeline",
            "state": "SUCCEEDED",
            "startTime": "2026-11-25T09:00:00Z",
            "endTime": "2026-11-25T11:00:00Z",
        },
    ]
    names = {"train-model": "train", "export-model": "export", "prepare-data": "prepare", "evaluate-model": "evaluate"}
    seconds = cost.stage_seconds(details, names)
    assert seconds == {"train": 1800.5, "export": 360.0}
    table = cost.read_prices(
        table_file(tmp_path, [row("cloud-tpu", "TPU_V3 x8", 8.0), row("e2-standard-4", None, 0.2)])
    )
    costs, total = cost.implied_cost(plan(TPUTarget(preset("v3-8"))), "us-central1", seconds, table)
    assert costs["train"]["cost"] == round(1800.5 / 3600 * 8.0, 6) == 4.001111
    assert total["total"] == round(4.001111 + 0.02 + 0.03, 6)


def test_a_bad_run_fee_and_a_row_that_is_not_an_object_are_named(tmp_path):
    with pytest.raises(ValueError, match=r"runFee.price is -0.03; give a price >= 0, or null for unknown"):
        cost.read_prices(table_file(tmp_path, [], run_fee=-0.03))
    with pytest.raises(ValueError, match=r"machines\[0\] needs a region and a machineType, got 'cloud-tpu'"):
        cost.read_prices(table_file(tmp_path, ["cloud-tpu"]))


def test_cost_flags_without_dry_run_are_refused(monkeypatch, capsys):
    FakeVertexAPI(monkeypatch)
    argv = ["submit", "--project", "p", "--pipeline-root", ROOT, "--image", IMAGE, "--expected-hours", "train=2"]
    assert cli.main(argv, credentials=AnonymousCredentials()) == 2
    assert "--prices and --expected-hours shape --dry-run's cost estimate: add --dry-run" in capsys.readouterr().err


def test_a_plan_whose_template_fixes_the_machines_gets_no_estimate():
    target = vertex.VertexTarget(project="p", location="us-central1", pipeline_root=ROOT)
    fixed = {**vertex.describe_run(target, "given.yaml", "", None), "stages": "as compiled in --template given.yaml"}
    assert vertex.with_cost_estimate(fixed, cost.read_prices())["costEstimate"] is None
