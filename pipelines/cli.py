"""`tpu-pipeline` (also `python -m pipelines`): run the pipeline locally, compile it, submit or schedule it.

The only place that reads flags and environment variables. Each command resolves its flags into typed
settings and hands them to one function: `local.run_local`, `pipeline.compile_pipeline`, `vertex.submit`,
`vertex.schedule`.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import warnings
from typing import Any, Dict, Optional, Sequence

from estimator_lib.config import ConfigError
from estimator_lib.config.beam import BEAM, DATAFLOW_RUNNER, ENGINES, BeamConfig
from pipelines import tpu as tpu_presets

DEFAULT_OUTPUT = os.path.join("runs", "local")
DEFAULT_TEMPLATE = "tpu_estimator_pipeline.yaml"
IMAGE_REPO_ENV = "TPU_PIPELINE_IMAGE_REPO"
DEFAULT_IMAGE_REPO = "tpu-pipeline"
REPO_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _preset_help() -> str:
    rows = "\n".join(
        f"  {name:<12} {machine:<18} {accel:<15} x{count:<3} {cores} cores"
        for name, machine, accel, count, cores in tpu_presets.preset_table()
    )
    return f"TPU types (--tpu):\n{rows}"


# -- arguments -----------------------------------------------------------------------------------------------
def _add_run_arguments(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("pipeline parameters")
    group.add_argument("--data", help="CSV or JSON Lines file or glob, local or gs:// (default: embedded penguins)")
    group.add_argument("--label", help="the label column (required with --data; default: species)")
    group.add_argument("--task", choices=("auto", "classification", "regression"), default="auto")
    group.add_argument("--key-column", default="", help="a column of unique row keys (default: derived)")
    group.add_argument("--eval-fraction", type=float, default=0.2, help="share of rows for evaluation")
    group.add_argument("--config", help="JSON config file: JobConfig sections plus 'blessing' and 'prepare'")
    group.add_argument(
        "--set",
        dest="overrides",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="override a config value, e.g. training.train_steps=300, model.family=linear, "
        'blessing.thresholds={"accuracy":0.9}, blessing.min_improvement=0.01 (repeatable)',
    )
    group.add_argument(
        "--baseline",
        default="latest",
        help="model to compare with: none, latest (last published), a publish root or SavedModel dir",
    )
    group.add_argument(
        "--warm-start",
        default="none",
        help="initialise from: none, latest (last published), a publish root or SavedModel dir",
    )
    group.add_argument(
        "--predict-data",
        default="eval",
        help="rows to batch-predict: eval, train, test (prepared splits), a CSV/JSONL URI or glob (raw rows, "
        "label optional, scored through the prepared schema) or prepared TFRecords (.tfrecord, or a directory)",
    )
    group.add_argument("--publish-root", help="where blessed models are published (versions/ and LATEST)")


def _add_engine_arguments(parser: argparse.ArgumentParser, dataflow: bool) -> None:
    """--engine, and the Beam runner's settings: this machine's DirectRunner (run-local) or Dataflow."""
    group = parser.add_argument_group("Apache Beam engine (preparation and batch prediction)")
    group.add_argument(
        "--engine",
        choices=ENGINES,
        default=ENGINES[0],
        help="who runs preparation and batch prediction: inprocess (this machine's cores) or beam (Apache Beam: "
        + ("Dataflow" if dataflow else "the DirectRunner")
        + "); the prepared data is byte-identical either way",
    )
    if not dataflow:
        group.add_argument("--direct-num-workers", type=int, help="DirectRunner worker processes (default: one)")
        return
    group.add_argument("--dataflow-project", help="Dataflow project (default: --project)")
    group.add_argument("--dataflow-region", help="Dataflow region (default: --region)")
    group.add_argument(
        "--dataflow-temp-location", help="gs:// prefix for Beam's temporary files (default: under --pipeline-root)"
    )
    group.add_argument("--dataflow-max-workers", type=int, help="Dataflow autoscaling ceiling (default: Dataflow's)")
    group.add_argument("--dataflow-machine-type", help="Dataflow worker machine type, e.g. n2-standard-4")
    group.add_argument("--dataflow-service-account", help="service account the Dataflow workers run as")


def resolve_beam(args: argparse.Namespace, image: Optional[str] = None, vertex: Optional[Dict[str, str]] = None):
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


def _add_image_arguments(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("image and accelerator")
    group.add_argument("--image", help="component image: REPO@sha256:DIGEST or REPO:COMMIT (immutable)")
    group.add_argument(
        "--image-repo",
        default=os.environ.get(IMAGE_REPO_ENV, DEFAULT_IMAGE_REPO),
        help=f"without --image, use REPO:<current git commit> (default ${IMAGE_REPO_ENV} or {DEFAULT_IMAGE_REPO})",
    )
    where = group.add_mutually_exclusive_group()
    where.add_argument(
        "--tpu",
        choices=sorted(tpu_presets.PRESETS),
        default=tpu_presets.DEFAULT_TPU,
        help=f"Cloud TPU type for train, evaluate, batch predict (default {tpu_presets.DEFAULT_TPU})",
    )
    where.add_argument("--cpu", action="store_true", help="compile without TPUs (every stage on CPU)")


def _add_vertex_arguments(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("Vertex AI")
    group.add_argument(
        "--project",
        default=os.environ.get("GOOGLE_CLOUD_PROJECT"),
        help="Google Cloud project (default $GOOGLE_CLOUD_PROJECT)",
    )
    group.add_argument("--region", default="us-central1", help="Vertex AI region with Cloud TPUs")
    group.add_argument("--pipeline-root", required=True, help="gs:// prefix for the run's artifacts")
    group.add_argument("--service-account", help="service account the pipeline and its TPU jobs run as")
    group.add_argument("--network", help="VPC network to peer with: projects/NUMBER/global/networks/NAME")
    group.add_argument(
        "--job-label",
        dest="job_labels",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="resource label on the job (repeatable)",
    )
    group.add_argument(
        "--caching",
        action=argparse.BooleanOptionalAction,
        default=False,
        help="reuse outputs of identical earlier tasks (default off)",
    )
    group.add_argument("--display-name", default="tpu-estimator-pipeline")
    group.add_argument("--template", help="a compiled pipeline YAML to run (default: compile one now)")
    group.add_argument("--dry-run", action="store_true", help="print the request as JSON and send nothing")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="tpu-pipeline",
        description="Prepare, train, evaluate, batch-predict and export TPUEstimator models.",
    )
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    run_local = commands.add_parser(
        "run-local",
        help="run the whole pipeline on this machine's CPU (KFP local runner)",
        description="Runs the pipeline on CPU with the KFP local runner and writes OUTPUT/summary.json. "
        "With no arguments it trains on the embedded Palmer Penguins data.",
    )
    _add_run_arguments(run_local)
    _add_engine_arguments(run_local, dataflow=False)
    run_local.add_argument("--output", default=DEFAULT_OUTPUT, help=f"output directory (default {DEFAULT_OUTPUT})")
    run_local.add_argument(
        "--verbose",
        action="store_true",
        help="stream every stage's full log to the console (it always goes to OUTPUT/pipeline.log)",
    )

    compile_ = commands.add_parser(
        "compile",
        help="compile the pipeline YAML for Vertex AI",
        description="Writes the pipeline YAML: train, evaluate and batch predict run as Vertex AI custom jobs "
        "on a Cloud TPU VM (or on CPU with --cpu).",
        epilog=_preset_help(),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    compile_.add_argument("--output", default=DEFAULT_TEMPLATE, help=f"YAML file (default {DEFAULT_TEMPLATE})")
    _add_image_arguments(compile_)
    _add_engine_arguments(compile_, dataflow=True)

    for name, text in (
        ("submit", "run the pipeline once on Vertex AI"),
        ("schedule", "run the pipeline on Vertex AI on a cron schedule"),
    ):
        sub = commands.add_parser(
            name,
            help=text,
            description=text + ".",
            epilog=_preset_help(),
            formatter_class=argparse.RawDescriptionHelpFormatter,
        )
        _add_run_arguments(sub)
        _add_image_arguments(sub)
        _add_vertex_arguments(sub)
        _add_engine_arguments(sub, dataflow=True)
        if name == "schedule":
            group = sub.add_argument_group("schedule")
            group.add_argument("--cron", required=True, help="cron expression, e.g. '0 3 * * 1' (UTC; TZ=... prefix)")
            group.add_argument("--schedule-name", default="tpu-estimator-retrain")
            group.add_argument("--max-concurrent-runs", type=int, default=1)
            group.add_argument("--max-runs", type=int, help="stop after this many runs (default: no limit)")
            group.add_argument("--start-time", help="RFC 3339 time of the first run (default: now)")
            group.add_argument("--end-time", help="RFC 3339 time after which no run starts")
    return parser


# -- resolution ----------------------------------------------------------------------------------------------
def resolve_settings(
    args: argparse.Namespace, publish_root: str, fixed: Optional[Dict[str, Any]] = None, beam: Any = None
):
    """`RunSettings` from the pipeline-parameter flags; `fixed` job overrides are applied last; `beam` is the
    engine's `BeamConfig` (`resolve_beam`)."""
    from pipelines.params import RunSettings, read_config_file, resolve_configs

    if args.data and not args.label:
        raise ValueError("--label is required with --data: name the column to predict")
    configs = resolve_configs(read_config_file(args.config), args.overrides)
    explicit: Dict[str, Any] = {
        "publish_root": args.publish_root or publish_root,
        "task": args.task,
        "key_column": args.key_column,
        "eval_fraction": args.eval_fraction,
        "job": configs["job"].with_overrides(fixed or {}),
        "blessing": configs["blessing"],
        "prepare_options": configs["prepare"],
        "baseline": args.baseline,
        "warm_start": args.warm_start,
        "predict_data": args.predict_data,
        "engine": args.engine,
        "beam_options": beam.to_dict() if beam is not None else {},
    }
    if args.data:
        explicit["data"] = args.data
    if args.label:
        explicit["label"] = args.label
    return RunSettings(**explicit)


