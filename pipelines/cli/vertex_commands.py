"""The Vertex AI commands: compile, submit and schedule (with --dry-run's request, plan and cost estimate)."""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import sys
import tempfile
from typing import Any

from google.auth.credentials import AnonymousCredentials
from google.protobuf import json_format

from estimator_lib.cloud import cost
from estimator_lib.config.alerts import AlertConfig, redact_url
from estimator_lib.config.beam import BEAM
from estimator_lib.config.run import PREPARED_SPLITS
from estimator_lib.config.tuning import check_tunable
from pipelines import tpu as tpu_presets
from pipelines import vertex
from pipelines.cli.parser import DEFAULT_TEMPLATE
from pipelines.cli.preflight import run_preflight, tpu_type
from pipelines.cli.settings import (
    COMPILED_FLAGS,
    flag_given,
    resolve_beam,
    resolve_image,
    resolve_retry,
    resolve_settings,
    resolve_steps,
    resolve_target,
    resolve_tuning,
)
from pipelines.pipeline import VertexSteps, compile_pipeline
from pipelines.retry import RetryPolicy

PREDICT_STAGE = "batch_predict"  # the stage whose hours preflight bounds beside train's


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
    found = _preflight(args, beam, cost_inputs[0] if cost_inputs else None)
    from pipelines import staging  # builds a wheel with the user package's code: TensorFlow is imported

    data = {"--data": args.data, "--eval-data": args.eval_data}
    data["--predict-data"] = args.predict_data if args.predict_data not in PREPARED_SPLITS else None
    staged = staging.stage_user_files(args.code, args.feature_spec, args.pipeline_root, not args.dry_run, data)
    for warning in staged.warnings:
        print(f"warning: --code {args.code}: {warning}", file=sys.stderr)
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
        given = [flag for flag in COMPILED_FLAGS if flag_given(args, flag)]
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
    if staged.described:
        compiled["user_files"] = staged.described
    compiled["plan"] = _plan(args, target, image, tpu if not args.template else None, beam is not None)
    train_steps, expected = settings.job.training.train_steps, cost_inputs[1] if cost_inputs else {}
    if found is not None:
        train_steps = found.train_steps  # the budget the data sets when the job leaves it null
        if train_steps is not None:
            expected = {"train": cost.bound_train_hours(train_steps, found.step_seconds), **expected}
        stages = compiled["plan"]["stages"]
        placed = stages.get(PREDICT_STAGE) if isinstance(stages, dict) else None
        if found.predict is not None and placed and placed.get("accelerator"):  # on the TPU, not on Dataflow
            bound = cost.bound_predict_hours(found.predict.rows, found.predict.seconds)
            expected = {PREDICT_STAGE: bound, **expected}
    if cost_inputs:
        compiled["plan"] = vertex.with_cost_estimate(compiled["plan"], cost_inputs[0], train_steps, expected)
    job = vertex.build_job(template, target, arguments, credentials=credentials)
    return job, target, compiled, arguments, found


def _preflight(args: argparse.Namespace, beam: Any, prices: cost.PriceTable | None) -> Any:
    """The run's preflight for --tpu (`pipelines.cli.preflight`), before anything is staged or uploaded; None with
    --cpu, --no-preflight or --template (whose TPU is its own).

    Raises:
      DoesNotFitError: the model does not fit the TPU's memory, without --allow-no-fit.
    """
    if args.cpu or args.template or not args.preflight:
        return None
    settings = resolve_settings(args, args.pipeline_root.rstrip("/") + "/published", beam=beam)
    found = run_preflight(settings, tpu_type(args.tpu), prices, args.region, args.spot)
    if not found.fits and not args.allow_no_fit:
        print(found.describe(), file=sys.stderr)
        raise DoesNotFitError(_does_not_fit(found, settings.job.training.train_batch_size))
    return found


class DoesNotFitError(RuntimeError):
    """The model does not fit the TPU's memory (exit 1, before anything is uploaded)."""


def _does_not_fit(found: Any, batch: int) -> str:
    """Why a submit is refused: the verdict (memory, the largest per-core batch that fits), the dominant buffers
    and the ways on."""
    fits = f"training.train_batch_size={found.largest_batch * found.cores} fits" if found.largest_batch else ""
    buffers = "; ".join(b.describe() for b in found.top_buffers[:3])
    return (
        f"the model does not fit TPU {found.tpu_type}'s memory at training.train_batch_size={batch}: "
        f"{found.verdict_line()}; the largest buffers: {buffers}. Make the model or the batch smaller"
        + (f" ({fits})" if fits else "")
        + ", or submit anyway with --allow-no-fit (--no-preflight skips the check)"
    )


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


def _print_plan(compiled: dict[str, Any], found: Any) -> None:
    """--dry-run's lines on stderr: the cost estimate, then the preflight."""
    _print_cost(compiled["plan"])
    if found is not None:
        print(found.describe(), file=sys.stderr)


def cmd_submit(args: argparse.Namespace, credentials: Any = None) -> int:
    with tempfile.TemporaryDirectory() as template_dir:
        job, target, compiled, arguments, found = _vertex_job(args, template_dir, credentials)
        if args.dry_run:
            extra = {"serviceAccount": target.service_account, "network": target.network, "compiled": compiled}
            _print_request(job, arguments, extra)
            _print_plan(compiled, found)
            return 0
        vertex.submit(job, target)
    print(f"submitted {job.resource_name}")
    return 0


def cmd_schedule(args: argparse.Namespace, credentials: Any = None) -> int:
    vertex.check_cron(args.cron)
    with tempfile.TemporaryDirectory() as template_dir:
        job, target, compiled, arguments, found = _vertex_job(args, template_dir, credentials)
        if args.dry_run:
            extra = {
                "cron": args.cron,
                "scheduleName": args.schedule_name,
                "serviceAccount": target.service_account,
                "network": target.network,
                "compiled": compiled,
            }
            _print_request(job, arguments, extra)
            _print_plan(compiled, found)
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
