"""`tpu-pipeline tune`: a hyperparameter search on this machine, then the winner through the whole pipeline.

The run's data is prepared once (`OUTPUT/tuning/<id>/prepared`, by the prepare stage's own call); each trial
trains on it with the trial's values (`--set` texts, resolved into a `RunConfig` as any run's flags are) and is
judged on a validation split (`estimator_lib.engine.tuning`: a built-in family's prepared one, or one carved from a user
model's train records into `OUTPUT/tuning/<id>/validation`). Trials run one after another, chosen by optuna's
TPE sampler seeded with the run's `training.seed`, so the same command picks the same values. When the run's own
value of every tuned setting lies in the space, the first trial is that default config, so the winner is at
least as good as the default on validation. The winner's `--set` values then run the normal pipeline
(`local.run_local`: prepare, train, evaluate and bless, batch predict, export, serving check, release).

The trials record (`trials.json`: space, metric, direction, seed, each trial's values, `--set` texts, objective
and validation metrics, the winner) is written beside the trials and into the winner's run folder
(`OUTPUT/runs/<id>/tuning.json`).
"""

from __future__ import annotations

import contextlib
import dataclasses
import datetime
import json
import logging
import os
import shutil
import uuid
from collections.abc import Callable, Iterator, Sequence
from typing import Any, Optional

import optuna

from components import adapter
from estimator_lib import engine, release, storage, vocabulary
from estimator_lib.config import ConfigError, RunConfig
from estimator_lib.config.base import field_hint, parse_typed
from estimator_lib.config.job import JobConfig
from estimator_lib.config.run import NO_MODEL
from estimator_lib.config.tuning import (
    CATEGORICAL,
    FLOAT,
    LOG,
    Parameter,
    SearchSpace,
    check_tunable,
    hparam_value,
)
from estimator_lib.data.common import VALID
from estimator_lib.engine.tuning import objective_value, run_trial, trial_source
from pipelines import local

TUNING_DIR = "tuning"
TRIALS_FILE = "trials.json"
RUN_RECORD = "tuning.json"
TRIALS_LOG = "trials.log"
SAMPLER = "optuna.samplers.TPESampler"

Resolve = Callable[[Sequence[str]], RunConfig]


@dataclasses.dataclass(frozen=True)
class Trial:
    """One finished trial: its values ({key: value}), the `--set` texts they make, the objective and every
    validation metric, and whether it is the run's default config."""

    number: int
    values: dict[str, Any]
    overrides: tuple[str, ...]
    objective: float
    metrics: dict[str, float]
    default: bool
    global_step: int
    stopped: str


@dataclasses.dataclass(frozen=True)
class Search:
    """The trials, the winner, and the trials record (trials.json)."""

    trials: tuple[Trial, ...]
    winner: Trial
    record: dict[str, Any]


@dataclasses.dataclass(frozen=True)
class TuneOutcome:
    """The trials, the winner and the winner's pipeline run."""

    trials: tuple[Trial, ...]
    winner: Trial
    record: dict[str, Any]
    run: local.Outcome


def check_space(space: SearchSpace, resolve: Resolve) -> RunConfig:
    """The run's own settings, after checking that every edge of the space (both ends of a range, each
    categorical value) makes a valid run, before anything trains. Returns the default run's `RunConfig`.

    Raises:
      ConfigError: naming the space file, the parameter, the value and what the setting needs.
    """
    settings = resolve([])
    check_tunable(space, settings.job)
    for parameter in space.parameters:
        for value in parameter.edges():
            try:
                resolve(space.overrides({parameter.key: value}, settings.job.model.hparams))
            except ConfigError as e:
                raise ConfigError(f"--space {space.source}: parameter {parameter.key}={value}: {e}") from None
    return settings


def default_values(space: SearchSpace, job: JobConfig) -> Optional[dict[str, Any]]:
    """The job's own value of each tuned setting, as the space names it (a categorical's text), or None when
    one of them lies outside the space or is not set (then no trial is the default config)."""
    data = job.to_dict()
    values = {}
    for parameter in space.parameters:
        value = job.model.hparams.get(parameter.hparam) if parameter.hparam else data
        for part in [] if parameter.hparam else parameter.key.split("."):
            value = value[part]
        found = None if value is None else _in_space(parameter, value)
        if found is None:
            return None
        values[parameter.key] = found
    return values


