"""`tpu-pipeline` (also `python -m pipelines`): run the pipeline locally, compile it, submit or schedule it.

The only place that reads flags and environment variables. Each command resolves its flags into typed
settings, checks what can be checked before anything starts (`checks`), and hands them to one function:
`local.run_local`, `pipeline.compile_pipeline`, `vertex.submit`, `vertex.schedule`, `reproduce.reproduce`.

Exit codes: 0 done; 1 a stage failed (run-local: its summary says which, and why; reproduce: a stage's outputs
differ from the record; diff: the runs differ); 2 a bad command line
(checked before anything starts); 128 + the signal when interrupted (130 SIGINT, 143 SIGTERM, 129 SIGHUP).
"""

from __future__ import annotations

import argparse
import csv
import dataclasses
import difflib
import importlib.metadata
import json
import os
import signal
import sys
import tempfile
import textwrap
import warnings
from collections.abc import Sequence
from typing import Any

from google.auth.credentials import AnonymousCredentials
from google.auth.exceptions import DefaultCredentialsError
from google.protobuf import json_format

from estimator_lib import storage, vocabulary
from estimator_lib.config import RUN_TASKS, ConfigError, RunConfig
from estimator_lib.config.alerts import AlertConfig, redact_url
from estimator_lib.config.beam import BEAM, DATAFLOW_RUNNER, ENGINES, BeamConfig
from estimator_lib.config.registry import RegistryConfig
from estimator_lib.config.run import EMBEDDED_DATA, PREPARED_SPLITS, resolve_run
from estimator_lib.config.tuning import check_tunable, load_space
from estimator_lib.data.embedded import default_dataset
from pipelines import checks, cost, listing, local, reproduce, runs, show, vertex
from pipelines import tpu as tpu_presets
from pipelines.image import check_image, default_image
from pipelines.pipeline import PIPELINE_NAME, VertexSteps, compile_pipeline
from pipelines.retry import VERTEX_BACKOFF_SECONDS, VERTEX_RETRIES, RetryPolicy, vertex_policy
from pipelines.tuning_job import TuningPlan

DEFAULT_OUTPUT = os.path.join("runs", "local")
DEFAULT_REPRODUCE_OUTPUT = os.path.join("runs", "reproduce")
DEFAULT_TEMPLATE = "tpu_estimator_pipeline.yaml"
IMAGE_REPO_ENV = "TPU_PIPELINE_IMAGE_REPO"
DEFAULT_IMAGE_REPO = "tpu-pipeline"
REPO_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
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


def _preset_help() -> str:
    rows = "\n".join(
        f"  {name:<12} {machine:<18} {accel:<15} x{count:<3} {f'{cores} cores':<9} {status}"
        for name, machine, accel, count, cores, status in tpu_presets.preset_table()
    )
    return (
        f"TPU types (--tpu):\n{rows}\n"
        "experimental types need --experimental-tpu: TPUEstimator is not known to run on them (docs/vertex.md)"
    )


# -- arguments -----------------------------------------------------------------------------------------------
def _add_key_value_option(group: Any, flag: str, dest: str, help: str) -> None:
    """A repeatable `FLAG KEY=VALUE` option collected in a list (empty when not given)."""
    group.add_argument(flag, dest=dest, action="append", default=[], metavar="KEY=VALUE", help=help)


def _add_run_arguments(parser: argparse.ArgumentParser, common: Any = None) -> None:
    """The run's data and settings; `common` (submit, schedule) is the group that shows --data and --label first."""
    # Without --data and --label the run keeps RunConfig's (the embedded penguins); see resolve_settings.
    defaults = RunConfig.field_defaults()
    group = parser.add_argument_group("pipeline parameters")
    first = common or group
    first.add_argument(
        "--data", metavar="URI", help="CSV or JSON Lines file or glob, local or gs:// (default: embedded penguins)"
    )
    first.add_argument("--label", metavar="COLUMN", help=f"the column to predict (default: {defaults['label']})")
    group.add_argument(
        "--task",
        choices=RUN_TASKS,
        help=f"classification or regression (default: {defaults['task']}, from the label)",
    )
    group.add_argument("--key-column", metavar="COLUMN", help="a column of unique row keys (default: row contents)")
    group.add_argument(
        "--eval-fraction",
        type=float,
        metavar="F",
        help=f"share of rows for evaluation (default: {defaults['eval_fraction']})",
    )
    group.add_argument("--config", metavar="FILE.json", help="JSON config: JobConfig sections, 'blessing', 'prepare'")
    _add_key_value_option(
        group,
        "--set",
        "overrides",
        "override a config value (repeatable), e.g. training.train_steps=300 or model.hidden_units=64,32",
    )
    group.add_argument(
        "--baseline",
        default=defaults["baseline"],
        metavar="MODEL",
        help="compare with: none, latest, a publish root or SavedModel",
    )
    group.add_argument(
        "--warm-start",
        default=defaults["warm_start"],
        metavar="MODEL",
        help="initialise from: none, latest, a publish root or SavedModel",
    )
    group.add_argument(
        "--predict-data",
        default=defaults["predict_data"],
        metavar="ROWS",
        help="rows to batch-predict: eval, train, test, CSV/JSONL rows or TFRecords",
    )
    group.add_argument("--publish-root", metavar="DIR", help="where blessed models are published")
    group.add_argument(
        "--slice",
        dest="slices",
        action="append",
        default=[],
        metavar="FEATURE[,FEATURE]",
        help="eval metrics per value of a feature or cross (repeatable)",
    )
    _add_user_model_arguments(parser)


