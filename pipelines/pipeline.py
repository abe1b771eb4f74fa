r"""`build_pipeline`: the one function that builds the DAG, and `compile_pipeline` for Vertex AI.

resolve -> prepare -> train -> evaluate (metrics, blessing) ----------------------------\
                            |-> batch predict (the eval split by default) --\             \
                            \-> export (SavedModel, verified) ---------------> serving check -> release

Publishing is the last step: the release stage runs after batch prediction, export and the serving check (the
export served in a fresh process agrees with the batch predictions), so a run that fails anywhere publishes
nothing and LATEST does not move.

Caching is set per task (`CACHED`), right by construction: a task may be cached only when its inputs name
everything it reads. The resolve stage, first, turns what changes between runs into parameters (the data's
content token, the resolved warm-start source and reference model, the metrics the blessing names); prepare and
train take those, so they are reused exactly when their data and starting model are. Evaluate reads LATEST when
it runs, release publishes, and resolve resolves: those run every time. Batch predict, export and the serving
check read only artifacts.

The pipeline function only wires. What differs between environments is chosen when the DAG is built:
  * the image every component runs on (pinned when compiling for Vertex AI);
  * where train, evaluate and batch predict run: with a TPU preset they become Vertex AI custom jobs on a
    Cloud TPU VM (google-cloud-pipeline-components' custom-job wrapper) and get
    {"use_tpu": True, "tpu_name": "local", "num_cores": N} as their `tpu` settings; without one they run as
    plain tasks on CPU, which is also what the KFP local runner executes. A `TPUTarget` adds where the TPU
    machines come from (Spot, a reservation), the slice topology and a Vertex AI TensorBoard;
  * Vertex AI steps (`VertexSteps`): the run joins an Experiment; a blessed model gets a Model Registry
    version; every compiled run records its cost last (`components.run_cost`). Local runs have none of these.
Prepare, export, the serving check and release always run on CPU (export writes the TPU meta graph without a TPU).

With a `BeamConfig` (`compile --engine beam`) the prepare and predict specs default to engine "beam" with it: prepare
and batch predict run their work on Apache Beam (Dataflow, the component image as the workers' container), and
batch predict's own task stays on CPU (it launches the Dataflow job and scores the exported CPU SavedModel).

No `from __future__ import annotations` here: KFP reads the pipeline function's annotations as types.
"""

import dataclasses
import functools
import inspect
import json
from typing import Any, Callable, NamedTuple, Optional, Union

import yaml
from kfp import compiler, dsl
from kfp import components as kfp_components
from kfp.dsl import HTML, Artifact, ClassificationMetrics, Dataset, Markdown, Metrics, Model

from components import Stages, build_stages
from components.artifact_types import ModelBlessing
from components.experiment import join_experiment
from components.notify import notify_webhook
from components.records import TPU_TYPE_ENV
from components.register import register_model
from components.run_cost import record_run_cost
from estimator_lib.config import RunConfig
from estimator_lib.config.alerts import AlertConfig
from estimator_lib.config.beam import BeamConfig
from estimator_lib.config.registry import RegistryConfig
from pipelines.retry import NO_RETRIES, RetryPolicy
from pipelines.tpu import CPU_SETTINGS, SPOT, STANDARD, TPUPreset, TPUTarget, as_target
from pipelines.tuning_job import TuningPlan, add_tuning_job

PIPELINE_NAME = "tpu-estimator-pipeline"
# Resolved by Vertex AI at run time to the PipelineJob's service account: the TPU custom jobs run as the
# pipeline does, instead of as the Vertex AI Custom Code Service Agent.
PIPELINE_SERVICE_ACCOUNT = "{{$.pipeline_service_account}}"
# Resolved by Vertex AI at run time to the PipelineJob's project and region.
PIPELINE_PROJECT = "{{$.pipeline_google_cloud_project_id}}"
PIPELINE_LOCATION = "{{$.pipeline_google_cloud_location}}"
# The `Stages` fields that run on the Cloud TPU when a preset is given; prepare and export stay on CPU.
TPU_STAGES = ("train", "evaluate", "batch_predict")
# Whether each stage's task may be served from Vertex AI's cache (see the module docstring).
CACHED = {
    "resolve": False,
    "prepare": True,
    "train": True,
    "evaluate": False,
    "batch_predict": True,
    "export": True,
    "serving_check": True,
    "release": False,
}