def _in_space(parameter: Parameter, value: Any) -> Any:
    """`value` as the space holds it, or None when the space does not hold it."""
    if parameter.type == CATEGORICAL:
        same = [text for text in parameter.values if _canonical(_typed(parameter, text)) == _canonical(value)]
        return same[0] if same else None
    if isinstance(value, (int, float)) and not isinstance(value, bool) and parameter.low <= value <= parameter.high:
        return float(value) if parameter.type == FLOAT else int(value)
    return None


def _canonical(value: Any) -> Any:
    return json.loads(json.dumps(list(value) if isinstance(value, tuple) else value))


def _typed(parameter: Parameter, text: str) -> Any:
    """A categorical value's text as the setting holds it (a hyperparameter's as --hparams reads it)."""
    if parameter.hparam:
        return hparam_value(text)
    return parse_typed(field_hint(JobConfig, parameter.key), text, parameter.key)


def distributions(space: SearchSpace) -> dict[str, optuna.distributions.BaseDistribution]:
    """The space as optuna's distributions, by key."""
    out: dict[str, optuna.distributions.BaseDistribution] = {}
    for p in space.parameters:
        if p.type == CATEGORICAL:
            out[p.key] = optuna.distributions.CategoricalDistribution(list(p.values))
        elif p.type == FLOAT:
            out[p.key] = optuna.distributions.FloatDistribution(float(p.low), float(p.high), log=p.scale == LOG)
        else:
            out[p.key] = optuna.distributions.IntDistribution(int(p.low), int(p.high), log=p.scale == LOG)
    return out