def _add_user_model_arguments(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("your own model (docs/byom.md)")
    group.add_argument(
        "--model-fn",
        metavar="MODULE:FUNCTION",
        help="your TPUEstimator model_fn, e.g. my_model.model:model_fn",
    )
    group.add_argument(
        "--input-fn",
        metavar="MODULE:FUNCTION",
        help="your training input_fn (with --model-fn), e.g. my_model.data:input_fn",
    )
    group.add_argument("--code", metavar="DIR", help="the folder holding your package")
    group.add_argument(
        "--feature-spec",
        metavar="FILE.json",
        help="your TFRecords' features: name -> dtype and shape",
    )
    group.add_argument("--eval-data", metavar="URI", help="TFRecords to evaluate on (default: split --data)")
    _add_key_value_option(
        group,
        "--hparams",
        "hparams",
        "a model_fn hyperparameter, JSON: units=64 (repeatable)",
    )
    group.add_argument("--hparams-file", metavar="FILE.json", help="model_fn hyperparameters as a JSON object")


def _add_engine_arguments(parser: argparse.ArgumentParser, dataflow: bool, vertex_defaults: bool = False) -> None:
    """--engine, and the Beam runner's settings: this machine's DirectRunner (run-local) or Dataflow;
    `vertex_defaults` (submit, schedule): the Dataflow settings default to the Vertex AI flags'."""
    group = parser.add_argument_group("Apache Beam engine (preparation and batch prediction)")
    group.add_argument(
        "--engine",
        choices=ENGINES,
        default=RunConfig.field_defaults()["engine"],
        help="who prepares and batch-predicts: inprocess or beam ("
        + ("Dataflow" if dataflow else "the DirectRunner")
        + "); the same data either way",
    )
    if not dataflow:
        group.add_argument(
            "--direct-num-workers", type=int, metavar="N", help="DirectRunner worker processes (default: one)"
        )
        return
    default = {
        "project": " (default: --project)" if vertex_defaults else " (required with --engine beam)",
        "region": " (default: --region)" if vertex_defaults else " (required with --engine beam)",
        "temp": " (default: under --pipeline-root)" if vertex_defaults else " (required with --engine beam)",
    }
    group.add_argument("--dataflow-project", metavar="PROJECT", help="Dataflow project" + default["project"])
    group.add_argument("--dataflow-region", metavar="REGION", help="Dataflow region" + default["region"])
    group.add_argument("--dataflow-temp-location", metavar="GS_PREFIX", help="Beam's temporary files" + default["temp"])
    group.add_argument("--dataflow-max-workers", type=int, metavar="N", help="Dataflow autoscaling ceiling")
    group.add_argument("--dataflow-machine-type", metavar="TYPE", help="worker machine type, e.g. n2-standard-4")
    group.add_argument("--dataflow-service-account", metavar="EMAIL", help="service account of the Dataflow workers")


def resolve_beam(
    args: argparse.Namespace, image: str | None = None, vertex: dict[str, str] | None = None
) -> BeamConfig | None:
    """The `BeamConfig` of the engine flags, or None for engine inprocess. With `image` (compile, submit,
    schedule) it is Dataflow with the component image as the workers' container; `vertex` supplies defaults
    (project, region, temp_location) from the Vertex AI flags."""
    if args.engine != BEAM:
        return None
    if image is None:
        return BeamConfig(direct_num_workers=args.direct_num_workers)
    vertex = vertex or {}
    try:
        return BeamConfig(
            runner=DATAFLOW_RUNNER,
            project=args.dataflow_project or vertex.get("project"),
            region=args.dataflow_region or vertex.get("region"),
            temp_location=args.dataflow_temp_location or vertex.get("temp_location"),
            max_workers=args.dataflow_max_workers,
            machine_type=args.dataflow_machine_type,
            sdk_container_image=image,
            service_account=args.dataflow_service_account,
        )
    except ConfigError as e:
        raise ConfigError(
            f"--engine beam: {e}; set it with --dataflow-project, --dataflow-region or --dataflow-temp-location"
        ) from None


def _add_image_arguments(parser: argparse.ArgumentParser, common: Any = None) -> None:
    """The image and the TPU; `common` (submit, schedule) is the group that shows --tpu, --cpu and --image first."""
    group = parser.add_argument_group("image and accelerator")
    first = common or group
    where = first.add_mutually_exclusive_group()
    where.add_argument(
        "--tpu",
        default=tpu_presets.DEFAULT_TPU,
        metavar="TYPE",
        help=f"Cloud TPU type (default {tpu_presets.DEFAULT_TPU}; list below)",
    )
    where.add_argument("--cpu", action="store_true", help="no TPUs: every stage runs on CPU")
    first.add_argument("--image", help="component image: REPO@sha256:DIGEST or REPO:COMMIT")
    group.add_argument(
        "--image-repo",
        default=os.environ.get(IMAGE_REPO_ENV, DEFAULT_IMAGE_REPO),
        metavar="REPO",
        help=f"without --image: REPO:<git commit> (default ${IMAGE_REPO_ENV})",
    )
    group.add_argument(
        "--experimental-tpu",
        action="store_true",
        help="allow TPU types marked experimental below",
    )
    group.add_argument("--tpu-topology", metavar="AxB", help="TPU slice topology (v5e; default: the type's)")
    group.add_argument("--spot", action="store_true", help="TPU jobs on Spot VMs: cheaper, preemptible")
    group.add_argument(
        "--reservation",
        metavar="NAME",
        help="a reservation: projects/P/zones/Z/reservations/NAME",
    )
    _add_retry_arguments(group)


def _add_retry_arguments(group: Any) -> None:
    """The retry policy every task of the compiled pipeline gets (`pipelines.retry`); None: its default. Beside
    --spot: a retry is what a preempted Spot TPU needs."""
    group.add_argument(
        "--retries", type=int, metavar="N", help=f"retry a failed task N times (default {VERTEX_RETRIES})"
    )
    group.add_argument(
        "--retry-backoff",
        type=int,
        metavar="SECONDS",
        help=f"first retry's wait, doubled after (default {VERTEX_BACKOFF_SECONDS})",
    )


def _add_tuning_arguments(parser: argparse.ArgumentParser, group: Any = None) -> None:
    """--tune-space and its trial counts, in `group` (submit, schedule: the Vertex AI job's, to keep help short)."""
    group = group or parser.add_argument_group("hyperparameter tuning on Vertex AI")
    group.add_argument("--tune-space", metavar="FILE", help="tune the train stage first (docs/tuning.md)")
    group.add_argument("--tune-trials", type=int, default=10, metavar="N", help="tuning trials (default %(default)s)")
    group.add_argument("--tune-parallel", type=int, default=1, metavar="K", help="trials at once (default %(default)s)")


def resolve_tuning(args: argparse.Namespace) -> TuningPlan | None:
    """The tuning job --tune-space asks for, its space file checked now; None without it."""
    if not args.tune_space:
        return None
    space = load_space(args.tune_space, read_space_file(args.tune_space, "--tune-space"))
    return TuningPlan(space, args.tune_trials, args.tune_parallel)


def _add_tracking_arguments(parser: argparse.ArgumentParser, log_root_help: str) -> None:
    group = parser.add_argument_group("Vertex AI tracking: TensorBoard, Experiments, Model Registry, failure alerts")
    group.add_argument(
        "--tensorboard",
        metavar="RESOURCE",
        help="TensorBoard: projects/P/locations/R/tensorboards/ID",
    )
    group.add_argument("--tensorboard-logs", metavar="GS_PREFIX", help=log_root_help)
    group.add_argument("--experiment", metavar="NAME", help="a Vertex AI Experiment every run joins")
    group.add_argument(
        "--model-registry",
        metavar="NAME",
        help="register published models as versions of NAME",
    )
    group.add_argument(
        "--serving-image",
        default="",
        metavar="IMAGE",
        help="registered versions' container (default: TF 2.15 CPU)",
    )
    _add_alert_arguments(group)


def _add_alert_arguments(group: Any, email: bool = True) -> None:
    """--notify-webhook (and, for Vertex AI, --notify-email): who hears of a run that did not succeed."""
    if email:
        group.add_argument(
            "--notify-email",
            dest="notify_emails",
            action="append",
            default=[],
            metavar="ADDRESS",
            help="Vertex AI's email when a run ends (repeatable)",
        )
    group.add_argument("--notify-webhook", default="", metavar="URL", help="POST the failed stage and error to URL")


def resolve_alerts(args: argparse.Namespace) -> AlertConfig:
    """The alerts the flags ask for (`AlertConfig` checks them)."""
    return AlertConfig(emails=tuple(getattr(args, "notify_emails", ())), webhook=args.notify_webhook)


def _add_vertex_arguments(parser: argparse.ArgumentParser, common: Any) -> None:
    """Where and how the job runs; `common` shows --project, --region, --pipeline-root and --dry-run."""
    common.add_argument(
        "--project",
        default=os.environ.get("GOOGLE_CLOUD_PROJECT"),
        help="Google Cloud project (default $GOOGLE_CLOUD_PROJECT)",
    )
    common.add_argument("--region", default="us-central1", help="Vertex AI region (default %(default)s)")
    common.add_argument(
        "--pipeline-root", required=True, metavar="GS_PREFIX", help="gs:// prefix for the run's artifacts"
    )
    group = parser.add_argument_group("Vertex AI job")
    group.add_argument("--service-account", metavar="EMAIL", help="the account the pipeline and its jobs run as")
    group.add_argument("--network", help="VPC network: projects/NUMBER/global/networks/NAME")
    _add_key_value_option(group, "--job-label", "job_labels", "resource label on the job (repeatable)")
    group.add_argument(
        "--no-caching",
        dest="caching",
        action="store_false",
        default=None,
        help="rerun every task, even one whose inputs are unchanged",
    )
    group.add_argument(
        "--display-name",
        default=PIPELINE_NAME,
        metavar="NAME",
        help="the job's name in the Vertex AI console",
    )
    group.add_argument("--template", metavar="YAML", help="a compiled pipeline (default: compile one now)")
    _add_tuning_arguments(parser, group)


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
    diff.add_argument("run_a", metavar="RUN_A", help="a run's summary.json, its folder or OUTPUT")
    diff.add_argument("run_b", metavar="RUN_B", help="a run's summary.json, its folder or OUTPUT")


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
    _add_run_arguments(tune_)
    _add_engine_arguments(tune_, dataflow=False)
    tune_.add_argument("--output", default=DEFAULT_OUTPUT, help=f"output directory (default {DEFAULT_OUTPUT})")
    tune_.add_argument("--verbose", action="store_true", help="stream the winner's pipeline log to the console")


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


class _Parser(argparse.ArgumentParser):
    """Every command's parser formats its help with `_Formatter` unless it asks for another."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("formatter_class", _Formatter)
        super().__init__(*args, **kwargs)


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
    _add_vertex_arguments(sub, common)
    _add_run_arguments(sub, common)
    _add_image_arguments(sub, common)
    common.add_argument("--dry-run", action="store_true", help="print the request and its cost; send nothing")
    _add_cost_arguments(common)
    if name == "schedule":
        _add_schedule_arguments(sub, common)
    _add_tracking_arguments(sub, "the TPU jobs' logs (default: under --pipeline-root)")
    _add_engine_arguments(sub, dataflow=True, vertex_defaults=True)


def _add_cost_arguments(group: Any) -> None:
    """What --dry-run's cost estimate reads: the price table and the hours each stage is expected to run."""
    group.add_argument("--prices", default=cost.PRICES_FILE, metavar="FILE", help="--dry-run's price table (JSON)")
    group.add_argument(
        "--expected-hours",
        action="append",
        default=[],
        metavar="STAGE=H",
        help="--dry-run: a stage's hours, e.g. train=3",
    )


def _add_schedule_arguments(parser: argparse.ArgumentParser, common: Any) -> None:
    common.add_argument("--cron", required=True, help="e.g. '0 3 * * 1' (UTC; or prefix TZ=Zone/Name)")
    group = parser.add_argument_group("schedule")
    group.add_argument(
        "--schedule-name",
        default="tpu-estimator-retrain",
        metavar="NAME",
        help="the schedule's name (default %(default)s)",
    )
    group.add_argument(
        "--max-concurrent-runs", type=int, default=1, metavar="N", help="runs at once at most (default %(default)s)"
    )
    group.add_argument("--max-runs", type=int, metavar="N", help="stop after N runs (default: no limit)")
    group.add_argument("--start-time", metavar="TIME", help="RFC 3339 time of the first run (default: now)")
    group.add_argument("--end-time", metavar="TIME", help="RFC 3339 time after which no run starts")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="tpu-pipeline",
        description="Prepare, train, evaluate, batch-predict and export TPUEstimator models.",
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
    _add_run_arguments(run_local)
    _add_engine_arguments(run_local, dataflow=False)
    _add_alert_arguments(run_local.add_argument_group("failure alert (docs/vertex.md#failure-alerts)"), email=False)
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
    list_.add_argument(
        "output", nargs="?", default=DEFAULT_OUTPUT, help=f"the run-local output folder (default {DEFAULT_OUTPUT})"
    )

    _add_record_commands(commands)
    _add_tune_command(commands)

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
    _add_image_arguments(compile_)
    _add_tracking_arguments(compile_, "the TPU jobs' logs (required with --tensorboard)")
    _add_tuning_arguments(compile_)
    _add_engine_arguments(compile_, dataflow=True)

    for name, text in (
        ("submit", "run the pipeline once on Vertex AI"),
        ("schedule", "run the pipeline on Vertex AI on a cron schedule"),
    ):
        _add_vertex_command(commands, name, text)
    return parser


# -- resolution ----------------------------------------------------------------------------------------------
def read_config_file(path: str | None, flag: str = "--config") -> dict[str, Any]:
    """The JSON object in `path` (local or gs://), or {} without a path."""
    if not path:
        return {}
    what = "JSON config file" if flag == "--config" else "JSON file"
    try:
        return json.loads(storage.read_text(path))
    except FileNotFoundError:
        raise ConfigError(f"{flag} {path}: no such file; give the path of a {what}") from None
    except IsADirectoryError:
        raise ConfigError(f"{flag} {path}: is a directory; give the path of a {what}") from None
    except json.JSONDecodeError as e:
        raise ConfigError(f"{flag} {path}: not valid JSON ({e})") from e


def resolve_settings(
    args: argparse.Namespace,
    publish_root: str,
    job_defaults: dict[str, Any] | None = None,
    beam: BeamConfig | None = None,
    placed: bool = False,
) -> RunConfig:
    """The run's `RunConfig` from its flags, config file and `--set` overrides (`config.resolve_run`, where every
    check of a value happens); `job_defaults` are dotted job keys this command defaults (the file and `--set`
    override them); `beam` is the engine's `BeamConfig` (`resolve_beam`); `placed` (submit and schedule when
    they compile for a TPU): the job's tpu settings are the TPU's, as the compiled train stage runs with."""
    label_set = any(text.partition("=")[0].strip() == "prepare.label" for text in args.overrides)
    if args.data and not (args.label or label_set):
        raise ValueError("--label is required with --data: name the column to predict")
    overrides = [*user_model_overrides(args), *slice_overrides(args), *args.overrides]
    given = {
        "publish_root": args.publish_root or publish_root,
        "data": args.data,
        "label": args.label,
        "task": args.task,
        "key_column": args.key_column,
        "eval_fraction": args.eval_fraction,
        "baseline": args.baseline,
        "warm_start": args.warm_start,
        "predict_data": args.predict_data,
        "engine": args.engine,
        "beam": beam,
        "feature_spec": args.feature_spec,
        "eval_data": args.eval_data,
    }
    config = read_config_file(args.config)
    settings = resolve_run(config, overrides, given, job_defaults)
    if getattr(args, "cpu", True):
        return settings
    # submit and schedule for a TPU: the batch sizes against the preset's cores, then (`placed`) the specs placed
    # on it, so that what the run records and --dry-run shows says where it trains.
    preset = tpu_presets.preset(args.tpu, experimental=args.experimental_tpu)
    checks.tpu_target(settings.job, preset.tpu_settings()["num_cores"], f"--tpu {preset.name}")
    if not placed:
        return settings
    placement = {f"tpu.{k}": v for k, v in preset.tpu_settings().items()}
    return resolve_run(config, overrides, given, {**(job_defaults or {}), **placement})


def _hparam_value(text: str) -> Any:
    """A `--hparams KEY=VALUE` value: JSON (an int stays an int, a list a list), else the text itself."""
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        return text


def read_hparams(args: argparse.Namespace) -> dict[str, Any]:
    """The model_fn's hyperparameters: `--hparams-file`'s JSON object, with each `--hparams KEY=VALUE` over it."""
    hparams: dict[str, Any] = {}
    if args.hparams_file:
        loaded = read_config_file(args.hparams_file, "--hparams-file")
        if not isinstance(loaded, dict):
            raise ConfigError(f"--hparams-file {args.hparams_file}: must hold a JSON object {{name: value}}")
        hparams.update(loaded)
    for text in args.hparams:
        key, sep, value = text.partition("=")
        if not sep or not key.strip():
            raise ConfigError(f"--hparams {text}: expected KEY=VALUE, e.g. --hparams units=64")
        hparams[key.strip()] = _hparam_value(value)
    return hparams


def user_model_overrides(args: argparse.Namespace) -> list[str]:
    """The user-model flags as `--set` texts (the same path as every setting): model.model_fn, model.input_fn,
    model.code and model.hparams (a JSON object, so its values keep their JSON types)."""
    out = []
    if args.model_fn:
        out.append(f"model.model_fn={args.model_fn}")
    if args.input_fn:
        out.append(f"model.input_fn={args.input_fn}")
    if args.code:
        out.append(f"model.code={args.code}")
    hparams = read_hparams(args)
    if hparams or args.hparams_file:
        out.append("model.hparams=" + json.dumps(hparams, sort_keys=True))
    return out


def slice_overrides(args: argparse.Namespace) -> list[str]:
    """`--slice` flags as one `--set blessing.slices=[...]` (a JSON list: a cross holds a comma)."""
    return ["blessing.slices=" + json.dumps(args.slices, ensure_ascii=False)] if args.slices else []


def local_csv_header(settings: RunConfig) -> tuple[str, list[str]] | None:
    """(file, columns) of the run's first data file when it is a local CSV (the embedded data included); None
    for other data, which the prepare stage checks before its work."""
    path = default_dataset().path if settings.data == EMBEDDED_DATA else settings.data
    files = [] if storage.is_gcs(path) else sorted(storage.glob(path))
    if not files or not files[0].lower().endswith(".csv"):
        return None
    with open(files[0], newline="", encoding="utf-8-sig") as f:
        return files[0], next(csv.reader(f), [])


def check_label_column(settings: RunConfig, flag: str = "--label") -> None:
    """A built-in family's label is a column of its local CSV data, checked before any stage starts.

    Raises:
      checks.UsageError: naming the file, the label given, the closest column names and the fix.
    """
    found = None if settings.job.model.model_fn else local_csv_header(settings)
    if found is None or settings.label in found[1]:
        return
    path, header = found
    close = difflib.get_close_matches(settings.label, header, n=3, cutoff=0.5)
    lowered = [c for c in header if c.lower() == settings.label.lower() and c not in close]
    close = lowered + close
    hint = f"did you mean {' or '.join(repr(c) for c in close)}? " if close else ""
    raise checks.UsageError(
        f"{flag} {settings.label!r} is not a column of {path}; {hint}give one of its columns: {', '.join(header)} "
        f"(e.g. {flag} {(close or header)[0]})"
    )


def check_slice_columns(settings: RunConfig) -> None:
    """A built-in family's `--slice` features are columns of its local CSV data (the first file's header, the
    label and key apart), checked before any stage starts; other data is checked by the evaluate stage, before
    its work (a user model's local feature spec when the run is resolved)."""
    if not settings.blessing.slices or settings.job.model.model_fn:
        return
    found = local_csv_header(settings)
    if found is None:
        return
    path, header = found
    features = [c for c in header if c not in (settings.label, settings.key_column)]
    settings.blessing.check_slice_features(features, f"columns of {path} (the label and key apart)")


def resolve_image(args: argparse.Namespace) -> str:
    if args.image:
        return check_image(args.image)
    image = default_image(args.image_repo, REPO_DIR)
    if "/" not in args.image_repo:
        print(
            f"note: components will run on {image}; build and push it to a registry Vertex AI can pull from "
            f"and pass --image-repo (or ${IMAGE_REPO_ENV})",
            file=sys.stderr,
        )
    return image


# Flags that change the compiled pipeline: `--template` (already compiled) cannot take them.
COMPILED_FLAGS = {
    "--experimental-tpu": "experimental_tpu",
    "--tpu-topology": "tpu_topology",
    "--spot": "spot",
    "--reservation": "reservation",
    "--tensorboard": "tensorboard",
    "--experiment": "experiment",
    "--model-registry": "model_registry",
    "--notify-email": "notify_emails",
    "--notify-webhook": "notify_webhook",
    "--retries": "retries",
    "--retry-backoff": "retry_backoff",
    "--tune-space": "tune_space",
}


def resolve_target(args: argparse.Namespace, log_root: str | None = None) -> tpu_presets.TPUTarget | None:
    """Where the TPU stages run (None: every stage on CPU), with their capacity and TensorBoard settings."""
    if args.cpu:
        given = [flag for flag in ("--tpu-topology", "--spot", "--reservation", "--tensorboard") if _flag(args, flag)]
        if given:
            raise ValueError(
                f"{given[0]} applies to the TPU custom jobs, and with --cpu no stage runs as one: "
                f"drop --cpu or {given[0]}"
            )
        return None
    return tpu_presets.TPUTarget(
        tpu_presets.preset(args.tpu, experimental=args.experimental_tpu),
        spot=args.spot,
        reservation=args.reservation,
        topology=args.tpu_topology,
        tensorboard=args.tensorboard,
        log_root=args.tensorboard_logs or log_root,
    )


def resolve_steps(args: argparse.Namespace) -> VertexSteps:
    """The Vertex AI steps the flags ask for: joining an Experiment, registering blessed models."""
    if args.serving_image and not args.model_registry:
        raise ValueError("--serving-image is the registered versions' container: give --model-registry too")
    registry = None
    if args.model_registry is not None:
        registry = RegistryConfig(display_name=args.model_registry, serving_image=args.serving_image)
    return VertexSteps(
        experiment=vertex.check_experiment(args.experiment) if args.experiment is not None else None,
        registry=registry,
        alerts=resolve_alerts(args),
    )


def resolve_retry(args: argparse.Namespace) -> RetryPolicy:
    """The retry policy of every task: --retries and --retry-backoff, or their defaults."""
    return vertex_policy(args.retries, args.retry_backoff)


def _flag(args: argparse.Namespace, flag: str) -> bool:
    value = getattr(args, COMPILED_FLAGS[flag])  # --retries 0 is given; an empty --notify-email list is not
    return not (value is None or value is False or (isinstance(value, (str, list)) and not value))


def describe_compiled(
    tpu: tpu_presets.TPUTarget | None, steps: VertexSteps, retry: RetryPolicy | None = None
) -> dict[str, Any]:
    """What the compiled pipeline fixes: the TPU custom jobs' machine, capacity and TensorBoard, the Vertex AI
    steps, the failure alerts, every task's retry policy. Shown by --dry-run beside the PipelineJob request (whose
    pipeline spec is left out: it is long)."""
    described: dict[str, Any] = {
        "experiment": steps.experiment,
        "modelRegistry": steps.registry.to_dict() if steps.registry else None,
        "tpuJobs": None,
    }
    if steps.alerts.wanted:  # the webhook redacted: its URL may hold a token
        described["alerts"] = steps.alerts.described()
    if retry is not None:
        described["retryPolicy"] = dataclasses.asdict(retry)
    if tpu is not None:
        described["tpuJobs"] = {
            "tpu": tpu.preset.name,
            "machineSpec": tpu.machine_spec(),
            "scheduling": {"strategy": tpu_presets.SPOT if tpu.spot else tpu_presets.STANDARD},
            "env": dict(tpu.preset.env),
            "tensorboard": tpu.tensorboard,
            "baseOutputDirectory": tpu.base_output_directory("STAGE", "PIPELINE_JOB_UUID"),
        }
    return described


# -- commands ------------------------------------------------------------------------------------------------
def _local_path(uri: str) -> str:
    """A local path made absolute (a trailing "/" kept: it says "directory"); URIs and embedded data as they are."""
    if not uri or "://" in uri or uri.startswith("embedded:"):
        return uri
    return os.path.abspath(uri) + ("/" if uri.endswith("/") else "")


def _local_data_override(text: str) -> str:
    """`--set prepare.data=rows.csv` with the path made absolute, as --data's is (the run records it)."""
    key, sep, value = text.partition("=")
    return f"{key}{sep}{_local_path(value)}" if key.strip() == "prepare.data" and "," not in value else text


def cmd_run_local(args: argparse.Namespace) -> int:
    output = checks.output_directory(args.output)
    settings = resolve_local_settings(args, output)
    outcome = local.run_local(settings, output, verbose=args.verbose, resume=args.resume, alerts=resolve_alerts(args))
    summary = outcome.summary
    if summary["status"] == runs.OK:
        print(format_summary(summary, os.path.join(output, runs.SUMMARY_FILE)))
        return outcome.exit_code
    print(format_failure(summary, args.verbose), file=sys.stderr)
    return outcome.exit_code


def resolve_local_settings(args: argparse.Namespace, output: str) -> RunConfig:
    """A local run's (run-local, tune) `RunConfig`, its local paths made absolute, checked before it starts."""
    if args.data:
        args.data = _local_path(args.data)
    if args.predict_data not in PREPARED_SPLITS:
        args.predict_data = _local_path(args.predict_data)
    for name in ("code", "feature_spec", "eval_data"):
        setattr(args, name, _local_path(getattr(args, name)) or None)
    args.overrides = [_local_data_override(text) for text in args.overrides]
    settings = resolve_settings(
        args, os.path.join(output, local.PUBLISH_DIR), local.local_job_defaults(), beam=resolve_beam(args)
    )
    checks.local_run(settings)
    check_label_column(settings, "--label" if args.label else "prepare.label")
    check_slice_columns(settings)
    return settings


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
    if summary["status"] == runs.OK:
        print(format_summary(summary, os.path.join(output, runs.SUMMARY_FILE)))
    else:
        print(format_failure(summary, args.verbose), file=sys.stderr)
    return outcome.run.exit_code


def read_space_file(path: str, flag: str = "--space") -> str:
    """The text of a search space file (local or gs://)."""
    try:
        return storage.read_text(path)
    except (FileNotFoundError, IsADirectoryError):
        raise ConfigError(f"{flag} {path}: no such file; give the path of a YAML or JSON search space") from None


def format_failure(summary: dict[str, Any], verbose: bool) -> str:
    """A failed or interrupted run: the error's first line first, then where the full log is and what to do."""
    run = summary["run"]
    if summary["status"] == runs.INTERRUPTED:
        lines = [f"tpu-pipeline run-local: {summary['error']} during {summary['stage'] or 'start-up'}"]
    else:
        lines = [f"tpu-pipeline run-local: error: {summary['stage']}: {summary['error']}"]
        if verbose:
            lines += [local.failure_excerpt(run["log"])]
    lines += [
        f"full log: {run['log']}",
        f"run {run['id']} is recorded as {summary['status']}; run the same command again to resume it (finished "
        "stages are reused, training continues from its last checkpoint)",
    ]
    return "\n".join(lines)


def format_summary(summary: dict[str, Any], path: str) -> str:
    metrics = summary["metrics"]
    run = summary["run"]
    lines = [
        f"pipeline finished: run {run['id']}" + (f" (attempt {run['attempts']})" if run["attempts"] > 1 else ""),
        *format_data(summary["data"]),
        *([f"  data validation: {summary['validation']['summary']}"] if summary.get("validation") else []),
        "  metrics (eval): " + vocabulary.format_metrics(metrics, vocabulary.headline(metrics)),
        *([f"  {show.strict_line(summary['strict'])}"] if summary.get("strict") else []),
        f"  blessed: {summary['blessed']} ({summary['blessing']['summary']})",
        f"  predictions: {summary['predictions']['count']} rows in {summary['predictions']['uri']}",
        f"  export: {summary['export']['uri']} (tag sets {summary['export']['tag_sets']})",
        f"  {summary['export']['reason']}",
        f"  report: {summary['report']}",
        f"  TensorBoard: tensorboard --logdir {summary['tensorboard_logdir']}",
        f"summary: {path}",
    ]
    return "\n".join(lines)


def format_data(data: dict[str, Any]) -> list[str]:
    """The data lines: rows per split, and what a user should look at (quarantined rows, empty columns, and the
    prepared manifest's notes as warnings: a capped vocabulary, a constant column, a class without rows)."""
    counts = ", ".join(f"{split} {data['counts'][split]}" for split in PREPARED_SPLITS if data["counts"].get(split))
    lines = [f"  data: {data['rows']} rows ({counts})"]
    if data["quarantined"]:
        lines.append(f"  quarantined: {data['quarantined']} bad rows set aside in {data['quarantine_uri']}")
    for split, columns in data["columns_all_missing"].items():
        lines.append(f"  no value in any {split} row: {', '.join(columns)}")
    return lines + [f"  warning: {note}" for note in data.get("notes", [])]


def cmd_show(args: argparse.Namespace) -> int:
    path = show.find_summary(args.output, args.run)
    summary = show.load_summary(path)
    print(json.dumps(summary, indent=2, sort_keys=True) if args.json else show.format_run(summary, path))
    return 0


def cmd_list(args: argparse.Namespace) -> int:
    print(listing.format_runs(args.output, listing.list_runs(args.output)))
    return 0


def cmd_compile(args: argparse.Namespace) -> int:
    tpu = resolve_target(args)
    steps = resolve_steps(args)
    image = resolve_image(args)
    beam = resolve_beam(args, image)
    retry = resolve_retry(args)
    tuning = resolve_tuning(args)
    compile_pipeline(args.output, image, tpu, steps, beam, retry=retry, tuning=tuning)
    engine = f"; prepare and batch predict on Dataflow ({beam.region})" if beam else ""
    print(f"compiled {args.output}: image {image}; {_where(tpu, beam is not None)}{engine}")
    if retry.retries:
        print(f"  a failed task is retried up to {retry.retries} times, the first after {retry.backoff_seconds} s")
    if steps.experiment:
        print(f"  every run joins the Vertex AI Experiment {steps.experiment!r}")
    if steps.registry:
        print(f"  blessed models become versions of the registry model {steps.registry.display_name!r}")
    if steps.alerts.wanted:
        print(f"  {_alerts_line(steps.alerts)}")
    if tuning:
        print(
            f"  a tuning job of {tuning.trials} trials ({tuning.parallel} at once) over {args.tune_space} picks the "
            f"train spec by {tuning.space.metric} on the validation split"
        )
    return 0


def _alerts_line(alerts: AlertConfig) -> str:
    if alerts.emails:
        return f"Vertex AI emails {', '.join(alerts.emails)} when a run ends"
    return f"a run that fails posts an alert to {redact_url(alerts.webhook)}"


def _where(tpu: tpu_presets.TPUTarget | None, beam: bool = False) -> str:
    stages = "train/evaluate" if beam else "train/evaluate/batch predict"
    if tpu is None:
        return f"{stages} on CPU"
    p = tpu.preset
    text = f"{stages} on TPU {p.name} ({p.machine_type}, {p.accelerator_type} x{p.accelerator_count}"
    text += f", topology {tpu.topology})" if tpu.topology else ")"
    if tpu.spot:
        text += " on Spot VMs"
    if tpu.reservation:
        text += f" from reservation {tpu.reservation}"
    if tpu.tensorboard:
        text += f"; logs to TensorBoard {tpu.tensorboard}"
    return text


def _vertex_job(args: argparse.Namespace, template_dir: str, credentials: Any = None):
    cost_inputs = _cost_inputs(args)
    target = vertex.VertexTarget(
        project=args.project or "",
        location=args.region,
        pipeline_root=args.pipeline_root,
        display_name=args.display_name,
        service_account=args.service_account,
        network=args.network,
        labels=dict(vertex.parse_label(t) for t in args.job_labels),
        enable_caching=args.caching,
    )
    if args.dry_run and credentials is None:  # nothing is sent: no need for real credentials
        credentials = AnonymousCredentials()
    image = resolve_image(args) if args.engine == BEAM or not args.template else ""
    beam = resolve_beam(args, image, _dataflow_defaults(args))
    from pipelines import staging  # builds a wheel with the user package's code: TensorFlow is imported

    staged = staging.stage_user_files(args.code, args.feature_spec, args.pipeline_root, upload=not args.dry_run)
    args.code, args.feature_spec = staged.code, staged.feature_spec
    publish_root = args.pipeline_root.rstrip("/") + "/published"
    settings = resolve_settings(args, publish_root, beam=beam, placed=not args.template)
    tuning = None if args.template else resolve_tuning(args)
    if tuning is not None:
        check_tunable(tuning.space, settings.job)
    template = args.template
    compiled: dict[str, Any] = {"template": template}
    tpu = None
    if template:
        given = [flag for flag in COMPILED_FLAGS if _flag(args, flag)]
        if given:
            raise ValueError(
                f"{given[0]} is applied when the pipeline is compiled, and --template {template} is compiled "
                f"already: drop --template (submit and schedule compile), or compile the template with {given[0]}"
            )
    else:
        tpu = resolve_target(args, log_root=args.pipeline_root)
        if tpu is not None and tpu.tensorboard:
            vertex.check_tensorboard(tpu.tensorboard, target)
        steps = resolve_steps(args)
        retry = resolve_retry(args)
        template_path = os.path.join(template_dir, DEFAULT_TEMPLATE)
        template = compile_pipeline(template_path, image, tpu, steps, beam, retry=retry, tuning=tuning)
        compiled = describe_compiled(tpu, steps, retry)
    arguments = settings.arguments()
    if args.code or args.feature_spec:
        compiled["user_files"] = staged.described
    compiled["plan"] = _plan(args, target, image, tpu if not args.template else None, beam is not None)
    if cost_inputs:
        train_steps = settings.job.training.train_steps
        compiled["plan"] = vertex.with_cost_estimate(compiled["plan"], cost_inputs[0], train_steps, cost_inputs[1])
    return vertex.build_job(template, target, arguments, credentials=credentials), target, compiled, arguments


def _plan(args: argparse.Namespace, target: vertex.VertexTarget, image: str, tpu: Any, on_beam: bool) -> dict[str, Any]:
    """--dry-run's summary of where the job runs (`vertex.describe_run`); a given --template fixes its own
    machines, which are not read back from it."""
    template = (
        args.template or f"{DEFAULT_TEMPLATE}, compiled now from this checkout (`tpu-pipeline compile` keeps one)"
    )
    plan = vertex.describe_run(target, template, image, tpu, ("prepare", "batch_predict") if on_beam else ())
    if args.template:
        plan["stages"] = f"as compiled in --template {args.template}"
    return plan


def _cost_inputs(args: argparse.Namespace) -> tuple[cost.PriceTable, dict[str, float]] | None:
    """--dry-run's price table and expected hours, read before anything is compiled or staged; None without
    --dry-run, which alone prints an estimate."""
    if not args.dry_run:
        if args.expected_hours or args.prices != cost.PRICES_FILE:
            raise ValueError(
                "--prices and --expected-hours shape --dry-run's cost estimate: add --dry-run, or drop them"
            )
        return None
    return cost.read_prices(args.prices), cost.parse_expected_hours(args.expected_hours, tuple(vertex.CACHED))


def _print_cost(plan: dict[str, Any]) -> None:
    """The cost estimate as a table, on stderr: stdout holds the request as JSON."""
    total = plan.get(vertex.COST_TOTAL_KEY)
    if total is None:
        print("cost estimate: none (a given --template fixes its own machines)", file=sys.stderr)
        return
    costs = {stage: placed[vertex.COST_ESTIMATE_KEY] for stage, placed in plan["stages"].items()}
    print(cost.format_estimate(costs, total), file=sys.stderr)


def _dataflow_defaults(args: argparse.Namespace) -> dict[str, str]:
    """The Dataflow settings the Vertex AI flags imply: the same project and region, temporary files under
    the pipeline root."""
    return {
        "project": args.project,
        "region": args.region,
        "temp_location": args.pipeline_root.rstrip("/") + "/dataflow-tmp",
    }


def _print_request(job: Any, arguments: dict[str, Any], extra: dict[str, Any] | None = None) -> None:
    """The request as JSON with `extra`; the plan of the "compiled" entry (`_plan`) is printed on its own."""
    extra = dict(extra or {})
    if "compiled" in extra:
        compiled = dict(extra["compiled"])
        extra = {"plan": compiled.pop("plan", None), **extra, "compiled": compiled}
    request = json_format.MessageToDict(job._gca_resource._pb)  # the PipelineJob resource the SDK would create
    request.pop("pipelineSpec", None)
    # The request carries every number as a protobuf float (8 -> 8.0); print the arguments it was built from.
    request["runtimeConfig"]["parameterValues"] = arguments
    print(json.dumps({**request, **(extra or {})}, indent=2, sort_keys=True))


def cmd_submit(args: argparse.Namespace, credentials: Any = None) -> int:
    with tempfile.TemporaryDirectory() as template_dir:
        job, target, compiled, arguments = _vertex_job(args, template_dir, credentials)
        if args.dry_run:
            extra = {"serviceAccount": target.service_account, "network": target.network, "compiled": compiled}
            _print_request(job, arguments, extra)
            _print_cost(compiled["plan"])
            return 0
        vertex.submit(job, target)
    print(f"submitted {job.resource_name}")
    return 0


def cmd_schedule(args: argparse.Namespace, credentials: Any = None) -> int:
    vertex.check_cron(args.cron)
    with tempfile.TemporaryDirectory() as template_dir:
        job, target, compiled, arguments = _vertex_job(args, template_dir, credentials)
        if args.dry_run:
            extra = {
                "cron": args.cron,
                "scheduleName": args.schedule_name,
                "serviceAccount": target.service_account,
                "network": target.network,
                "compiled": compiled,
            }
            _print_request(job, arguments, extra)
            _print_cost(compiled["plan"])
            return 0
        created = vertex.schedule(
            job,
            target,
            args.cron,
            args.schedule_name,
            args.max_concurrent_runs,
            args.max_runs,
            args.start_time,
            args.end_time,
        )
    print(f"scheduled {created.resource_name} ({args.cron})")
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
    a, b = reproduce.read_record(args.run_a), reproduce.read_record(args.run_b)
    found = reproduce.diff_records(a, b)
    print(reproduce.format_diff(a, b, found))
    return 1 if any(found.values()) else 0


def cmd_release(args: argparse.Namespace) -> int:
    from estimator_lib import release  # it loads TensorFlow (its export stage); no other command may

    repair = release.repair_latest(args.publish_root)  # no intact version: NoIntactVersionError, exit 1
    print("\n".join(repair.lines()))
    return 0


COMMANDS = {
    "run-local": cmd_run_local,
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


def main(argv: Sequence[str] | None = None, credentials: Any = None) -> int:
    """Entry point. `credentials` (google-auth) is for callers that bring their own; the CLI uses ADC."""
    # google-api-core warns on every import about Python versions it will drop in 2027; not actionable here.
    warnings.filterwarnings("ignore", category=FutureWarning, module=r"google\.")
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")  # before anything imports TensorFlow
    args = build_parser().parse_args(argv)
    command = COMMANDS[args.command]
    try:
        if args.command in ("submit", "schedule"):
            return command(args, credentials)
        return command(args)
    except KeyboardInterrupt:  # Ctrl-C before a run started (during one, run-local stops it and reports)
        print(f"tpu-pipeline {args.command}: interrupted", file=sys.stderr)
        return 128 + signal.SIGINT
    except (ValueError, FileNotFoundError) as e:
        print(f"tpu-pipeline {args.command}: error: {e}", file=sys.stderr)
        return 2
    except DefaultCredentialsError:
        print(
            f"tpu-pipeline {args.command}: error: no Google Cloud credentials; run "
            "`gcloud auth application-default login` (or set GOOGLE_APPLICATION_CREDENTIALS), or use --dry-run",
            file=sys.stderr,
        )
        return 2
    except RuntimeError as e:
        print(f"tpu-pipeline {args.command}: error: {e}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