class PipelineOutputs(NamedTuple):
    dataset: Dataset
    model: Model
    metrics: Metrics
    classification_metrics: ClassificationMetrics
    blessing: ModelBlessing
    report: HTML
    verdict: Markdown
    validation: Markdown
    predictions: Dataset
    exported: Model
    serving_check: Artifact
    publication: Artifact
    slice_metrics: Metrics


def _on_tpu(component: Any, target: TPUTarget) -> Any:
    """`component` as a Vertex AI custom job on the TPU machine `target` describes.

    google-cloud-pipeline-components' wrapper takes the machine, the scheduling strategy (Spot), the reservation
    affinity, TensorBoard, the base output directory and environment variables, but has no `tpu_topology`
    parameter: the topology is written into the worker pool spec of the component it builds (`_with_topology`).
    """
    # Lazy: google-cloud-pipeline-components is needed only by a TPU compile, never by a local run or a CPU
    # compile (the CLI's --help stays fast).
    from google_cloud_pipeline_components.v1.custom_job import create_custom_training_job_from_component

    stage = component.component_spec.name
    machine = target.machine_spec()
    reservation = machine.get("reservation_affinity", {})
    job = create_custom_training_job_from_component(
        component,
        display_name=f"{stage}-{target.preset.name}",
        machine_type=target.preset.machine_type,
        accelerator_type=target.preset.accelerator_type,
        accelerator_count=target.preset.accelerator_count,
        service_account=PIPELINE_SERVICE_ACCOUNT,
        strategy=SPOT if target.spot else STANDARD,
        reservation_affinity_type=reservation.get("reservation_affinity_type"),
        reservation_affinity_key=reservation.get("key"),
        reservation_affinity_values=reservation.get("values"),
        tensorboard=target.tensorboard or "",
        base_output_directory=target.base_output_directory(stage, dsl.PIPELINE_JOB_ID_PLACEHOLDER),
        env=[{"name": name, "value": value} for name, value in sorted(_job_env(target).items())],
    )
    return _with_topology(job, target.topology) if target.topology else job


def _job_env(target: TPUTarget) -> dict[str, str]:
    """The TPU custom job's environment: what the TPU runtime needs, and the TPU type, which each stage records
    in its manifest (`components.records`)."""
    return {**target.preset.env, TPU_TYPE_ENV: target.preset.name}


def _with_topology(job: Any, topology: str) -> Any:
    """The custom-job component `job` with `machine_spec.tpu_topology` set in its worker pool spec."""
    spec = yaml.safe_load(job.component_yaml)  # the wrapper's own PipelineSpec, ints kept as ints
    [custom_job] = spec["components"].values()
    for inputs in (custom_job["inputDefinitions"], spec["root"]["inputDefinitions"]):
        for pool in inputs["parameters"]["worker_pool_specs"]["defaultValue"]:
            pool["machine_spec"]["tpu_topology"] = topology
    patched = kfp_components.load_component_from_text(yaml.safe_dump(spec))
    patched.component_spec.name = job.component_spec.name
    patched.description = job.description
    return patched


def place_stages(stages: Stages, tpu: Union[TPUPreset, TPUTarget, None], names: tuple = TPU_STAGES) -> Stages:
    """The stages with `names` (train, evaluate and batch predict) as Vertex AI TPU custom jobs when `tpu` is
    given."""
    target = as_target(tpu)
    if target is None:
        return stages
    return dataclasses.replace(stages, **{name: _on_tpu(getattr(stages, name), target) for name in names})


def parameter_defaults(beam: Optional[BeamConfig]) -> dict[str, Any]:
    """`RunConfig`'s parameter defaults; with `beam`, the engine defaults to "beam" with those settings."""
    return RunConfig.parameter_defaults(beam)


