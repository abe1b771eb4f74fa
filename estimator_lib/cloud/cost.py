"""What a Vertex AI run costs: an estimate before it is submitted, and the cost its measured durations imply.

cost of a stage = hours the stage's machine runs x that machine's price per hour in the run's region, from a dated
price table shipped beside this module (`prices.json`, or the user's own with `--prices FILE`); the total adds
Vertex AI Pipelines' fee per run. A price the table does not hold (or holds as null: not confirmed when the table
was compiled) is never guessed: the stage's cost is None and the estimate names what is missing, so a total
that leaves something out says so.

Hours before a run are assumptions, stated beside each figure: `--expected-hours STAGE=H` when given; for train
after a preflight, a start-up time plus the steps at preflight's step-time bound (`bound_train_hours`), and for
batch prediction of a prepared split on the TPU a start-up time plus its rows at the predict step's bound
(`bound_predict_hours`); for train
with `training.train_steps` set, a start-up time plus the steps at an assumed rate; otherwise a fixed time per
stage. After a run, `implied_cost` prices the durations measured instead (`stage_seconds` reads them from a
Vertex AI run's task details); `run_cost` is the record a run's last task writes (`components.run_cost`).

Not counted: Dataflow workers (prepare and batch predict with --engine beam), Cloud Storage, network, taxes,
discounts and the time a job waits for capacity.
"""

from __future__ import annotations

import dataclasses
import datetime
import json
import os
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from estimator_lib.cloud.tasks import read_task_details

PRICES_FILE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "prices.json")
# Vertex AI Pipelines runs a step without a machine spec as a CustomJob on e2-standard-4
# (https://cloud.google.com/vertex-ai/docs/pipelines/machine-types).
PIPELINE_TASK_MACHINE = "e2-standard-4"
# Assumptions, not measurements: a Vertex AI job's start-up (image pull, TPU VM ready) plus a short stage's work,
# and a deliberately low training rate, so that an estimate errs high; --expected-hours replaces them.
ASSUMED_STAGE_HOURS = 0.25
ASSUMED_TRAIN_HOURS = 1.0
ASSUMED_STEPS_PER_SECOND = 10.0
# Vertex AI task states in which the task's machine ran (a CACHED or SKIPPED task started none).
_BILLED_STATES = ("SUCCEEDED", "FAILED", "CANCELLED")


@dataclasses.dataclass(frozen=True)
class PriceTable:
    """A dated table of machine prices per hour.

    Attributes:
      date: when the table was compiled (YYYY-MM-DD).
      source: where its prices come from.
      currency: e.g. "USD".
      run_fee: the price of one pipeline run, or None if unknown.
      hourly: {(region, machine type, accelerator or None): {"onDemand": price or None, "spot": price or None}}.
      path: the file it was read from.
    """

    date: str
    source: str
    currency: str
    run_fee: float | None
    hourly: Mapping[tuple[str, str, str | None], Mapping[str, float | None]]
    path: str

    def price(self, region: str, machine: str, accelerator: str | None, spot: bool) -> float | None:
        """The price per hour of `machine` (with `accelerator`) in `region`, Spot or on-demand; None: unknown."""
        row = self.hourly.get((region, machine, accelerator), {})
        return row.get("spot" if spot else "onDemand")


def read_prices(path: str = PRICES_FILE) -> PriceTable:
    """Reads a price table (the format of `prices.json`).

    Raises:
      ValueError: naming the file, the row and what is wrong.
    """
    try:
        with open(path, encoding="utf-8") as f:
            table = json.load(f)
    except (OSError, json.JSONDecodeError) as e:
        raise ValueError(f"--prices {path}: cannot read a price table ({e}); see {PRICES_FILE} for the format") from e
    if not isinstance(table, dict) or not all(key in table for key in ("date", "source", "currency", "machines")):
        raise ValueError(f"--prices {path}: a price table is an object with date, source, currency and machines")
    hourly = {}
    for i, row in enumerate(table["machines"]):
        key = (row.get("region"), row.get("machineType"), row.get("accelerator")) if isinstance(row, dict) else ()
        if not (key and key[0] and key[1]):
            raise ValueError(f"--prices {path}: machines[{i}] needs a region and a machineType, got {row!r}")
        hourly[key] = {kind: _price(path, f"machines[{i}].{kind}", row.get(kind)) for kind in ("onDemand", "spot")}
    fee = _price(path, "runFee.price", (table.get("runFee") or {}).get("price"))
    return PriceTable(table["date"], table["source"], table["currency"], fee, hourly, path)