def resolve_image(args: argparse.Namespace) -> str:
    from pipelines.image import check_image, default_image

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


def resolve_preset(args: argparse.Namespace):
    return None if args.cpu else tpu_presets.preset(args.tpu)


# -- commands ------------------------------------------------------------------------------------------------
def cmd_run_local(args: argparse.Namespace) -> int:
    from pipelines import local

    if args.data and "://" not in args.data and not args.data.startswith("embedded:"):
        args.data = os.path.abspath(args.data)
    publish_root = os.path.join(os.path.abspath(args.output), local.PUBLISH_DIR)
    settings = resolve_settings(args, publish_root, fixed=local.local_job_settings(), beam=resolve_beam(args))
    summary = local.run_local(settings, args.output, verbose=args.verbose)
    print(format_summary(summary, os.path.join(os.path.abspath(args.output), local.SUMMARY_FILE)))
    return 0


def format_summary(summary: Dict[str, Any], path: str) -> str:
    metrics = summary["metrics"]
    shown = [k for k in ("accuracy", "auc_roc", "macro_auc_roc", "rmse", "mae", "mean_loss") if k in metrics]
    lines = [
        "pipeline finished",
        "  metrics (eval): " + ", ".join(f"{k}={metrics[k]:.4f}" for k in shown),
        f"  blessed: {summary['blessed']} ({summary['blessing']['summary']})",
        f"  predictions: {summary['predictions']['count']} rows in {summary['predictions']['uri']}",
        f"  export: {summary['export']['uri']} (tag sets {summary['export']['tag_sets']})",
        f"  {summary['export']['reason']}",
        f"summary: {path}",
    ]
    return "\n".join(lines)


