"""Vertex AI Pipelines: build the PipelineJob request for a compiled pipeline, submit it, or schedule it.

Everything goes through google-cloud-aiplatform (`aiplatform.PipelineJob`, `PipelineJob.create_schedule`).
`build_job` makes the request without sending anything, so it can be inspected (and is tested here, where
Vertex AI cannot be reached); `submit` and `schedule` send it.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Mapping
from typing import Any

from estimator_lib.cloud import cost
from pipelines.pipeline import CACHED, PIPELINE_NAME, TPU_STAGES
from pipelines.tpu import CPU_SETTINGS, TPUTarget, tensorboard_location

# Vertex AI label rules: up to 64 labels; keys start with a lowercase letter; keys and values use lowercase
# letters, digits, "_" and "-", at most 63 characters.
_LABEL_KEY = re.compile(r"^[a-z][a-z0-9_-]{0,62}$")
_LABEL_VALUE = re.compile(r"^[a-z0-9_-]{0,63}$")
_CRON_FIELDS = 5
# An Experiment is a metadata context whose ID is its name: 4-128 characters of [a-z0-9-]
# (CreateContextRequest.context_id).
_EXPERIMENT = re.compile(r"^[a-z0-9-]{4,128}$")


@dataclasses.dataclass(frozen=True)
class VertexTarget:
    """Where and how a pipeline job runs on Vertex AI.

    Attributes:
      project, location: the Google Cloud project and region (e.g. "us-central1", one with Cloud TPUs).
      pipeline_root: gs:// prefix for the run's artifacts.
      display_name: the job's (or schedule's) name in the console.
      service_account: the service account the pipeline (and its TPU custom jobs) run as; None for the
        project's default.
      network: a VPC network to peer with ("projects/NUMBER/global/networks/NAME"), or None.
      labels: resource labels on the job.
      enable_caching: None (default) keeps each task's caching as the compiled pipeline sets it
        (`pipelines.pipeline.CACHED`: prepare and train are reused only when the data's content and the starting
        model are unchanged; resolve, evaluate and release always run); False turns caching off for every task.
        True is refused: it would cache the stages that must run every time.
    """

    project: str
    location: str
    pipeline_root: str
    display_name: str = PIPELINE_NAME
    service_account: str | None = None
    network: str | None = None
    labels: Mapping[str, str] = dataclasses.field(default_factory=dict)
    enable_caching: bool | None = None

    def __post_init__(self) -> None:
        if not self.project:
            raise ValueError("--project is empty; give the Google Cloud project to run in")
        if not self.location:
            raise ValueError("--region is empty; give a Vertex AI region with Cloud TPUs, e.g. us-central1")
        if not self.pipeline_root.startswith("gs://"):
            raise ValueError(
                f"--pipeline-root {self.pipeline_root!r} must be a gs:// prefix: Vertex AI writes artifacts to "
                "Cloud Storage"
            )
        if self.enable_caching:
            raise ValueError(
                "caching every task would reuse the stages that must run each time (resolving LATEST, evaluating "
                "against it, publishing); leave caching to the pipeline (each task's own setting), or turn it off "
                "with --no-caching"
            )
        object.__setattr__(self, "labels", check_labels(self.labels))


def check_labels(labels: Mapping[str, str]) -> dict[str, str]:
    """Returns the labels if Vertex AI accepts them; raises ValueError naming the bad one otherwise."""
    if len(labels) > 64:
        raise ValueError(f"{len(labels)} labels given; Vertex AI accepts at most 64")
    for key, value in labels.items():
        if not _LABEL_KEY.match(key):
            raise ValueError(
                f"label key {key!r} is invalid: start with a lowercase letter, then lowercase letters, digits, "
                "'_' or '-' (at most 63 characters)"
            )
        if not _LABEL_VALUE.match(value):
            raise ValueError(
                f"label {key}={value!r}: values may hold only lowercase letters, digits, '_' or '-' (at most 63)"
            )
    return dict(labels)


def parse_label(text: str) -> tuple:
    """ "team=ml" -> ("team", "ml")."""
    key, sep, value = text.partition("=")
    if not sep:
        raise ValueError(f"--job-label {text!r} must look like KEY=VALUE, e.g. team=ml")
    return key, value


def check_cron(cron: str) -> str:
    """A five-field cron expression, optionally prefixed "TZ=Zone/Name " or "CRON_TZ=Zone/Name "."""
    fields = cron.split()
    if fields and (fields[0].startswith("TZ=") or fields[0].startswith("CRON_TZ=")):
        fields = fields[1:]
    if len(fields) != _CRON_FIELDS:
        raise ValueError(
            f"--cron {cron!r} must have 5 fields (minute hour day-of-month month day-of-week), e.g. "
            "'0 3 * * 1' for Mondays at 03:00 UTC; prefix 'TZ=Europe/Paris ' for another time zone"
        )
    return cron


def check_experiment(name: str) -> str:
    """`name` if Vertex AI accepts it as an Experiment's name; raises ValueError saying how to fix it."""
    if not _EXPERIMENT.match(name):
        raise ValueError(
            f"--experiment {name!r} must be 4-128 characters of lowercase letters, digits and '-', e.g. churn-weekly"
        )
    return name


