"""The `tpu-pipeline` parser: its commands, their help and the help's formatting."""

from __future__ import annotations

import argparse
import difflib
import importlib.metadata
import os
import textwrap
from collections.abc import Iterable, Sequence
from typing import Any, Optional

from estimator_lib.cloud import cost
from estimator_lib.config.beam import ENGINES, INPROCESS
from pipelines import tpu as tpu_presets
from pipelines.cli.arguments import (
    add_alert_arguments,
    add_cost_arguments,
    add_engine_arguments,
    add_image_arguments,
    add_preflight_arguments,
    add_run_arguments,
    add_schedule_arguments,
    add_skew_arguments,
    add_stage_limit_arguments,
    add_tracking_arguments,
    add_tuning_arguments,
    add_vertex_arguments,
)

DEFAULT_OUTPUT = os.path.join("runs", "local")
DEFAULT_REPRODUCE_OUTPUT = os.path.join("runs", "reproduce")
DEFAULT_TEMPLATE = "tpu_estimator_pipeline.yaml"
DISTRIBUTION = "tpu-estimator-pipelines"


def version_text() -> str:
    """'tpu-pipeline 0.1.0 (TensorFlow 2.15.1, kfp 2.13.0)': this package's installed version and what it runs
    with, read from the installed metadata, so `--version` imports neither."""
    tensorflow = _installed("tensorflow", "tensorflow-cpu")
    return f"tpu-pipeline {_installed(DISTRIBUTION)} (TensorFlow {tensorflow}, kfp {_installed('kfp')})"


def _installed(*names: str) -> str:
    """The version of the first of `names` that is installed."""
    for name in names:
        try:
            return importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            continue
    return "not installed"


def _preset_help(experimental: bool = True) -> str:
    """The TPU types' table; `experimental`: with what the experimental ones need (preflight plans for any)."""
    rows = "\n".join(
        f"  {name:<12} {machine:<18} {accel:<15} x{count:<3} {f'{cores} cores':<9} {status}"
        for name, machine, accel, count, cores, status in tpu_presets.preset_table()
    )
    note = "experimental types need --experimental-tpu: TPUEstimator is not known to run on them (docs/vertex.md)"
    return f"TPU types (--tpu):\n{rows}" + (f"\n{note}" if experimental else "")


def _add_record_commands(commands: Any) -> None:
    reproduce_ = commands.add_parser(
        "reproduce",
        help="run a recorded local run again and check that every stage's outputs match the record",
        description="Runs a recorded local run again (same data, config, seed; its own publish root) into --output "
        "and compares every stage's output fingerprints with the record, naming the first stage that differs and "
        "what differs (data, config, versions or output). Exit 0 only when every stage matches. For a Vertex AI "
        "run's directory it prints the recorded image and parameters for a resubmission.",
    )
    reproduce_.add_argument(
        "record", metavar="RUN_OR_SUMMARY", help="a run's summary.json, its folder (OUTPUT/runs/<id>) or OUTPUT"
    )
    reproduce_.add_argument(
        "--output",
        default=DEFAULT_REPRODUCE_OUTPUT,
        help=f"output directory of the rerun (default {DEFAULT_REPRODUCE_OUTPUT})",
    )
    reproduce_.add_argument("--verbose", action="store_true", help="stream every stage's full log to the console")
    diff = commands.add_parser(
        "diff",
        help="compare two runs: data, config, versions, machine, metrics, verdict, artifact fingerprints",
        description="Compares two runs' records, leaving out where each run wrote (publish root, output folder, run "
        "id). Exit 0 when the two are equivalent, 1 when they differ.",
    )
    for name in ("run_a", "run_b"):
        diff.add_argument(name, metavar=name.upper(), help="a run id under --output, a run folder or a summary.json")
    diff.add_argument("--output", default=DEFAULT_OUTPUT, help=f"output directory (default {DEFAULT_OUTPUT})")