def _price(path: str, where: str, value: Any) -> float | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value < float("inf"):
        raise ValueError(f"--prices {path}: {where} is {value!r}; give a price >= 0, or null for unknown")
    return float(value)


def parse_expected_hours(texts: list[str], stages: tuple[str, ...]) -> dict[str, float]:
    """["train=3", "prepare=0.5"] -> {"train": 3.0, "prepare": 0.5}; raises ValueError naming a bad entry."""
    hours = {}
    for text in texts:
        stage, sep, value = text.partition("=")
        if not sep or stage not in stages:
            raise ValueError(f"--expected-hours {text!r} must look like STAGE=HOURS with STAGE one of {list(stages)}")
        hours[stage] = _hours(text, stage, value)
    return hours


def _hours(text: str, stage: str, value: str) -> float:
    try:
        hours = float(value)
    except ValueError:
        hours = float("nan")
    if not 0 <= hours < float("inf"):
        raise ValueError(f"--expected-hours {text!r}: HOURS must be a number >= 0, e.g. {stage}=1.5")
    return hours


class Hours(float):
    """Hours a stage is expected to run with the reason (`basis`): an entry of `estimate`'s `expected` that was not
    given with --expected-hours."""

    basis: str

    def __new__(cls, hours: float, basis: str) -> "Hours":
        made = super().__new__(cls, hours)
        made.basis = basis
        return made


def bound_train_hours(train_steps: int, step_seconds: float) -> Hours:
    """The train stage's hours from preflight's step-time bound: the start-up assumed for every stage plus the
    steps at the bound (a lower bound on a step: the hours err low)."""
    hours = ASSUMED_STAGE_HOURS + train_steps * step_seconds / 3600
    return Hours(
        hours,
        f"{ASSUMED_STAGE_HOURS:g} h start-up + {train_steps} steps at preflight's bound of {step_seconds * 1e3:.3g} ms "
        "a step (a lower bound)",
    )


def bound_predict_hours(rows: int, seconds: float) -> Hours:
    """The batch-predict stage's hours from preflight's bound of its `rows` (`seconds` at the predict step's
    roofline): the start-up assumed for every stage plus that time (a lower bound: the hours err low)."""
    return Hours(
        ASSUMED_STAGE_HOURS + seconds / 3600,
        f"{ASSUMED_STAGE_HOURS:g} h start-up + {rows:,} rows at preflight's bound of the predict step "
        f"({seconds:.3g} s, a lower bound)",
    )


def assumed_hours(stage: str, train_steps: int | None, expected: Mapping[str, float]) -> tuple[float, str]:
    """(hours, the assumption behind them) for one stage before the run."""
    if stage in expected:
        return expected[stage], getattr(expected[stage], "basis", "given (--expected-hours)")
    if stage != "train":
        return ASSUMED_STAGE_HOURS, f"{ASSUMED_STAGE_HOURS:g} h assumed per stage"
    if train_steps is None:
        return ASSUMED_TRAIN_HOURS, f"{ASSUMED_TRAIN_HOURS:g} h assumed: training.train_steps is null (set by the data)"
    hours = ASSUMED_STAGE_HOURS + train_steps / ASSUMED_STEPS_PER_SECOND / 3600
    return hours, (
        f"{ASSUMED_STAGE_HOURS:g} h start-up + {train_steps} steps at an assumed {ASSUMED_STEPS_PER_SECOND:g} steps/s"
    )


def machine_of(placed: Mapping[str, Any]) -> tuple[str, str | None]:
    """(machine type, accelerator as "TYPE xN" or None) a stage of `vertex.describe_run` is billed for."""
    accelerator = placed.get("accelerator")
    # int: a count read back from a KFP dict parameter may be a float (8.0)
    named = f"{accelerator['type']} x{int(accelerator['count'])}" if accelerator else None
    return placed.get("machineType") or PIPELINE_TASK_MACHINE, named