def check_tensorboard(tensorboard: str, target: VertexTarget) -> str:
    """`tensorboard` if the TPU jobs of a run at `target` can write to it; raises ValueError otherwise.

    Vertex AI TensorBoard takes logs from custom jobs that run as a service account (with roles/storage.admin
    and roles/aiplatform.user), in the TensorBoard's own region.
    """
    region = tensorboard_location(tensorboard)
    if region != target.location:
        raise ValueError(
            f"--tensorboard {tensorboard} is in {region}, but the run is in --region {target.location}: use a "
            "TensorBoard of the run's region (`gcloud ai tensorboards create --region ...`)"
        )
    if not target.service_account:
        raise ValueError(
            "--tensorboard needs the TPU jobs to run as a service account: pass --service-account with "
            "roles/storage.admin and roles/aiplatform.user (docs/vertex.md, TensorBoard)"
        )
    return tensorboard


def build_job(
    template_path: str,
    target: VertexTarget,
    parameter_values: Mapping[str, Any],
    credentials: Any = None,
    job_id: str | None = None,
):
    """The `aiplatform.PipelineJob` for a compiled pipeline; nothing is sent yet.

    Args:
      template_path: the compiled pipeline YAML (local path, gs:// or Artifact Registry URI).
      target: project, region, pipeline root, labels, caching.
      parameter_values: the pipeline's parameter values (`RunConfig.arguments()`).
      credentials: google-auth credentials; None uses Application Default Credentials.
      job_id: the job's ID; None lets the SDK make one from the pipeline name and the time.
    """
    # Lazy: google-cloud-aiplatform is the optional `vertex` extra, and takes seconds to import; only a
    # Vertex AI request needs it, never a local run or `--help`.
    from google.cloud import aiplatform

    return aiplatform.PipelineJob(
        display_name=target.display_name,
        template_path=template_path,
        job_id=job_id,
        pipeline_root=target.pipeline_root,
        parameter_values=dict(parameter_values),
        enable_caching=target.enable_caching,
        labels=dict(target.labels),
        credentials=credentials,
        project=target.project,
        location=target.location,
    )


def submit(job: Any, target: VertexTarget) -> Any:
    """Creates the pipeline run on Vertex AI (returns at once; the run continues there)."""
    job.submit(service_account=target.service_account, network=target.network)
    return job


def schedule(
    job: Any,
    target: VertexTarget,
    cron: str,
    name: str,
    max_concurrent_runs: int = 1,
    max_runs: int | None = None,
    start_time: str | None = None,
    end_time: str | None = None,
) -> Any:
    """Creates a Vertex AI PipelineJobSchedule running `job` on `cron`; returns the schedule."""
    return job.create_schedule(
        cron=check_cron(cron),
        display_name=name,
        start_time=start_time,
        end_time=end_time,
        max_run_count=max_runs,
        max_concurrent_run_count=max_concurrent_runs,
        service_account=target.service_account,
        network=target.network,
    )


# Where `describe_run` leaves each stage's estimated cost (None until `with_cost_estimate` fills it in).
COST_ESTIMATE_KEY = "estimatedCost"
# Where `with_cost_estimate` puts the run's total, the price table's date and source, and what has no price.
COST_TOTAL_KEY = "costEstimate"


def describe_run(
    target: VertexTarget, template: str, image: str, tpu: TPUTarget | None, beam_stages: tuple[str, ...] = ()
) -> dict[str, Any]:
    """What a job will run and where, for --dry-run: the project, region, template, image, and per stage its
    machine, accelerator (type, count, topology), Spot or not, and the TPU settings the stage runs with.

    Args:
      target: the job's project, region and pipeline root.
      template: the compiled pipeline (path or URI) the job runs.
      image: the component image ("" when a given template fixes it).
      tpu: the TPU the compiled train, evaluate and batch predict run on; None: every stage on CPU.
      beam_stages: stages whose work runs on Dataflow (prepare and batch predict with --engine beam).
    """
    return {
        "project": target.project,
        "region": target.location,
        "pipelineRoot": target.pipeline_root,
        "template": template,
        "image": image or "as compiled in the template",
        "stages": {stage: stage_placement(stage, tpu, beam_stages) for stage in CACHED},
    }


def stage_placement(stage: str, tpu: TPUTarget | None, beam_stages: tuple[str, ...] = ()) -> dict[str, Any]:
    """One stage's machine: a TPU custom job's machine spec, or a pipeline task on Vertex AI's default CPU."""
    on_tpu = tpu is not None and stage in TPU_STAGES and not (stage == "batch_predict" and stage in beam_stages)
    placed: dict[str, Any] = {"runsOn": "pipeline task (CPU)", "machineType": None, "accelerator": None}
    if on_tpu:
        placed = {
            "runsOn": "custom job (TPU)",
            "machineType": tpu.preset.machine_type,
            "accelerator": {
                "type": tpu.preset.accelerator_type,
                "count": tpu.preset.accelerator_count,
                "topology": tpu.topology,
            },
        }
    placed["spot"] = bool(on_tpu and tpu.spot)
    placed["tpu"] = tpu.preset.tpu_settings() if on_tpu else dict(CPU_SETTINGS)
    placed["dataflow"] = stage in beam_stages
    placed[COST_ESTIMATE_KEY] = None
    return placed


def with_cost_estimate(
    plan: dict[str, Any],
    table: cost.PriceTable,
    train_steps: int | None = None,
    expected_hours: Mapping[str, float] | None = None,
) -> dict[str, Any]:
    """`plan` (`describe_run`) with each stage's estimated cost and the run's total (`cost.estimate`); a plan whose
    stages a given template fixes (a string, not read back) gets no estimate."""
    if not isinstance(plan["stages"], dict):
        return {**plan, COST_TOTAL_KEY: None}
    costs, total = cost.estimate(plan["stages"], plan["region"], table, train_steps, expected_hours)
    stages = {stage: {**placed, COST_ESTIMATE_KEY: costs[stage]} for stage, placed in plan["stages"].items()}
    return {**plan, "stages": stages, COST_TOTAL_KEY: total}