def _add_tune_command(commands: Any) -> None:
    tune_ = commands.add_parser(
        "tune",
        help="search hyperparameters on this machine's CPU, then run the best config through the whole pipeline",
        description="Prepares the run's data once, trains --trials trials one after another with values from the "
        "--space file (optuna's TPE sampler, seeded with training.seed; the first trial is the run's own config "
        "when it lies in the space), judges each on the validation split by the space's metric, prints the trials "
        "and runs the winner's --set values as run-local does (evaluate, bless, release). The trials are recorded "
        "in OUTPUT/tuning/<id>/trials.json and in the winner's run folder (tuning.json). docs/tuning.md",
    )
    tune_.add_argument("--space", required=True, metavar="FILE", help="the search space, YAML or JSON (docs/tuning.md)")
    tune_.add_argument("--trials", type=int, default=10, metavar="N", help="trials to run (default %(default)s)")
    add_run_arguments(tune_)
    add_engine_arguments(tune_, dataflow=False)
    tune_.add_argument("--output", default=DEFAULT_OUTPUT, help=f"output directory (default {DEFAULT_OUTPUT})")
    tune_.add_argument("--verbose", action="store_true", help="stream the winner's pipeline log to the console")


def _add_predict_command(commands: Any) -> None:
    predict = commands.add_parser(
        "predict",
        help="score new rows with a published model, without training",
        description="Scores CSV / JSON Lines rows (the label optional; read through the model's schema) or TFRecords "
        "with a published version, as the pipeline's batch prediction scores them: the same JSON Lines shards and "
        "manifest, one row per input row in input order, keyed, with its file and line. The output folder is "
        "published in one step and must be new or empty. docs/predict_export.md",
    )
    predict.add_argument(
        "--model",
        required=True,
        metavar="PUBLISH_ROOT[/VERSION]",
        help="a publish root (its LATEST version; run-local publishes to OUTPUT/published), or ROOT/versions/VERSION",
    )
    predict.add_argument("--data", required=True, nargs="+", metavar="FILE", help="files or globs to score")
    predict.add_argument("--output", required=True, metavar="DIR", help="where the predictions go (new or empty)")
    predict.add_argument(
        "--engine",
        choices=ENGINES,
        default=INPROCESS,
        help="inprocess (the exported CPU graph in this process) or beam (Apache Beam's DirectRunner; its workers "
        "count the rows for the skew check)",
    )
    add_skew_arguments(predict)


class _Formatter(argparse.HelpFormatter):
    """Help in a column wide enough for most flags and their metavar, never broken inside a flag's name."""

    def __init__(self, prog: str) -> None:
        super().__init__(prog, max_help_position=32)

    def _split_lines(self, text: str, width: int) -> list[str]:
        return textwrap.wrap(" ".join(text.split()), width, break_on_hyphens=False, break_long_words=False)

    def _fill_text(self, text: str, width: int, indent: str) -> str:
        return "\n".join(
            textwrap.wrap(
                " ".join(text.split()),
                width,
                initial_indent=indent,
                subsequent_indent=indent,
                break_on_hyphens=False,
                break_long_words=False,
            )
        )


class _TableFormatter(argparse.RawDescriptionHelpFormatter, _Formatter):
    """`_Formatter` that keeps the epilog's table (the TPU types) as written."""


def _closest(given: str, names: Iterable[str]) -> list[str]:
    """Up to three of `names` closest to `given` (difflib), compared without their leading dashes."""
    bare = {name.lstrip("-"): name for name in names}
    return [bare[name] for name in difflib.get_close_matches(given.lstrip("-"), bare, n=3)]


def _did_you_mean(names: Sequence[str]) -> str:
    return f"; did you mean {' or '.join(names)}?" if names else ""


def _flags(parser: argparse.ArgumentParser) -> list[str]:
    return [flag for action in parser._actions for flag in action.option_strings]


