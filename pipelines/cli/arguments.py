"""The command line's groups of flags, each added to the parsers of the commands that take it."""

from __future__ import annotations

import argparse
import contextlib
import math
import os
from typing import Any

from estimator_lib.cloud import cost
from estimator_lib.config import RUN_TASKS, RunConfig
from estimator_lib.config.beam import ENGINES
from estimator_lib.config.skew import SKEW_MODES, SkewConfig
from estimator_lib.config.stages import STAGE_TIMEOUT_FLAG, StageLimits
from pipelines import tpu as tpu_presets
from pipelines.cli.settings import DEFAULT_IMAGE_REPO, IMAGE_REPO_ENV
from pipelines.pipeline import PIPELINE_NAME
from pipelines.retry import VERTEX_BACKOFF_SECONDS, VERTEX_RETRIES


class _KeyValues(argparse.Action):
    """Collects `FLAG KEY=VALUE` texts in a list; a KEY given twice is refused, naming it (none wins silently)."""

    def __call__(self, parser: Any, namespace: Any, value: Any, option_string: Any = None) -> None:
        given = getattr(namespace, self.dest)
        key = value.partition("=")[0].strip()
        earlier = next((text for text in given if text.partition("=")[0].strip() == key), None)
        if earlier is not None:
            raise argparse.ArgumentError(self, f"{key} is given twice ({earlier}, then {value}); give it once")
        setattr(namespace, self.dest, [*given, value])


def _add_key_value_option(group: Any, flag: str, dest: str, help: str) -> None:
    """A repeatable `FLAG KEY=VALUE` option collected in a list (empty when not given), each KEY once."""
    group.add_argument(flag, dest=dest, action=_KeyValues, default=[], metavar="KEY=VALUE", help=help)


def add_skew_arguments(parser: argparse.ArgumentParser) -> None:
    """`predict`'s skew check of the rows against the model's training profile (docs/predict_export.md)."""
    group = parser.add_argument_group("skew check (the rows scored against the model's training data)")
    group.add_argument(
        "--skew",
        choices=SKEW_MODES,
        default=SkewConfig().skew,
        help="off, warn (skew.json beside the predictions; the default) or block (nothing is published when a "
        "feature is beyond its threshold)",
    )
    _add_key_value_option(
        group,
        "--set",
        "overrides",
        "a threshold of the check (repeatable), e.g. predict.max_distance=0.3 or "
        'predict.features=\'{"island": {"max_unseen_share": 0.5}}\'',
    )


def add_run_arguments(parser: argparse.ArgumentParser, common: Any = None) -> None:
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
        help="compare with: auto (latest of this label), none, latest, a publish root or SavedModel",
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


def _minutes(text: str) -> float:
    """A positive, finite number of minutes; argparse names the flag when it is not one."""
    with contextlib.suppress(ValueError):
        if 0 < float(text) < math.inf:
            return float(text)
    raise argparse.ArgumentTypeError(f"{text!r} is not a positive number of minutes, e.g. 90")


def add_stage_limit_arguments(parser: argparse.ArgumentParser) -> None:
    """run-local's `StageLimits`: --stage-timeout and --stage-silence."""
    group = parser.add_argument_group("stage limits")
    group.add_argument(
        STAGE_TIMEOUT_FLAG,
        type=_minutes,
        metavar="MINUTES",
        help="stop a stage that runs longer (SIGTERM, then SIGKILL after 10 s) and fail the run (default: no limit)",
    )
    group.add_argument(
        "--stage-silence",
        type=_minutes,
        default=StageLimits.quiet_minutes,
        metavar="MINUTES",
        help="a console line when a stage prints nothing for this long (default %(default)g)",
    )


def add_engine_arguments(parser: argparse.ArgumentParser, dataflow: bool, vertex_defaults: bool = False) -> None:
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


def add_image_arguments(parser: argparse.ArgumentParser, common: Any = None) -> None:
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


def add_tuning_arguments(parser: argparse.ArgumentParser, group: Any = None) -> None:
    """--tune-space and its trial counts, in `group` (submit, schedule: the Vertex AI job's, to keep help short)."""
    group = group or parser.add_argument_group("hyperparameter tuning on Vertex AI")
    group.add_argument("--tune-space", metavar="FILE", help="tune the train stage first (docs/tuning.md)")
    group.add_argument("--tune-trials", type=int, default=10, metavar="N", help="tuning trials (default %(default)s)")
    group.add_argument("--tune-parallel", type=int, default=1, metavar="K", help="trials at once (default %(default)s)")


def add_tracking_arguments(parser: argparse.ArgumentParser, log_root_help: str) -> None:
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
    add_alert_arguments(group)


def add_alert_arguments(group: Any, email: bool = True) -> None:
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
    group.add_argument("--notify-webhook", default="", metavar="URL", help="POST a failure (or a skew warning) to URL")


def add_vertex_arguments(parser: argparse.ArgumentParser, common: Any) -> None:
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
    add_tuning_arguments(parser, group)


def add_cost_arguments(group: Any) -> None:
    """What --dry-run's cost estimate reads: the price table and the hours each stage is expected to run."""
    group.add_argument("--prices", default=cost.PRICES_FILE, metavar="FILE", help="--dry-run's price table (JSON)")
    group.add_argument(
        "--expected-hours",
        action="append",
        default=[],
        metavar="STAGE=H",
        help="--dry-run: a stage's hours, e.g. train=3",
    )


def add_preflight_arguments(group: Any) -> None:
    """The preflight submit and schedule run for --tpu before anything is uploaded (docs/preflight.md)."""
    group.add_argument(
        "--no-preflight",
        dest="preflight",
        action="store_false",
        help="skip the preflight (docs/preflight.md)",
    )
    group.add_argument(
        "--allow-no-fit",
        action="store_true",
        help="submit a model too large for the TPU",
    )


def add_schedule_arguments(parser: argparse.ArgumentParser, common: Any) -> None:
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