def stage_cost(placed: Mapping[str, Any], region: str, hours: float, basis: str, table: PriceTable) -> dict[str, Any]:
    """One stage's estimate: machine, hours (and why), price per hour and cost; `missing` says what has no price."""
    machine, accelerator = machine_of(placed)
    spot = bool(placed.get("spot"))
    price = table.price(region, machine, accelerator, spot)
    what = machine + (f" + {accelerator}" if accelerator else "") + (" (Spot)" if spot else "")
    cost = None if price is None else round(hours * price, 6)
    return {
        "machine": machine,
        "accelerator": accelerator,
        "spot": spot,
        "hours": round(hours, 6),
        "hoursBasis": basis + ("; Dataflow workers not counted" if placed.get("dataflow") else ""),
        "pricePerHour": price,
        "cost": cost,
        "missing": None if price is not None else f"no price for {what} in region {region}",
    }


def total(stages: Mapping[str, Mapping[str, Any]], table: PriceTable) -> dict[str, Any]:
    """The run's total: the stages' known costs and the run fee; what it leaves out, and the table it used."""
    missing = [cost["missing"] for cost in stages.values() if cost["missing"]]
    if table.run_fee is None:
        missing.append("no price for a pipeline run")
    known = sum(cost["cost"] for cost in stages.values() if cost["cost"] is not None) + (table.run_fee or 0.0)
    return {
        "currency": table.currency,
        "runFee": table.run_fee,
        "total": round(known, 6),
        "complete": not missing,
        "missing": sorted(set(missing)),
        "priceTable": {"date": table.date, "source": table.source, "file": table.path},
    }


def estimate(
    stages: Mapping[str, Mapping[str, Any]],
    region: str,
    table: PriceTable,
    train_steps: int | None = None,
    expected: Mapping[str, float] | None = None,
) -> tuple[dict[str, dict[str, Any]], dict[str, Any]]:
    """Each stage's estimate before the run, and the total (`total`).

    Args:
      stages: {stage: its placement}, as `vertex.describe_run` gives them.
      region: the run's Vertex AI region.
      table: the prices.
      train_steps: `training.train_steps` (None: derived from the data at run time).
      expected: hours per stage the user gave (`--expected-hours`).
    """
    costs = {
        stage: stage_cost(placed, region, *assumed_hours(stage, train_steps, expected or {}), table)
        for stage, placed in stages.items()
    }
    return costs, total(costs, table)


def implied_cost(
    stages: Mapping[str, Mapping[str, Any]], region: str, seconds: Mapping[str, float], table: PriceTable
) -> tuple[dict[str, dict[str, Any]], dict[str, Any]]:
    """What a finished run's measured durations cost: {stage: seconds it ran} priced as `estimate` prices hours.

    Stages absent from `seconds` (not run, or reused from the cache) cost nothing.
    """
    costs = {
        stage: stage_cost(placed, region, seconds[stage] / 3600, "measured", table)
        for stage, placed in stages.items()
        if stage in seconds
    }
    return costs, total(costs, table)


def stage_seconds(task_details: Iterable[Mapping[str, Any]], task_stages: Mapping[str, str]) -> dict[str, float]:
    """{stage: seconds its task ran} from a Vertex AI PipelineJob's `jobDetail.taskDetails` (REST JSON: taskName,
    state, startTime, endTime); tasks served from the cache, skipped or unfinished are left out.

    Args:
      task_details: the PipelineJob's task details.
      task_stages: {task name: stage} ("train-model" -> "train"); other tasks (the pipeline's own) are left out.
    """
    seconds: dict[str, float] = {}
    for task in task_details:
        stage = task_stages.get(task.get("taskName", ""))
        if stage is None or not _ran(task):
            continue
        started, ended = (datetime.datetime.fromisoformat(task[key]) for key in ("startTime", "endTime"))
        seconds[stage] = seconds.get(stage, 0.0) + (ended - started).total_seconds()
    return seconds


def _ran(task: Mapping[str, Any]) -> bool:
    return task.get("state") in _BILLED_STATES and bool(task.get("startTime")) and bool(task.get("endTime"))