def cmd_compile(args: argparse.Namespace) -> int:
    from pipelines.pipeline import compile_pipeline

    preset = resolve_preset(args)
    image = resolve_image(args)
    beam = resolve_beam(args, image)
    compile_pipeline(args.output, image, preset, beam)
    where = (
        f"TPU {preset.name} ({preset.machine_type}, {preset.accelerator_type} x{preset.accelerator_count})"
        if preset
        else "CPU"
    )
    engine = f"; prepare and batch predict on Dataflow ({beam.region})" if beam else ""
    print(f"compiled {args.output}: image {image}; train/evaluate/batch predict on {where}{engine}")
    return 0


def _vertex_job(args: argparse.Namespace, template_dir: str, credentials: Any = None):
    from pipelines import vertex
    from pipelines.pipeline import compile_pipeline

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
        from google.auth.credentials import AnonymousCredentials

        credentials = AnonymousCredentials()
    image = resolve_image(args)
    defaults = {
        "project": args.project,
        "region": args.region,
        "temp_location": args.pipeline_root.rstrip("/") + "/dataflow-tmp",
    }
    beam = resolve_beam(args, image, defaults)
    settings = resolve_settings(args, publish_root=args.pipeline_root.rstrip("/") + "/published", beam=beam)
    template = args.template
    if not template:
        template = compile_pipeline(os.path.join(template_dir, DEFAULT_TEMPLATE), image, resolve_preset(args), beam)
    return vertex.build_job(template, target, settings.arguments(), credentials=credentials), target