@dataclasses.dataclass(frozen=True)
class VertexSteps:
    """Steps only a Vertex AI run has, chosen when compiling.

    Attributes:
      experiment: the Vertex AI Experiment every run joins (a first step, so scheduled runs join too).
      registry: the Model Registry model a blessed, published model becomes a new version of (a last step).
      alerts: who hears of a run that did not succeed: an exit handler around the whole DAG (`_with_alerts`).
      run_cost: record the run's measured durations and the cost they imply (`components.run_cost`, a last
        step). `compile_pipeline` always sets it; a local run has no Vertex AI run to read.
    """

    experiment: Optional[str] = None
    registry: Optional[RegistryConfig] = None
    alerts: AlertConfig = AlertConfig()
    run_cost: bool = False


def _vertex_steps(
    image: str, steps: VertexSteps, retry: RetryPolicy = NO_RETRIES, costed: Optional[dict[str, Any]] = None
) -> Callable[..., None]:
    """The function the pipeline calls to add `steps` (it adds nothing when none is asked for), each with the
    `retry` policy; `costed` holds the run-cost task's stages and placement (`run_cost_inputs`)."""

    def component(func: Callable) -> Any:
        return dsl.component(func, base_image=image, install_kfp_package=False, packages_to_install=[])

    def add(dataset: Dataset, exported: Model, blessing: ModelBlessing, publication: Artifact) -> None:
        # Each run must join, and register its own model: caching is off for these tasks (their inputs also name
        # the run, so no earlier run's outputs could match).
        if steps.experiment:
            joined = component(join_experiment)(
                experiment=steps.experiment,
                project=PIPELINE_PROJECT,
                location=PIPELINE_LOCATION,
                pipeline_job=dsl.PIPELINE_JOB_RESOURCE_NAME_PLACEHOLDER,
            )
            retry.apply(joined.set_caching_options(False))
        if steps.registry:
            registered = component(register_model)(
                dataset=dataset,
                exported=exported,
                blessing=blessing,
                publication=publication,
                registry=steps.registry.to_dict(),
                project=PIPELINE_PROJECT,
                location=PIPELINE_LOCATION,
                pipeline_job=dsl.PIPELINE_JOB_ID_PLACEHOLDER,
            )
            retry.apply(registered.set_caching_options(False))
        if steps.run_cost:
            recorded = component(record_run_cost)(
                pipeline_job=dsl.PIPELINE_JOB_RESOURCE_NAME_PLACEHOLDER, location=PIPELINE_LOCATION, **costed
            )
            # after publishing: every stage's duration is known by then
            retry.apply(recorded.set_caching_options(False).after(publication.task))

    return add


def run_cost_inputs(stages: Stages, target: Optional[TPUTarget], on_tpu: tuple, beam: bool) -> dict[str, Any]:
    """The run-cost task's stages (task name -> stage) and placement (stage -> the machine it is billed as, in
    `vertex.describe_run`'s form): a TPU stage's custom-job machine; without "machineType" (KFP constants hold no
    None), Vertex AI's default CPU machine."""

    def placed(stage: str) -> dict[str, Any]:
        machine = {"spot": False, "dataflow": beam and stage in ("prepare", "batch_predict")}
        if target is None or stage not in on_tpu:
            return machine
        accelerator = {"type": target.preset.accelerator_type, "count": target.preset.accelerator_count}
        return {**machine, "machineType": target.preset.machine_type, "accelerator": accelerator, "spot": target.spot}

    return {"stages": task_stages(stages), "placement": {stage: placed(stage) for stage in CACHED}}


def task_stages(stages: Stages) -> dict[str, str]:
    """KFP task name -> the `Stages` field it runs: "train-model" -> "train"."""
    # The spec's name, not `.name`: a TPU custom-job wrapper keeps "custom-training-job" there.
    return {getattr(stages, f.name).component_spec.name: f.name for f in dataclasses.fields(Stages)}


def _exit_task(image: str, alerts: AlertConfig, stages: Stages) -> Any:
    """The task that sends the alert: Vertex AI's notification email, or our webhook task."""
    if alerts.emails:
        # Lazy: google-cloud-pipeline-components is needed only by a compile that asks for email alerts.
        from google_cloud_pipeline_components.v1.vertex_notification_email import VertexNotificationEmailOp

        return VertexNotificationEmailOp(recipients=list(alerts.emails))
    component = dsl.component(notify_webhook, base_image=image, install_kfp_package=False, packages_to_install=[])
    return component(webhook=alerts.webhook, pipeline=PIPELINE_NAME, stages=task_stages(stages))


