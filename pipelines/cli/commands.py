"""The commands that run here (run-local, predict, tune, show, list, reproduce, diff, release), their console output,
and `main`, which dispatches every command and maps its errors to exit codes."""

from __future__ import annotations

import argparse
import logging
import os
import signal
import sys
import warnings
from collections.abc import Sequence
from typing import Any

from google.auth.exceptions import DefaultCredentialsError

from estimator_lib import storage, vocabulary
from estimator_lib.config import ConfigError, RunConfig
from estimator_lib.config.base import set_dotted
from estimator_lib.config.run import typed_override
from estimator_lib.config.skew import SkewConfig
from estimator_lib.config.stages import SKEW_FILE, StageLimits
from estimator_lib.config.tuning import load_space
from pipelines import checks, listing, local, reproduce, runs, show
from pipelines.cli.parser import build_parser
from pipelines.cli.preflight import cmd_preflight
from pipelines.cli.settings import read_space_file, resolve_alerts, resolve_local_settings
from pipelines.cli.vertex_commands import cmd_compile, cmd_schedule, cmd_submit
from pipelines.local.failures import next_step
from pipelines.run_summary import RunSummary, Skew, decode


def cmd_run_local(args: argparse.Namespace) -> int:
    output = checks.output_directory(args.output)
    settings = resolve_local_settings(args, output)
    limits = StageLimits(quiet_minutes=args.stage_silence, timeout_minutes=args.stage_timeout)
    alerts = resolve_alerts(args)
    outcome = local.run_local(settings, output, verbose=args.verbose, resume=args.resume, alerts=alerts, limits=limits)
    if outcome.summary.status == runs.OK:
        print(format_summary(outcome.summary, os.path.join(output, runs.SUMMARY_FILE)))
    else:
        print(format_failure(outcome.summary, args.verbose), file=sys.stderr)
    return outcome.exit_code


def cmd_tune(args: argparse.Namespace) -> int:
    try:
        from pipelines import tune  # trains in-process: TensorFlow and optuna load only for this command
    except ModuleNotFoundError as e:
        if e.name != "optuna":
            raise
        raise ConfigError(
            "tune needs optuna: pip install 'tpu-estimator-pipelines[tune]' (scripts/setup.sh does)"
        ) from None

    space = load_space(args.space, read_space_file(args.space))
    output = checks.output_directory(args.output)
    args.resume = False
    given = list(args.overrides)

    def resolve(extra: Sequence[str]) -> RunConfig:
        args.overrides = [*given, *extra]
        return resolve_local_settings(args, output)

    outcome = tune.tune(space, args.trials, resolve, output, verbose=args.verbose)
    summary = outcome.run.summary
    if summary.status == runs.OK:
        print(format_summary(summary, os.path.join(output, runs.SUMMARY_FILE)))
    else:
        print(format_failure(summary, args.verbose), file=sys.stderr)
    return outcome.run.exit_code


def format_failure(summary: RunSummary, verbose: bool) -> str:
    """A failed or interrupted run: the error's first line first, then where the full log is and what to do."""
    run = summary.run
    if summary.status == runs.INTERRUPTED:
        lines = [f"tpu-pipeline run-local: {summary.error} during {summary.stage or 'start-up'}"]
    else:
        lines = [f"tpu-pipeline run-local: error: {summary.stage}: {summary.error}"]
        if verbose:
            lines += [local.failure_excerpt(run.log)]
    lines += [f"full log: {run.log}", f"run {run.id} is recorded as {summary.status}; {next_step(summary)}"]
    return "\n".join(map(show.printable, "\n".join(lines).split("\n")))


def format_summary(summary: RunSummary, path: str) -> str:
    results, run = summary.results, summary.run
    metrics, export = results.metrics, results.export
    lines = [
        f"pipeline finished: run {run.id}" + (f" (attempt {run.attempts})" if run.attempts > 1 else ""),
        *show.data_lines(results.data),
        f"  data validation: {results.validation.summary}",
        "  metrics (eval): " + vocabulary.format_metrics(metrics, vocabulary.headline(metrics)),
        *(show.strict_lines(results.strict) if results.strict else []),
        f"  blessed: {results.blessed} ({results.blessing.summary})",
        f"  predictions: {results.predictions.count} rows in {results.predictions.uri}",
        *_unclean_skew_lines(results.predictions.skew),
        f"  export: {export.uri} (tag sets {export.tag_sets})",
        f"  {export.reason}",
        f"  report: {summary.report}",
        f"  TensorBoard: tensorboard --logdir {results.tensorboard_logdir}",
        f"summary: {path}",
    ]
    return "\n".join(map(show.printable, lines))


def _unclean_skew_lines(skew: Skew | None) -> list[str]:
    """The skew line and readings under the predictions line, unless the rows passed (or were not checked)."""
    return show.skew_lines(skew, "    ") if skew is not None and skew.status != show.SKEW_CLEAN else []


def cmd_show(args: argparse.Namespace) -> int:
    path = runs.find_summary(args.output, args.run)
    summary = RunSummary.read(path)
    print(summary.to_json() if args.json else show.format_run(summary, path))
    return 0