def run_cost(
    pipeline_job: str,
    region: str,
    task_stages: Mapping[str, str],
    stages: Mapping[str, Mapping[str, Any]],
    table: PriceTable,
    read_tasks: Callable[[str], list[dict[str, Any]]] = read_task_details,
) -> dict[str, Any]:
    """The cost record of a Vertex AI run: what its measured durations cost (`implied_cost`).

    Args:
      pipeline_job: the run's resource name.
      region: its Vertex AI region.
      task_stages: {task name: stage} (`stage_seconds`).
      stages: {stage: its placement} (`stage_cost`), fixed when the pipeline was compiled.
      table: the prices.
      read_tasks: reads the run's task details; when it fails, the record says why and prices nothing but the run.

    Returns:
      {"pipelineJob", "region", "stages": {stage: `stage_cost` and "seconds"}, "notRun": stages without a
      measured duration (cached, skipped or unfinished), "otherTasks": {task: seconds} of tasks that ran and are
      not priced (the tuning job's, the Vertex AI steps), "error", and `total`'s fields}.
    """
    try:
        tasks, error = read_tasks(pipeline_job), ""
    except Exception as e:  # noqa: BLE001 - a cost record must not fail a run that succeeded
        tasks, error = [], f"cannot read the task details of {pipeline_job}: {_first_line(str(e))}"
    seconds = stage_seconds(tasks, task_stages)
    costs, summary = implied_cost(stages, region, seconds, table)
    others = stage_seconds(tasks, _others(tasks, task_stages))
    if error:
        summary = {**summary, "complete": False, "missing": sorted([*summary["missing"], error])}
    return {
        "pipelineJob": pipeline_job,
        "region": region,
        "stages": {stage: {**cost, "seconds": seconds[stage]} for stage, cost in costs.items()},
        "notRun": [stage for stage in stages if stage not in seconds],
        "otherTasks": others,
        "error": error,
        **summary,
    }


def _others(tasks: Iterable[Mapping[str, Any]], task_stages: Mapping[str, str]) -> dict[str, str]:
    """{task name: itself} of the tasks that are not stages."""
    return {t["taskName"]: t["taskName"] for t in tasks if t.get("taskName") and t["taskName"] not in task_stages}


def _first_line(text: str) -> str:
    return next((line.strip() for line in text.splitlines() if line.strip()), "")


def format_estimate(costs: Mapping[str, Mapping[str, Any]], summary: Mapping[str, Any]) -> str:
    """The estimate as a table for a terminal: stage, machine, accelerator, hours, price/hour, cost; the total; the
    price table's date and source; what has no price; the assumptions behind the hours."""
    currency = summary["currency"]
    first = []
    if not summary["complete"]:  # first: a total that leaves a price out must not read as the run's cost
        missing = "; ".join(summary["missing"])
        first = [f"cost estimate incomplete: {missing}; give prices with --prices FILE (as in {PRICES_FILE})"]
    rows = [("stage", "machine", "accelerator", "hours", f"{currency}/hour", currency)]
    for stage, cost in costs.items():
        price = "no price" if cost["pricePerHour"] is None else f"{cost['pricePerHour']:.4f}"
        amount = "?" if cost["cost"] is None else f"{cost['cost']:.2f}"
        accelerator = (cost["accelerator"] or "-") + (" Spot" if cost["spot"] else "")
        rows.append((stage, cost["machine"], accelerator, f"{cost['hours']:.2f}", price, amount))
    fee = "?" if summary["runFee"] is None else f"{summary['runFee']:.2f}"
    rows.append(("pipeline run fee", "", "", "", "", fee))
    widths = [max(len(row[i]) for row in rows) for i in range(6)]
    lines = first + [
        "  ".join(cell.ljust(w) if i < 3 else cell.rjust(w) for i, (cell, w) in enumerate(zip(row, widths)))
        for row in rows
    ]
    bound = "" if summary["complete"] else "at least "
    table = summary["priceTable"]
    lines += [
        f"estimated total: {bound}{summary['total']:.2f} {currency}" + ("" if summary["complete"] else ", without:"),
        *(f"  {missing}" for missing in summary["missing"]),
        f"prices: {table['file']}, compiled {table['date']}, from {table['source']}",
        "hours:",
        *(f"  {stage}: {cost['hoursBasis']}" for stage, cost in costs.items()),
    ]
    return "\n".join(lines)