def _with_alerts(image: str, alerts: AlertConfig, stages: Stages) -> Callable[[Callable], Callable]:
    """A decorator of the pipeline function that runs its body inside a `dsl.ExitHandler` whose exit task is the
    alert asked for: Vertex AI's notification email, or our webhook task (`components.notify`). The exit task runs
    however the run ends, and Vertex AI gives it the run's final status. Without alerts the function is left as
    it is.

    KFP allows one exit handler, at the pipeline's top level, and takes the pipeline's outputs only from outside
    it: with alerts the pipeline declares no outputs of its own (every stage's artifacts stay on its task, and
    nothing on Vertex AI reads the pipeline's). The KFP local runner cannot run exit handlers: a local run's
    alert is sent by its supervisor (`pipelines.local`).
    """
    if not alerts.wanted:
        return lambda body: body

    def decorate(body: Callable) -> Callable:
        @functools.wraps(body)
        def alerted(*args: Any, **kwargs: Any) -> None:
            with dsl.ExitHandler(_exit_task(image, alerts, stages).set_caching_options(False)):
                body(*args, **kwargs)

        # KFP reads the parameters, their defaults and types from the signature: the body's, without outputs.
        alerted.__signature__ = inspect.signature(body).replace(return_annotation=inspect.Signature.empty)
        alerted.__annotations__ = {k: v for k, v in body.__annotations__.items() if k != "return"}
        return alerted

    return decorate