def make_study(space: SearchSpace, seed: int, trials: int) -> optuna.Study:
    """A study of the space's direction with a seeded TPE sampler whose random start is half the trials (its
    default, ten, would leave a short search random)."""
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    sampler = optuna.samplers.TPESampler(seed=seed, n_startup_trials=max(1, trials // 2))
    return optuna.create_study(direction=space.direction, sampler=sampler)


def tune(
    space: SearchSpace,
    trials: int,
    resolve: Resolve,
    output: str,
    verbose: bool = False,
    echo: Callable[[str], None] = print,
) -> TuneOutcome:
    """Runs `trials` trials over `space` (`search`, in OUTPUT/tuning/<id>/), then the winner's pipeline into
    `output`; `verbose` streams the winner's pipeline log to the console."""
    found = search(space, trials, resolve, os.path.join(os.path.abspath(output), TUNING_DIR, _new_id()), echo)
    outcome = local.run_local(resolve(found.winner.overrides), output, verbose=verbose, resume=False)
    storage.write_text(os.path.join(outcome.folder.path, RUN_RECORD), _json_text(found.record))
    return TuneOutcome(found.trials, found.winner, found.record, outcome)


def search(space: SearchSpace, trials: int, resolve: Resolve, work: str, echo: Callable[[str], None] = print) -> Search:
    """Runs `trials` trials over `space` in `work` and picks the winner; writes `work`/trials.json.

    Args:
      space: the checked search space.
      trials: how many trials (at least 1).
      resolve: the run's `RunConfig` with extra `--set` texts over its own (the CLI's flags, resolved again).
      work: the trials' directory: the prepared data, each trial's model, their log, trials.json.
      echo: where each trial's line and the table go.
    """
    if trials < 1:
        raise ConfigError(f"--trials {trials}: run at least one trial")
    settings = check_space(space, resolve)
    source = _prepare_once(settings, work)
    count = source.prepared.counts[VALID]
    echo(f"tuning: {trials} trials of {space.metric} on the validation split ({count} rows)")
    echo(f"  their logs: {os.path.join(work, TRIALS_LOG)}")
    with _logs_to(os.path.join(work, TRIALS_LOG)):
        done = _run_trials(space, trials, resolve, settings, source, work, echo)
    winner = _best(done, space.higher_is_better)
    record = trials_record(space, done, winner, settings.job.training.seed, work)
    storage.write_text(os.path.join(work, TRIALS_FILE), _json_text(record))
    echo(format_trials(space, done, winner))
    return Search(tuple(done), winner, record)


def _json_text(record: dict[str, Any]) -> str:
    return json.dumps(record, indent=2, sort_keys=True) + "\n"


@contextlib.contextmanager
def _logs_to(path: str) -> Iterator[None]:
    """TensorFlow's log lines go to `path` while the trials train (the console shows one line per trial)."""
    logger = logging.getLogger("tensorflow")
    handler = logging.FileHandler(path, encoding="utf-8")
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    saved = logger.handlers[:], logger.propagate
    logger.handlers, logger.propagate = [handler], False
    try:
        yield
    finally:
        logger.handlers, logger.propagate = saved
        handler.close()


def _new_id() -> str:
    now = datetime.datetime.now(datetime.timezone.utc)
    return f"{now:%Y%m%dT%H%M%SZ}-{uuid.uuid4().hex[:6]}"


def _prepare_once(settings: RunConfig, work: str) -> engine.Source:
    """The run's data prepared once for every trial by the prepare stage's own call (the same splits: a row or
    record goes to a split by a stable hash), with the validation split trials are judged on (`trial_source`)."""
    given = settings.stage_specs().prepare
    report = os.path.join(work, "data_validation.md")
    prepared = engine.prepare(given, adapter.prepare_config(given), os.path.join(work, "prepared"), None, report)
    return trial_source(prepared.source, os.path.join(work, "validation"))


def _trial_job(settings: RunConfig) -> JobConfig:
    """The job a trial trains: the run's, warm started as its train stage would be."""
    source = release.resolve_model(settings.warm_start, settings.publish_root)
    if source in (None, "", NO_MODEL):
        return settings.job
    return settings.job.with_overrides({"training.warm_start_from": source})


def _run_trials(
    space: SearchSpace,
    count: int,
    resolve: Resolve,
    settings: RunConfig,
    source: engine.Source,
    work: str,
    echo: Callable[[str], None],
) -> list[Trial]:
    study = make_study(space, settings.job.training.seed, count)
    default = default_values(space, settings.job)
    if default is not None:
        study.enqueue_trial(default)
    fixed = distributions(space)
    done: list[Trial] = []
    for number in range(count):
        asked = study.ask(fixed)
        values = {p.key: asked.params[p.key] for p in space.parameters}
        overrides = tuple(space.overrides(values, settings.job.model.hparams))
        trial_dir = os.path.join(work, f"trial-{number:03d}")
        result = run_trial(_trial_job(resolve(overrides)), source, trial_dir)
        objective = objective_value(result.metrics, space.metric)
        study.tell(asked, objective)
        trial = Trial(
            number, values, overrides, objective, result.metrics, values == default, result.global_step, result.stopped
        )
        done.append(trial)
        shutil.rmtree(
            os.path.join(trial_dir, "valid"), ignore_errors=True
        )  # the predictions: only the metrics are kept
        echo(f"  trial {number}: {_values_text(values)}: {space.metric}={vocabulary.format_value(objective)}")
    return done


def _best(trials: Sequence[Trial], higher_is_better: bool) -> Trial:
    """The best trial; of equal ones the first (the default config when it ties)."""
    sign = -1.0 if higher_is_better else 1.0
    return min(trials, key=lambda t: (sign * t.objective, t.number))


def _values_text(values: dict[str, Any]) -> str:
    return ", ".join(f"{key}={_shown(value)}" for key, value in values.items())


def _shown(value: Any) -> str:
    return vocabulary.format_value(value) if isinstance(value, float) else str(value)


def trials_record(space: SearchSpace, trials: Sequence[Trial], winner: Trial, seed: int, work: str) -> dict[str, Any]:
    """What the search did, as trials.json holds it."""
    return {
        "space": space.source,
        "metric": space.metric,
        "direction": vocabulary.HIGHER if space.higher_is_better else vocabulary.LOWER,
        "split": "valid",
        "sampler": SAMPLER,
        "seed": seed,
        "parameters": [dataclasses.asdict(p) for p in space.parameters],
        "trials": [dataclasses.asdict(t) for t in trials],
        "winner": winner.number,
        "winner_overrides": list(winner.overrides),
        "work_dir": work,
    }


def format_trials(space: SearchSpace, trials: Sequence[Trial], winner: Trial) -> str:
    """The trials as a table (trial, each parameter, the objective), then the winner and its `--set` flags."""
    keys = [p.key for p in space.parameters]
    header = ["trial", *keys, space.metric]
    rows = [
        [
            f"{t.number}{' (default)' if t.default else ''}",
            *(_shown(t.values[k]) for k in keys),
            vocabulary.format_value(t.objective),
        ]
        for t in trials
    ]
    widths = [max(len(str(r[i])) for r in [header, *rows]) for i in range(len(header))]
    lines = ["  ".join(str(cell).ljust(w) for cell, w in zip(row, widths)).rstrip() for row in [header, *rows]]
    flags = " ".join(f"--set {text}" for text in winner.overrides)
    better = vocabulary.HIGHER if space.higher_is_better else vocabulary.LOWER
    lines.append(
        f"winner: trial {winner.number} ({space.metric}={vocabulary.format_value(winner.objective)}, {better} is "
        f"better): {flags}; it now runs the whole pipeline (evaluate, bless, release)"
    )
    return "\n".join(lines)