def _print_request(job: Any, extra: Optional[Dict[str, Any]] = None) -> None:
    from google.protobuf import json_format

    request = json_format.MessageToDict(job._gca_resource._pb)  # the PipelineJob resource the SDK would create
    request.pop("pipelineSpec", None)
    print(json.dumps({**request, **(extra or {})}, indent=2, sort_keys=True))


def cmd_submit(args: argparse.Namespace, credentials: Any = None) -> int:
    from pipelines import vertex

    with tempfile.TemporaryDirectory() as template_dir:
        job, target = _vertex_job(args, template_dir, credentials)
        if args.dry_run:
            _print_request(job, {"serviceAccount": target.service_account, "network": target.network})
            return 0
        vertex.submit(job, target)
    print(f"submitted {job.resource_name}")
    return 0


def cmd_schedule(args: argparse.Namespace, credentials: Any = None) -> int:
    from pipelines import vertex

    vertex.check_cron(args.cron)
    with tempfile.TemporaryDirectory() as template_dir:
        job, target = _vertex_job(args, template_dir, credentials)
        if args.dry_run:
            _print_request(job, {"cron": args.cron, "scheduleName": args.schedule_name})
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


COMMANDS = {
    "run-local": cmd_run_local,
    "compile": cmd_compile,
    "submit": cmd_submit,
    "schedule": cmd_schedule,
}


def main(argv: Optional[Sequence[str]] = None, credentials: Any = None) -> int:
    """Entry point. `credentials` (google-auth) is for callers that bring their own; the CLI uses ADC."""
    from google.auth.exceptions import DefaultCredentialsError

    # google-api-core warns on every import about Python versions it will drop in 2027; not actionable here.
    warnings.filterwarnings("ignore", category=FutureWarning, module=r"google\.")
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")  # before anything imports TensorFlow
    args = build_parser().parse_args(argv)
    command = COMMANDS[args.command]
    try:
        if args.command in ("submit", "schedule"):
            return command(args, credentials)
        return command(args)
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
    except RuntimeError as e:  # the KFP local runner: a stage failed; `e` holds its traceback and the log path
        print(f"tpu-pipeline {args.command}: error: {e}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