class _Parser(argparse.ArgumentParser):
    """Every command's parser formats its help with `_Formatter` unless it asks for another. A value that is not
    one of its argument's choices (a command, --engine) is refused naming the closest choices."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("formatter_class", _Formatter)
        super().__init__(*args, **kwargs)

    def _check_value(self, action: argparse.Action, value: Any) -> None:  # argparse's check of `choices`
        try:
            super()._check_value(action, value)
        except argparse.ArgumentError as e:
            closest = _closest(str(value), map(str, action.choices))
            raise argparse.ArgumentError(action, e.message + _did_you_mean(closest)) from None


class _Main(_Parser):
    """The top-level parser. An argument its command does not know is refused by that command's parser (its usage
    line, exit 2), naming the command's closest flags, or the commands that have the flag."""

    def add_subparsers(self, **kwargs: Any) -> Any:
        self.commands = super().add_subparsers(**kwargs)
        return self.commands

    def parse_args(self, args: Optional[Sequence[str]] = None, namespace: Any = None) -> argparse.Namespace:
        namespace, extras = self.parse_known_args(args, namespace)
        if extras:
            self.commands.choices[namespace.command].error(self._unrecognized(namespace.command, extras))
        return namespace

    def _unrecognized(self, command: str, extras: list[str]) -> str:
        """'unrecognized argument --lable; did you mean --label?' for each unknown flag (each value that is not
        one when no flag is unknown)."""
        parsers = self.commands.choices
        messages = []
        for given in [a for a in extras if a.startswith("-")] or extras:
            flag = given.split("=", 1)[0]
            others = [name for name, parser in parsers.items() if name != command and flag in _flags(parser)]
            if others and flag.startswith("-"):
                hint = f"; it is a flag of {', '.join(others)}"
            else:
                hint = _did_you_mean(_closest(flag, _flags(parsers[command]))) if flag.startswith("-") else ""
            messages.append(f"unrecognized argument {given}{hint}")
        return " ".join(messages)


def _add_preflight_command(commands: Any) -> None:
    preflight = commands.add_parser(
        "preflight",
        help="will the model fit a TPU's memory, how fast can a step be, will the input keep up (on this CPU)",
        description="Builds the run's model_fn and train input_fn as the train stage would (the data prepared into a "
        "temporary folder by the prepare stage's code; the same model and data flags as run-local), compiles its "
        "train step with XLA on this CPU and prints: memory per core against the TPU's HBM, the largest per-core "
        "batch that fits, the step's time bound and cost, the input's rate. Nothing runs on a TPU: every figure is "
        "an estimate (docs/preflight.md). Exit 0 when it fits and its input keeps up, 1 when it does not fit or "
        "is input-bound, 2 a bad command line.",
        epilog=_preset_help(experimental=False),
        formatter_class=_TableFormatter,
    )
    preflight.add_argument(
        "--tpu",
        default=tpu_presets.DEFAULT_TPU,
        metavar="TYPE",
        help=f"the Cloud TPU type to plan for (default {tpu_presets.DEFAULT_TPU}; any listed below)",
    )
    preflight.add_argument("--json", action="store_true", help="print the preflight as JSON")
    preflight.add_argument(
        "--region", default="us-central1", help="the region whose prices apply (default %(default)s)"
    )
    preflight.add_argument("--prices", default=cost.PRICES_FILE, metavar="FILE", help="the price table (JSON)")
    add_run_arguments(preflight)
    preflight.set_defaults(engine=INPROCESS, direct_num_workers=None)  # prepared in this process


def _add_vertex_command(commands: Any, name: str, text: str) -> None:
    """`submit` or `schedule`: the flags most runs need first (the `common` group), then the rest by concern."""
    cron = " --cron CRON" if name == "schedule" else ""
    sub = commands.add_parser(
        name,
        help=text,
        description=text + ".",
        usage=f"tpu-pipeline {name} --pipeline-root GS_PREFIX{cron} [--data URI --label COLUMN] [options]",
        epilog=_preset_help(),
        formatter_class=_TableFormatter,
    )
    common = sub.add_argument_group("common")
    add_vertex_arguments(sub, common)
    add_run_arguments(sub, common)
    add_image_arguments(sub, common)
    common.add_argument("--dry-run", action="store_true", help="print the request and its cost; send nothing")
    add_cost_arguments(common)
    add_preflight_arguments(common)
    if name == "schedule":
        add_schedule_arguments(sub, common)
    add_tracking_arguments(sub, "the TPU jobs' logs (default: under --pipeline-root)")
    add_engine_arguments(sub, dataflow=True, vertex_defaults=True)