def build_pipeline(
    image: str,
    tpu: Union[TPUPreset, TPUTarget, None] = None,
    steps: VertexSteps = VertexSteps(),
    beam: Optional[BeamConfig] = None,
    retry: RetryPolicy = NO_RETRIES,
    tuning: Optional[TuningPlan] = None,
) -> Callable[..., PipelineOutputs]:
    """Builds the pipeline.

    Args:
      image: the container image every component runs on (an immutable reference when compiling).
      tpu: run train, evaluate and batch predict on this Cloud TPU (Vertex AI only): a preset, or a
        `TPUTarget` with the capacity and TensorBoard settings; None runs them on CPU.
      steps: Vertex AI steps (experiment, Model Registry); none by default (local runs).
      beam: the default engine ("beam", with these settings) of the prepare and predict specs; None: in-process.
      retry: the retry policy of every task (`pipelines.retry`); none by default.
      tuning: a Vertex AI hyperparameter tuning job between prepare and train (`pipelines.tuning_job`): train
        trains the best trial's spec; None trains the train spec as given.

    Returns:
      The `@dsl.pipeline` function (compile it, or call it under `kfp.local.init`).
    """
    target = as_target(tpu)
    # On Beam, batch predict's task only launches the pipeline and scores on CPU: no TPU for it.
    on_tpu = TPU_STAGES if beam is None else tuple(s for s in TPU_STAGES if s != "batch_predict")
    stages = place_stages(build_stages(image), target, on_tpu)
    # Where a stage runs, as JSON text: KFP's dict parameters would turn num_cores into a float.
    accelerated = json.dumps(target.preset.tpu_settings() if target else CPU_SETTINGS, sort_keys=True)
    add_vertex_steps = _vertex_steps(image, steps, retry, run_cost_inputs(stages, target, on_tpu, beam is not None))
    host = json.dumps(CPU_SETTINGS, sort_keys=True)
    # KFP reads the parameters' defaults from the signature below; they come from the config types, so the
    # pipeline, the CLI and the components share one set. Each stage's spec is one parameter (`RunConfig.arguments`).
    defaults = parameter_defaults(beam)

    @dsl.pipeline(
        name=PIPELINE_NAME,
        description="Prepare, train, evaluate and bless, batch predict, export, and publish a blessed model last",
    )
    @_with_alerts(image, steps.alerts, stages)
    def tpu_estimator_pipeline(
        publish_root: str,
        prepare_spec: str = defaults["prepare_spec"],
        train_spec: str = defaults["train_spec"],
        evaluate_spec: str = defaults["evaluate_spec"],
        predict_spec: str = defaults["predict_spec"],
        baseline: str = defaults["baseline"],
        warm_start: str = defaults["warm_start"],
    ) -> PipelineOutputs:
        resolve = stages.resolve(
            prepare_spec=prepare_spec,
            warm_start=warm_start,
            baseline=baseline,
            publish_root=publish_root,
            evaluate_spec=evaluate_spec,
        )
        prepare = stages.prepare(
            spec=prepare_spec,
            data_version=resolve.outputs["data_version"],
            reference=resolve.outputs["reference"],
        )
        dataset = prepare.outputs["dataset"]
        if tuning is not None:
            placed = {"dataset": dataset, "spec": train_spec, "tpu": accelerated}
            train_spec = add_tuning_job(
                image, tuning, target, placed, PIPELINE_LOCATION, PIPELINE_SERVICE_ACCOUNT, retry.apply
            )
        train = stages.train(
            dataset=dataset,
            spec=train_spec,
            tpu=accelerated,
            warm_start=resolve.outputs["warm_start"],
            publish_root=publish_root,
            blessing_metrics=resolve.outputs["blessing_metrics"],
        )
        model = train.outputs["model"]
        evaluate = stages.evaluate(
            dataset=dataset,
            model=model,
            spec=evaluate_spec,
            baseline=resolve.outputs["baseline"],
            publish_root=publish_root,
            tpu=accelerated,
        )
        predict = stages.batch_predict(  # after evaluate: the skew check compares with its eval predictions
            dataset=dataset,
            model=model,
            eval_predictions=evaluate.outputs["Output"],
            spec=predict_spec,
            tpu=accelerated if beam is None else host,
        )
        export = stages.export(dataset=dataset, model=model, tpu=host)
        check = stages.serving_check(exported=export.outputs["exported"], predictions=predict.outputs["predictions"])
        release = stages.release(
            exported=export.outputs["exported"],
            blessing=evaluate.outputs["blessing"],
            publish_root=publish_root,
        )
        # nothing is published unless batch prediction succeeded and the served export agrees with it
        release.after(predict, check)
        tasks = {"resolve": resolve, "prepare": prepare, "train": train, "evaluate": evaluate}
        tasks.update(batch_predict=predict, export=export, serving_check=check, release=release)
        for name, task_ in tasks.items():
            task_.set_caching_options(CACHED[name])
            _set_retry(task_, retry)
        add_vertex_steps(
            dataset=dataset,
            exported=export.outputs["exported"],
            blessing=evaluate.outputs["blessing"],
            publication=release.outputs["publication"],
        )
        return PipelineOutputs(
            dataset=dataset,
            model=model,
            metrics=evaluate.outputs["metrics"],
            classification_metrics=evaluate.outputs["classification_metrics"],
            blessing=evaluate.outputs["blessing"],
            report=evaluate.outputs["report"],
            verdict=evaluate.outputs["verdict"],
            validation=prepare.outputs["validation"],
            predictions=predict.outputs["predictions"],
            exported=export.outputs["exported"],
            serving_check=check.outputs["checked"],
            publication=release.outputs["publication"],
            slice_metrics=evaluate.outputs["slice_metrics"],
        )

    return tpu_estimator_pipeline


def _set_retry(task: dsl.PipelineTask, retry: RetryPolicy) -> None:
    """Sets the retry policy on one of the stages' tasks: a preempted Spot TPU, or any failure, runs the task
    again, and training continues from its checkpoint (`components.records`)."""
    retry.apply(task)


def compile_pipeline(
    output: str,
    image: str,
    tpu: Union[TPUPreset, TPUTarget, None],
    steps: VertexSteps = VertexSteps(),
    beam: Optional[BeamConfig] = None,
    retry: RetryPolicy = NO_RETRIES,
    tuning: Optional[TuningPlan] = None,
) -> str:
    """Compiles the pipeline to a YAML file for Vertex AI, with the run-cost step; returns `output`."""
    steps = dataclasses.replace(steps, run_cost=True)
    compiler.Compiler().compile(build_pipeline(image, tpu, steps, beam, retry, tuning), package_path=output)
    return output
