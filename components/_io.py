"""Adapter plumbing shared by the components: typed configs from parameters, output checks, artifact metadata.

Only components call this. It turns KFP parameters and artifacts into the typed arguments of one
`estimator_lib` call and describes that call's result on the output artifacts; it holds no ML logic.
Every `describe_*` first checks that the output really exists, so a component never reports success for
an output that is not there.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import typing
from typing import Any, Dict, Mapping

from estimator_lib import storage
from estimator_lib.config import JobConfig, TPUSettings, set_dotted

JOB_CONFIG_FILE = "job_config.json"
BLESSING_FILE = "blessing.json"

log = logging.getLogger("components")


class OutputMissingError(RuntimeError):
    """A stage finished but its output is not where it must be."""


def require_output(uri: str, what: str) -> None:
    if not storage.exists(uri):
        raise OutputMissingError(f"{what} was not written: {uri} does not exist; the stage failed silently")


def typed(cls: Any, data: Mapping[str, Any]) -> Dict[str, Any]:
    """`data` for dataclass `cls` with whole floats turned back into ints where `cls` declares ints.

    KFP carries dict and list parameters as protobuf Structs, whose numbers are all floats: a
    `{"train_steps": 300}` sent in arrives as `{"train_steps": 300.0}`. The dataclass's own type hints say
    which fields are ints (also inside Optional, tuples and nested configs).
    """
    hints = typing.get_type_hints(cls)
    return {key: _typed_value(hints[key], value) if key in hints else value for key, value in data.items()}


def _typed_value(hint: Any, value: Any) -> Any:
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if dataclasses.is_dataclass(hint) and isinstance(value, Mapping):
        return typed(hint, value)
    if origin is typing.Union:
        return _typed_value(next(a for a in args if a is not type(None)), value)
    if hint is int and isinstance(value, float) and value.is_integer():
        return int(value)
    if origin in (tuple, list) and isinstance(value, (list, tuple)) and args:
        return [_typed_value(args[0], v) for v in value]
    return value


def _with_dotted(data: Mapping[str, Any], overrides: Mapping[str, Any]) -> Dict[str, Any]:
    out = json.loads(json.dumps(data))
    for dotted, value in overrides.items():
        set_dotted(out, dotted, value, create=True)
    return out


def placement(tpu: Mapping[str, Any]) -> Dict[str, Any]:
    """{"use_tpu": True, ...} -> {"tpu.use_tpu": True, ...}: a stage's TPU placement as config overrides."""
    return {f"tpu.{key}": value for key, value in tpu.items()}


def training_job(
    job_config: Mapping[str, Any], hyperparameters: Mapping[str, Any], tpu: Mapping[str, Any]
) -> JobConfig:
    """The job config for training: the full config, then the pipeline's hyperparameters, then the placement.

    Args:
      job_config: a `JobConfig.to_dict()` (empty for the defaults).
      hyperparameters: dotted overrides from the pipeline's own parameters ({"training.train_steps": 300}).
      tpu: this stage's `tpu` settings ({} keeps the config's).
    """
    merged = _with_dotted(job_config, {**hyperparameters, **placement(tpu)})
    return JobConfig.from_dict(typed(JobConfig, merged))


def write_job_config(model_uri: str, job: JobConfig) -> None:
    """Records the training config beside the checkpoints: later stages rebuild the same model from it."""
    storage.write_text(storage.join(model_uri, JOB_CONFIG_FILE), job.to_json())


def stage_job(model_uri: str, tpu: Mapping[str, Any]) -> JobConfig:
    """The trained model's config placed for this stage (TPU or host CPU)."""
    path = storage.join(model_uri, JOB_CONFIG_FILE)
    require_output(path, "the trained model's job config")
    return JobConfig.from_json(storage.read_text(path)).with_overrides(placement(typed(TPUSettings, tpu)))


def prepare_config(data: str, label: str, task: str, key_column: str, eval_fraction: float, options: Mapping[str, Any]):
    """The `PrepareConfig` of the prepare stage's parameters ("auto" task and "" key column mean inferred)."""
    from estimator_lib.config import PrepareConfig
    from estimator_lib.data.embedded import resolve_data

    fields = {
        **options,
        "data": [resolve_data(data)],
        "label": label,
        "task": None if task == "auto" else task,
        "key_column": key_column or None,
        "eval_fraction": eval_fraction,
    }
    return PrepareConfig.from_dict(typed(PrepareConfig, fields))


