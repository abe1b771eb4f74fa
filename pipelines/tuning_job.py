"""A Vertex AI hyperparameter tuning job over the train stage (`compile --tune-space FILE`).

Between prepare and train the compiled pipeline runs three tasks:

  trial_pool ──> HyperparameterTuningJobRunOp (Vertex AI's study: --tune-trials trials, --tune-parallel at once)
                                          └──> best_train_spec ──> train (the winner's spec) ──> evaluate, ...

Each trial runs `python -m pipelines.tune_trial` on the component image and machine the train stage uses (the
TPU preset, or CPU), with the trial's values appended as `--PARAMETER_ID=VALUE`; it trains on the prepared
dataset, is judged on the validation split, and writes the space's metric where Vertex AI reads it. The study
spec (metric, goal, parameters) comes from the space file (`study_spec`), through google-cloud-pipeline-components'
`serialize_metrics` and `serialize_parameters`.
"""

import dataclasses
import json
from typing import Any, Callable, Optional

from kfp import dsl

from components.tuning import best_train_spec, trial_pool
from estimator_lib.config import ConfigError
from estimator_lib.config.tuning import CATEGORICAL, FLOAT, SearchSpace, parameter_id
from pipelines.tpu import TPUTarget

TRIAL_COMMAND = ["python", "-m", "pipelines.tune_trial"]
CPU_MACHINE = "n1-standard-8"  # a trial without a TPU


@dataclasses.dataclass(frozen=True)
class TuningPlan:
    """The tuning job a pipeline runs before training: the space, how many trials, how many at once."""

    space: SearchSpace
    trials: int = 10
    parallel: int = 1

    def __post_init__(self) -> None:
        if self.trials < 1:
            raise ConfigError(f"--tune-trials {self.trials}: run at least one trial")
        if not 1 <= self.parallel <= self.trials:
            raise ConfigError(f"--tune-parallel {self.parallel}: use 1 to --tune-trials ({self.trials})")


def study_spec(space: SearchSpace) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """The study's metrics and parameters as the tuning job component takes them: the space's metric with its
    direction as the goal; each parameter by its id (`parameter_id`), a user model's "hparams.NAME" included."""
    # Lazy: the Vertex AI SDKs take seconds to import, and only a compile with a tuning job needs them.
    from google.cloud.aiplatform import hyperparameter_tuning as hpt
    from google_cloud_pipeline_components.v1.hyperparameter_tuning_job import serialize_metrics, serialize_parameters

    specs = {}
    for p in space.parameters:
        if p.type == CATEGORICAL:
            specs[parameter_id(p.key)] = hpt.CategoricalParameterSpec(values=list(p.values))
        elif p.type == FLOAT:
            specs[parameter_id(p.key)] = hpt.DoubleParameterSpec(min=p.low, max=p.high, scale=p.scale)
        else:
            specs[parameter_id(p.key)] = hpt.IntegerParameterSpec(min=p.low, max=p.high, scale=p.scale)
    return serialize_metrics({space.metric: space.direction}), serialize_parameters(specs)


def worker_pool(image: str, target: Optional[TPUTarget]) -> dict[str, Any]:
    """One trial's worker pool: the train stage's machine (the TPU preset's, or CPU) running `TRIAL_COMMAND`
    (`components.tuning.trial_pool` adds its flags)."""
    machine = target.machine_spec() if target else {"machine_type": CPU_MACHINE}
    container = {"image_uri": image, "command": TRIAL_COMMAND, "args": []}
    if target:
        container["env"] = [{"name": k, "value": v} for k, v in sorted(target.preset.env.items())]
    return {"machine_spec": machine, "replica_count": 1, "container_spec": container}


def add_tuning_job(
    image: str,
    plan: TuningPlan,
    target: Optional[TPUTarget],
    placed: dict[str, Any],
    location: str,
    service_account: str,
    configure: Callable[[Any], Any] = lambda task: task,
) -> Any:
    """Adds the three tasks to the pipeline being built; returns the tuned train spec's channel.

    Args:
      image: the component image (the trials run on it too).
      plan: the tuning job.
      target: the TPU the train stage runs on, or None (CPU).
      placed: the train stage's inputs: "dataset" (the prepared Dataset), "spec" (the train spec), "tpu".
      location, service_account: the pipeline job's (Vertex AI placeholders).
      configure: called on each of the three tasks (the pipeline's retry policy).
    """
    from google_cloud_pipeline_components.v1.hyperparameter_tuning_job import HyperparameterTuningJobRunOp

    space_json = plan.space.to_json()
    pool = _component(trial_pool, image)(
        dataset=placed["dataset"],
        spec=placed["spec"],
        tpu=placed["tpu"],
        space=space_json,
        pool=json.dumps(worker_pool(image, target), sort_keys=True),
    )
    metrics, parameters = study_spec(plan.space)
    job = HyperparameterTuningJobRunOp(
        display_name="tune-train",
        base_output_directory=f"{dsl.PIPELINE_ROOT_PLACEHOLDER}/tuning/{dsl.PIPELINE_JOB_ID_PLACEHOLDER}",
        worker_pool_specs=pool.output,
        study_spec_metrics=metrics,
        study_spec_parameters=parameters,
        max_trial_count=plan.trials,
        parallel_trial_count=plan.parallel,
        location=location,
        service_account=service_account,
    )
    best = _component(best_train_spec, image)(
        gcp_resources=job.outputs["gcp_resources"], spec=placed["spec"], space=space_json
    )
    best.set_caching_options(False)  # it reads the job's trials through the Vertex AI API
    for task in (pool, job, best):
        configure(task)
    return best.outputs["Output"]


def _component(func: Any, image: str) -> Any:
    return dsl.component(func, base_image=image, install_kfp_package=False, packages_to_install=[])