def cmd_list(args: argparse.Namespace) -> int:
    output = args.folder or args.output
    print(listing.format_runs(output, listing.list_runs(output)))
    return 0


def cmd_reproduce(args: argparse.Namespace) -> int:
    record = reproduce.read_record(args.record)
    if record.summary is None:  # a Vertex AI run: its parameters and image, for a resubmission
        print(reproduce.write_resubmission(record, args.output))
        return 0
    result = reproduce.reproduce(record, checks.output_directory(args.output), verbose=args.verbose)
    print(reproduce.format_reproduction(result))
    return 0 if result.identical else 1


def cmd_diff(args: argparse.Namespace) -> int:
    a, b = reproduce.read_record(args.run_a, args.output), reproduce.read_record(args.run_b, args.output)
    found = reproduce.diff_records(a, b)
    print(reproduce.format_diff(a, b, found))
    return 1 if any(found.values()) else 0


def cmd_release(args: argparse.Namespace) -> int:
    from estimator_lib import release  # it loads TensorFlow (its export stage); no other command may

    repair = release.repair_latest(args.publish_root)  # no intact version: NoIntactVersionError, exit 1
    print("\n".join(repair.lines()))
    return 0


def predict_skew_setting(mode: str, overrides: Sequence[str]) -> SkewConfig:
    """`predict`'s skew check: `--skew` and the `--set predict.KEY=VALUE` thresholds, parsed as a run's `--set
    predict.*` is. Raises ConfigError naming a setting that is not a `predict.*` threshold."""
    section: dict[str, Any] = {"skew": mode}
    for text in overrides:
        name, dotted, value = typed_override(text)
        if name != "predict" or dotted == "skew":
            fix = "give the mode with --skew" if dotted == "skew" else "the model's settings are its export's"
            raise ConfigError(f"--set {text}: predict takes only the skew check's thresholds (predict.*); {fix}")
        set_dotted(section, dotted, value, create=True)
    return SkewConfig.from_dict(section, "predict.")


def cmd_predict(args: argparse.Namespace) -> int:
    skew = predict_skew_setting(args.skew, args.overrides)  # a bad setting fails before TensorFlow loads
    from estimator_lib.engine import published  # it loads TensorFlow, for this command only
    from estimator_lib.predict.skew import headline

    done = published.predict_published(args.model, args.data, args.output, engine=args.engine, skew=skew)
    version, result = done.version, done.predictions
    lines = [f"predicted {result.count} rows with version {version.version} of {version.root} into {result.output_dir}"]
    if done.skew is not None:
        written = storage.join(result.output_dir, SKEW_FILE)  # none where the check could not run
        uri = written if storage.exists(written) else ""
        record = decode(Skew, {**headline(done.skew.to_dict()), "uri": uri}, "the skew check")
        lines += show.skew_lines(record, indent="")
    print("\n".join(map(show.printable, lines)))
    return 0


COMMANDS = {
    "run-local": cmd_run_local,
    "predict": cmd_predict,
    "preflight": cmd_preflight,
    "tune": cmd_tune,
    "release": cmd_release,
    "show": cmd_show,
    "list": cmd_list,
    "reproduce": cmd_reproduce,
    "diff": cmd_diff,
    "compile": cmd_compile,
    "submit": cmd_submit,
    "schedule": cmd_schedule,
}


def _not_a_deprecation(record: logging.LogRecord) -> bool:
    return "is deprecated" not in str(record.msg)  # each of TensorFlow's deprecation messages says so


def main(argv: Sequence[str] | None = None, credentials: Any = None) -> int:
    """Entry point. `credentials` (google-auth) is for callers that bring their own; the CLI uses ADC."""
    # google-api-core warns on every import about Python versions it will drop in 2027; not actionable here.
    warnings.filterwarnings("ignore", category=FutureWarning, module=r"google\.")
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")  # before anything imports TensorFlow
    # TensorFlow's deprecation warnings name its own APIs (estimator, compat.v1), nothing a user can change; they
    # stay off the console of the commands that load it here (predict, tune, release). Stages log them.
    logging.getLogger("tensorflow").addFilter(_not_a_deprecation)
    args = build_parser().parse_args(argv)
    command = COMMANDS[args.command]
    try:
        if args.command in ("submit", "schedule"):
            return command(args, credentials)
        return command(args)
    except KeyboardInterrupt:  # Ctrl-C before a run started (during one, run-local stops it and reports)
        print(f"tpu-pipeline {args.command}: interrupted", file=sys.stderr)
        return 128 + signal.SIGINT
    except (ValueError, FileNotFoundError, RuntimeError) as e:  # a message may name a record's hand-edited ids
        lines = f"tpu-pipeline {args.command}: error: {e}".split("\n")
        print("\n".join(map(show.printable, lines)), file=sys.stderr)
        return 1 if isinstance(e, RuntimeError) else 2
    except DefaultCredentialsError:
        print(
            f"tpu-pipeline {args.command}: error: no Google Cloud credentials; run "
            "`gcloud auth application-default login` (or set GOOGLE_APPLICATION_CREDENTIALS), or use --dry-run",
            file=sys.stderr,
        )
        return 2