def read_blessing(blessing_uri: str):
    from estimator_lib.evaluation import Blessing

    path = storage.join(blessing_uri, BLESSING_FILE)
    require_output(path, "the evaluation's blessing")
    return Blessing.from_dict(json.loads(storage.read_text(path)))


# -- describing outputs --------------------------------------------------------------------------------------
def describe_dataset(dataset, result) -> None:
    """Prepared Dataset: split counts, where its schema is, label and task, content fingerprint."""
    from estimator_lib.release import fingerprint

    schema_uri = storage.join(dataset.uri, "schema.json")
    require_output(schema_uri, "the prepared schema")
    dataset.metadata.update(
        {
            "counts": dict(result.counts),
            "schema_uri": schema_uri,
            "manifest_uri": storage.join(dataset.uri, "manifest.json"),
            "label": result.schema.label.name,
            "task": result.schema.label.task,
            "classes": list(result.schema.label.classes),
            "fingerprint": fingerprint(dataset.uri),
        }
    )


def describe_model(model, result, job: JobConfig, warm_started_from) -> None:
    """Trained Model: the checkpoint directory is the artifact's uri; global step, checkpoint, config."""
    from estimator_lib.release import fingerprint_files

    require_output(result.checkpoint + ".index", "the final checkpoint")
    files = storage.glob(result.checkpoint + ".*")
    model.metadata.update(
        {
            "model_dir": model.uri,
            "global_step": int(result.global_step),
            "checkpoint": result.checkpoint,
            "warm_started_from": warm_started_from or "",
            "config": job.to_dict(),
            "fingerprint": fingerprint_files(files, model.uri),
        }
    )


def describe_evaluation(evaluation, metrics, classification_metrics, blessing) -> None:
    """Metrics (eval split), ClassificationMetrics (confusion matrix, ROC curve) and the Blessing record."""
    from estimator_lib.release import fingerprint_files

    for name, value in sorted(evaluation.metrics.items()):
        metrics.log_metric(name, float(value))
    metrics.log_metric("blessed", 1.0 if evaluation.blessing.blessed else 0.0)
    if evaluation.confusion_matrix is not None:
        classification_metrics.log_confusion_matrix(list(evaluation.classes), evaluation.confusion_matrix)
        roc = evaluation.roc
        classification_metrics.log_roc_curve(roc["fpr"], roc["tpr"], roc["thresholds"])
    path = storage.join(blessing.uri, BLESSING_FILE)
    storage.write_text(path, evaluation.blessing.to_json())
    record = evaluation.blessing.to_dict()
    blessing.metadata.update(
        {
            "blessed": record["blessed"],
            "reasons": record["reasons"],
            "summary": evaluation.blessing.summary(),
            "baseline_uri": record["baseline_uri"] or "",
            "candidate_metrics": record["candidate_metrics"],
            "baseline_metrics": record["baseline_metrics"] or {},
            "global_step": int(evaluation.global_step),
            "fingerprint": fingerprint_files([path], blessing.uri),
        }
    )
    log.info("evaluation: %s", evaluation.blessing.summary())


def describe_predictions(predictions, result) -> None:
    """Predictions Dataset: row count, shards, manifest."""
    from estimator_lib.release import fingerprint

    for shard in result.shards:
        require_output(shard, "a prediction shard")
    encoded = result.manifest.get("raw", {}).get("encoded")
    if encoded:
        require_output(storage.join(encoded, "manifest.json"), "the encoded rows' manifest")
    predictions.metadata.update(
        {
            "count": int(result.count),
            "shards": list(result.shards),
            "manifest": dict(result.manifest),
            "scored_rows_uri": encoded or "",
            "fingerprint": fingerprint(predictions.uri),
        }
    )


def describe_export(exported, release) -> None:
    """Exported Model: SavedModel directory, tag sets, signatures; whether and where it was published."""
    from estimator_lib.release import fingerprint

    export = release.export
    require_output(storage.join(export.export_dir, "saved_model.pb"), "the exported SavedModel")
    published = release.published
    exported.metadata.update(
        {
            "export_dir": export.export_dir,
            "tag_sets": [list(tags) for tags in export.tag_sets],
            "signatures": _jsonable(export.signatures),
            "published": published is not None,
            "publish_reason": release.reason,
            "published_uri": published.uri if published else "",
            "published_version": published.version if published else "",
            "fingerprint": fingerprint(export.export_dir),
        }
    )
    log.info("export: %s", release.reason)


def _jsonable(value: Any) -> Any:
    return json.loads(json.dumps(value, default=str))