def build_parser() -> argparse.ArgumentParser:
    parser = _Main(
        prog="tpu-pipeline",
        description="Prepare, train, evaluate, batch-predict and export TPUEstimator models.",
        formatter_class=argparse.HelpFormatter,
    )
    parser.add_argument("--version", action="version", version=version_text(), help="print the versions and exit")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND", parser_class=_Parser)

    run_local = commands.add_parser(
        "run-local",
        help="run the whole pipeline on this machine's CPU (KFP local runner)",
        description="Runs the pipeline on CPU with the KFP local runner, in a folder of its own "
        "(OUTPUT/runs/<id>/: artifacts, pipeline.log, summary.json; OUTPUT/summary.json names the last run). "
        "With no arguments it trains on the embedded Palmer Penguins data. Exit codes: 0 done, 1 a stage failed, "
        "2 a bad command line, 130/143 interrupted (SIGINT/SIGTERM); run the same command again to resume a failed "
        "or interrupted run.",
    )
    add_run_arguments(run_local)
    add_engine_arguments(run_local, dataflow=False)
    add_alert_arguments(run_local.add_argument_group("failure alert (docs/vertex.md#failure-alerts)"), email=False)
    add_stage_limit_arguments(run_local)
    run_local.add_argument("--output", default=DEFAULT_OUTPUT, help=f"output directory (default {DEFAULT_OUTPUT})")
    run_local.add_argument(
        "--verbose",
        action="store_true",
        help="stream every stage's full log to the console, and show a failed stage's traceback (both always go "
        "to the run's pipeline.log)",
    )
    run_local.add_argument(
        "--resume",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="resume the last run into OUTPUT (it failed or was interrupted; same arguments): finished stages are "
        "reused and training continues from its checkpoint. Default: resume it when the arguments are the same; "
        "--no-resume always starts a new run",
    )

    show_ = commands.add_parser(
        "show",
        help="print a past local run's summary: status, metrics, verdict, artifacts, report",
        description="Prints what a local run's record (OUTPUT/runs/<id>/summary.json) says: how it ended (the "
        "failed stage and its error), data, metrics, the verdict, artifacts, the report, the TensorBoard command.",
    )
    show_.add_argument(
        "run", nargs="?", help="a run id under OUTPUT/runs/, a run folder or a summary.json (default: the latest)"
    )
    show_.add_argument("--output", default=DEFAULT_OUTPUT, help=f"output directory (default {DEFAULT_OUTPUT})")
    show_.add_argument("--json", action="store_true", help="print the record itself (summary.json)")

    list_ = commands.add_parser(
        "list",
        help="list the local runs under an output folder, newest first: status, metrics, verdict",
        description="Lists the runs under OUTPUT/runs/, newest first: run id, status, start time, duration, the "
        "headline eval metrics (* marks the one blessing compares on) and the verdict (published, or why not). "
        "A run whose summary.json is missing or unreadable is listed as such.",
    )
    where = list_.add_mutually_exclusive_group()
    where.add_argument("folder", nargs="?", metavar="OUTPUT", help="the same as --output")
    where.add_argument("--output", default=DEFAULT_OUTPUT, help=f"output directory (default {DEFAULT_OUTPUT})")

    _add_record_commands(commands)
    _add_tune_command(commands)
    _add_predict_command(commands)
    _add_preflight_command(commands)

    release_ = commands.add_parser(
        "release",
        help="maintain a publish root: --repair rebuilds a damaged LATEST pointer",
        description="--repair points a damaged PUBLISH_ROOT/LATEST (missing while versions are published, empty, "
        "not JSON, partial, outside its root, or naming a version that is missing or whose files changed) at the "
        "newest intact version under PUBLISH_ROOT/versions/, checking each version's fingerprint; an intact "
        "LATEST is kept. Exit 0 when LATEST is intact afterwards, 1 when no version is intact.",
    )
    release_.add_argument("--repair", action="store_true", required=True, help="rebuild LATEST (the only action)")
    release_.add_argument("--publish-root", required=True, help="the publish root (a directory or gs:// prefix)")

    compile_ = commands.add_parser(
        "compile",
        help="compile the pipeline YAML for Vertex AI",
        description="Writes the pipeline YAML: train, evaluate and batch predict run as Vertex AI custom jobs "
        "on a Cloud TPU VM (or on CPU with --cpu).",
        epilog=_preset_help(),
        formatter_class=_TableFormatter,
    )
    compile_.add_argument("--output", default=DEFAULT_TEMPLATE, help=f"YAML file (default {DEFAULT_TEMPLATE})")
    add_image_arguments(compile_)
    add_tracking_arguments(compile_, "the TPU jobs' logs (required with --tensorboard)")
    add_tuning_arguments(compile_)
    add_engine_arguments(compile_, dataflow=True)

    for name, text in (
        ("submit", "run the pipeline once on Vertex AI"),
        ("schedule", "run the pipeline on Vertex AI on a cron schedule"),
    ):
        _add_vertex_command(commands, name, text)
    return parser
