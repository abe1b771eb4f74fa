"""Dual export (CPU `serve` + TPU `serve,tpu` in one SavedModel), post-export verification, metadata.

`export_model` runs `TPUEstimator.export_saved_model` (the estimator is built with `export_to_cpu=True` and
`export_to_tpu=True` in `estimator_lib.estimator`) with the receivers of `estimator_lib.export.serving`, into a
staging directory. It then verifies the export and only then publishes it as `export_base/<version>`:
  * both tag sets are present and each has the serialized-Example and raw-feature signatures;
  * the TPU meta graph holds a `TPUPartitionedCall` (the TPU computation) and the CPU one does not;
  * the CPU graph, loaded fresh in a new graph and session, gives the estimator's outputs for sample rows,
    through both the `predict` (serialized Examples) and `raw:predict` (feature tensors) signatures.
The tag sets, signatures, checkpoint, schema, job config and the verification report are recorded in
`assets.extra/export_metadata.json` inside the SavedModel (TensorFlow Serving ignores `assets.extra`).

Export API version 1 (default): TPUEstimator wraps the model_fn in `tpu.rewrite` + `TPUPartitionedCall` for
the TPU graph. Version 2: the model_fn must do that itself when TPUEstimator sets `params['use_tpu']` during
export (see `estimator_lib.model.model_fn`); verification fails loudly if it did not.
"""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import tempfile
from typing import Any, Dict, List, Optional, Sequence, Tuple

import numpy as np
import tensorflow as tf
from tensorflow.core.protobuf import config_pb2, meta_graph_pb2, rewriter_config_pb2, saved_model_pb2

from estimator_lib import storage
from estimator_lib.config import JobConfig
from estimator_lib.estimator import build_estimator
from estimator_lib.export import serving
from estimator_lib.model import checkpoints, inputs, transform
from estimator_lib.model.inputs import Patterns
from estimator_lib.model.outputs import output_keys, real_rows
from estimator_lib.schema import CLASSIFICATION, Schema
from estimator_lib.strict import export as strict_export

METADATA_FILE = "assets.extra/export_metadata.json"
CPU_TAGS = (tf.saved_model.SERVING,)
TPU_TAGS = (tf.saved_model.SERVING, tf.saved_model.TPU)
TPU_CALL_OP = strict_export.TPU_CALL_OP
VERIFY_ROWS = 64
# How closely a served output agrees with the estimator's or the batch predictions (export verification, the
# serving check): floats within ATOL + RTOL * |expected| (float32 arithmetic in batches of other sizes), else equal.
RTOL, ATOL = 1e-5, 1e-6


def outputs_agree(have: np.ndarray, want: np.ndarray) -> bool:
    """`have` agrees with `want` (same shape): floats to `RTOL` and `ATOL`, other values exactly."""
    if want.dtype.kind in "fc" and have.dtype.kind in "fciub":
        return bool(np.isclose(have, want, rtol=RTOL, atol=ATOL).all())
    return bool(np.array_equal(have, want))


class ExportVerificationError(RuntimeError):
    """An exported SavedModel failed a post-export check; the message says which and how to fix it."""


@dataclasses.dataclass(frozen=True)
class ExportResult:
    """A verified, published export.

    Attributes:
      export_dir: the SavedModel directory (local or gs://), `export_base/<version>`.
      tag_sets: the meta graphs' tag sets, e.g. (("serve",), ("serve", "tpu")).
      signatures: per tag set ("serve", "serve,tpu"): signature name -> {"method", "inputs", "outputs"},
        each input/output as {"dtype", "shape" (-1 for an unknown size, None for an unknown rank: the TPU
        graph's outputs come out of TPUPartitionedCall without a static shape), "tensor"}.
      metadata: what `assets.extra/export_metadata.json` holds.
    """

    export_dir: str
    tag_sets: Tuple[Tuple[str, ...], ...]
    signatures: Dict[str, Any]
    metadata: Dict[str, Any]


# -- reading a SavedModel -------------------------------------------------------------------------------------
def _tag_key(tags: Sequence[str]) -> str:
    return ",".join(sorted(tags))


def _read_saved_model(local_dir: str) -> saved_model_pb2.SavedModel:
    try:
        return strict_export.read_saved_model(local_dir)
    except FileNotFoundError as e:
        raise ExportVerificationError(f"{local_dir!r} is not a SavedModel: {e}") from e


def _describe_signatures(meta_graph: meta_graph_pb2.MetaGraphDef) -> Dict[str, Any]:
    def tensors(infos) -> Dict[str, Any]:
        return {
            name: {
                "dtype": tf.dtypes.as_dtype(info.dtype).name,
                "shape": None if info.tensor_shape.unknown_rank else [d.size for d in info.tensor_shape.dim],
                "tensor": info.name,
            }
            for name, info in sorted(infos.items())
        }

    return {
        name: {"method": sig.method_name, "inputs": tensors(sig.inputs), "outputs": tensors(sig.outputs)}
        for name, sig in sorted(meta_graph.signature_def.items())
    }


def local_copy(export_dir: str) -> str:
    """`export_dir` itself when local; a downloaded temporary copy of a gs:// export (caller deletes it)."""
    if not storage.is_gcs(export_dir):
        return export_dir
    if not storage.is_committed(export_dir):
        raise FileNotFoundError(f"{export_dir!r} is not a committed export (no commit marker); export it again")
    local = tempfile.mkdtemp(prefix="saved-model-")
    prefix = export_dir.rstrip("/") + "/"
    for uri in storage.list_files(export_dir):
        target = os.path.join(local, uri[len(prefix) :])
        os.makedirs(os.path.dirname(target), exist_ok=True)
        storage.download_file(uri, target)
    return local


def describe_saved_model(export_dir: str) -> Dict[str, Any]:
    """Each meta graph's signatures, by tag set ("serve", "serve,tpu"), of an export (local or gs://)."""
    local = local_copy(export_dir)
    try:
        proto = _read_saved_model(local)
    finally:
        if local != export_dir:
            shutil.rmtree(local, ignore_errors=True)
    return {_tag_key(mg.meta_info_def.tags): _describe_signatures(mg) for mg in proto.meta_graphs}


# -- verification ---------------------------------------------------------------------------------------------
def _required_signatures(task: Optional[str]) -> List[str]:
    names = ["serving_default", serving.PREDICT_SIGNATURE, serving.RAW_PREDICT_SIGNATURE]
    if task is not None:
        names.append("classification" if task == CLASSIFICATION else "regression")
    return names


def check_tag_sets(proto: saved_model_pb2.SavedModel) -> Dict[str, Any]:
    """The export's meta graphs by tag set, checked: a `serve` (CPU) graph without a TPU call and a `serve,tpu`
    graph that makes one.

    Raises:
      ExportVerificationError: naming what is missing and how to fix it.
    """
    graphs = {_tag_key(mg.meta_info_def.tags): mg for mg in proto.meta_graphs}
    for tags in (CPU_TAGS, TPU_TAGS):
        if _tag_key(tags) not in graphs:
            raise ExportVerificationError(
                f"the export has tag sets {sorted(graphs)} but no {_tag_key(tags)!r} meta graph; build the "
                "estimator with export_to_cpu=True and export_to_tpu=True (estimator_lib.estimator)"
            )
    if TPU_CALL_OP not in strict_export.graph_op_types(graphs[_tag_key(TPU_TAGS)]):
        raise ExportVerificationError(
            f"the 'serve,tpu' meta graph holds no {TPU_CALL_OP}, so it would not run on a TPU. With export API "
            "version 2 the model_fn must call tpu.rewrite/TPUPartitionedCall itself when params['use_tpu'] is "
            "set during export; use api_version=1 or a model_fn that does"
        )
    if TPU_CALL_OP in strict_export.graph_op_types(graphs[_tag_key(CPU_TAGS)]):
        raise ExportVerificationError(f"the 'serve' (CPU) meta graph holds a {TPU_CALL_OP}; it cannot run on CPU")
    return graphs


def _check_structure(proto: saved_model_pb2.SavedModel, task: Optional[str]) -> Dict[str, Any]:
    graphs = check_tag_sets(proto)
    signatures = {key: _describe_signatures(mg) for key, mg in graphs.items()}
    for key in (_tag_key(CPU_TAGS), _tag_key(TPU_TAGS)):
        missing = sorted(set(_required_signatures(task)) - set(signatures[key]))
        if missing:
            raise ExportVerificationError(
                f"the {key!r} meta graph lacks signature(s) {missing}; it has {sorted(signatures[key])}"
            )
    tag_sets = tuple(tuple(sorted(mg.meta_info_def.tags)) for mg in proto.meta_graphs)
    return {
        "tag_sets": [list(t) for t in sorted(tag_sets)],
        "signatures": signatures,
        "tpu_partitioned_call": True,
    }


# The sessions that check an export run its graph without grappler's remapper: with oneDNN on (TensorFlow 2.15's
# default on CPUs with AVX-512 VNNI/BF16 or AMX) the remapper aborts the process on some graphs (the BERT pattern's:
# "CHECK failed: key not found: value"); unfused, the graph computes the same ops.
CHECK_SESSION = config_pb2.ConfigProto(
    graph_options=config_pb2.GraphOptions(
        rewrite_options=rewriter_config_pb2.RewriterConfig(remapping=rewriter_config_pb2.RewriterConfig.OFF)
    )
)


def run_cpu_graph(local_dir: str, signature: str, feeds: Dict[str, np.ndarray]) -> Dict[str, np.ndarray]:
    """Loads the `serve` meta graph fresh (new graph and session, `CHECK_SESSION`) and runs one signature on
    `feeds`."""
    with tf.Graph().as_default() as graph, tf.compat.v1.Session(graph=graph, config=CHECK_SESSION) as session:
        meta_graph = tf.compat.v1.saved_model.loader.load(session, list(CPU_TAGS), local_dir)
        sig = meta_graph.signature_def[signature]
        feed_dict = {sig.inputs[name].name: value for name, value in feeds.items()}
        fetches = {name: info.name for name, info in sig.outputs.items()}
        return session.run(fetches, feed_dict)


def compare_outputs(expected: Dict[str, np.ndarray], got: Dict[str, np.ndarray], signature: str) -> float:
    """The largest difference between the estimator's outputs and a signature's; raises ExportVerificationError
    naming the output when one is missing, of another shape, or does not agree (`outputs_agree`)."""
    worst = 0.0
    for name, want in expected.items():
        if name not in got:
            raise ExportVerificationError(f"signature {signature!r} has no output {name!r}; it has {sorted(got)}")
        have = np.asarray(got[name])
        if have.shape != want.shape:
            raise ExportVerificationError(
                f"signature {signature!r} output {name!r} has shape {have.shape}, the estimator {want.shape}"
            )
        numeric = want.dtype.kind in "fciub" and have.dtype.kind in "fciub"
        diff = (
            float(np.max(np.abs(have.astype(np.float64) - want.astype(np.float64)))) if numeric and want.size else 0.0
        )
        allowed = f"rtol {RTOL:g} + atol {ATOL:g}" if want.dtype.kind in "fc" else "0"
        if not outputs_agree(have, want):  # a NaN on either side does not agree
            raise ExportVerificationError(
                f"signature {signature!r} output {name!r} differs from the estimator by {diff:.3g} (allowed "
                f"{allowed}) on the sample rows: the serving receiver and the input pipeline disagree"
            )
        worst = max(worst, diff)
    return worst


def _raw_feeds(sample: Sequence[bytes], schema: Schema) -> Dict[str, np.ndarray]:
    """Host-side parse of the sample into the raw-feature signature's inputs (missing values imputed)."""
    parsed = tf.io.parse_example(tf.constant(list(sample), tf.string), transform.parse_spec(schema, with_label=False))
    return {key: parsed[key].numpy() for key in serving.raw_input_dtypes(schema)}


def verify_export(
    export_dir: str,
    *,
    schema: Optional[Schema] = None,
    sample: Optional[Sequence[bytes]] = None,
    expected: Optional[Dict[str, np.ndarray]] = None,
) -> Dict[str, Any]:
    """Checks an export; raises `ExportVerificationError` naming the failed check.

    Args:
      export_dir: the SavedModel directory (local or gs://).
      schema: the features the model reads (the raw signature's inputs) and the label; needed with `sample`.
      sample: serialized `tf.Example`s to run through the fresh CPU graph.
      expected: the estimator's outputs for `sample`: {"class_ids" int32 [n], "probabilities" float32 [n, K]}
        or {"predictions" float32 [n]}.

    Returns:
      {"tag_sets", "signatures", "tpu_partitioned_call", "rows_checked", "max_abs_diff" per signature}.
    """
    local = local_copy(export_dir)
    try:
        task = schema.label.task if schema is not None else None
        report = _check_structure(_read_saved_model(local), task)
        report["rows_checked"] = 0
        if sample is not None and len(sample):
            if schema is None or expected is None:
                raise ValueError("verify_export: a sample needs both schema= and expected= outputs to compare")
            examples = {serving.EXAMPLES_INPUT: np.array(list(sample), dtype=object)}
            report["max_abs_diff"] = {
                name: compare_outputs(expected, run_cpu_graph(local, name, feeds), name)
                for name, feeds in (
                    (serving.PREDICT_SIGNATURE, examples),
                    (serving.RAW_PREDICT_SIGNATURE, _raw_feeds(sample, schema)),
                )
            }
            report["rows_checked"] = len(sample)
        return report
    finally:
        if local != export_dir:
            shutil.rmtree(local, ignore_errors=True)


# -- export ---------------------------------------------------------------------------------------------------
def _sample_records(patterns: Patterns, limit: int) -> List[bytes]:
    dataset = tf.data.TFRecordDataset(inputs.resolve_files(patterns)).take(limit)
    return list(dataset.as_numpy_iterator())


def _estimator_outputs(estimator, schema: Schema, sample: List[bytes], checkpoint: str, work_dir: str):
    """The estimator's own predictions (checkpoint path, padded batches) for `sample`."""

    path = os.path.join(work_dir, "verify-sample.tfrecord")
    with tf.io.TFRecordWriter(path) as writer:
        for record in sample:
            writer.write(record)
    input_fn = inputs.predict_input_fn_builder(path, schema, len(sample))
    batches = estimator.predict(input_fn, yield_single_examples=False, checkpoint_path=checkpoint)
    rows = list(real_rows(batches, len(sample)))
    return {k: np.concatenate([b[k] for b in rows]) for k in output_keys(schema)}


def _free_version(export_base: str, version: str) -> str:
    """`version` (the export's timestamp), bumped while `export_base/<version>` already holds files."""
    number = int(version)
    while storage.list_files(storage.join(export_base, str(number))):
        number += 1
    return str(number)


def export_model(
    job: JobConfig,
    schema: Schema,
    model_dir: str,
    export_base: str,
    *,
    api_version: int = 1,
    checkpoint_path: Optional[str] = None,
    verify_rows: Optional[Patterns] = None,
    data_profile: Optional[Dict[str, Any]] = None,
    row_rules: Optional[Dict[str, Any]] = None,
) -> ExportResult:
    """Exports a checkpoint as one SavedModel with `serve` and `serve,tpu` meta graphs, verifies it, and
    publishes it atomically as `export_base/<version>` (local or gs://).

    Args:
      job: the job config the model was trained with.
      schema: the dataset schema; the signatures take the features `job.model.features` selects.
      model_dir: the estimator's model directory.
      export_base: the directory of versions (TensorFlow Serving's model base path).
      api_version: TPUEstimator export API version, 1 (default) or 2.
      checkpoint_path: the checkpoint to export; by default the model's (`model.checkpoints.selected_checkpoint`:
        the best by validation loss, else the newest).
      verify_rows: prepared TFRecord patterns; their first `VERIFY_ROWS` records are predicted by the
        estimator and by the fresh CPU graph, which must agree (`outputs_agree`). None checks structure only.
      data_profile: the training split's distribution (`PrepareResult.profile()`), recorded beside the schema
        so a later run can check its data against this model's (`estimator_lib.data.validation`).
      row_rules: how the training rows were read (`predict.sources.scoring_options`: missing-value tokens,
        bad-row policy), recorded so new rows scored with the export are read the same way.

    Raises:
      ExportVerificationError: a check failed; nothing is published.
    """
    if api_version not in (1, 2):
        raise ValueError(f"api_version={api_version!r} must be 1 (TPUEstimator rewrites for TPU) or 2 (model_fn does)")
    estimator = build_estimator(job, schema, model_dir, export_saved_model_api_version=api_version)
    checkpoint = checkpoint_path or checkpoints.selected_checkpoint(model_dir)
    if checkpoint is None:
        raise FileNotFoundError(f"no checkpoint in model_dir={model_dir!r} to export; train first")
    model_schema = schema.select(job.model.features)
    staging = storage.local_staging_dir(storage.join(export_base, "export"))
    try:
        receiver_fn = serving.serving_input_receiver_fn_builder(model_schema)
        local_dir = estimator.export_saved_model(staging, receiver_fn, checkpoint_path=checkpoint).decode("utf-8")
        sample = _sample_records(verify_rows, VERIFY_ROWS) if verify_rows is not None else None
        expected = _estimator_outputs(estimator, schema, sample, checkpoint, staging) if sample else None
        report = verify_export(local_dir, schema=model_schema, sample=sample, expected=expected)
        export_dir = storage.join(export_base, _free_version(export_base, os.path.basename(local_dir)))
        metadata = _metadata(job, schema, model_schema, checkpoint, api_version, export_dir, report)
        if data_profile is not None:
            metadata["data_profile"] = data_profile
        if row_rules is not None:
            metadata["row_rules"] = row_rules
        storage.write_text(os.path.join(local_dir, METADATA_FILE), json.dumps(metadata, indent=2, sort_keys=True))
        storage.commit_directory(local_dir, export_dir)
    finally:
        storage.discard_staging(staging)
    tag_sets = tuple(tuple(t) for t in report["tag_sets"])
    return ExportResult(export_dir, tag_sets, report["signatures"], metadata)


def _metadata(
    job: JobConfig,
    schema: Schema,
    model_schema: Schema,
    checkpoint: str,
    api_version: int,
    export_dir: str,
    report: Dict[str, Any],
) -> Dict[str, Any]:
    return {
        "export_dir": export_dir,
        "api_version": api_version,
        "checkpoint": checkpoint,
        "global_step": int(tf.train.load_variable(checkpoint, "global_step")),
        "tag_sets": report["tag_sets"],
        "signatures": report["signatures"],
        "serving": {
            "examples_input": serving.EXAMPLES_INPUT,
            "raw_receiver": serving.RAW_RECEIVER,
            "raw_inputs": {k: v.name for k, v in serving.raw_input_dtypes(model_schema).items()},
        },
        "verification": {k: v for k, v in report.items() if k not in ("signatures", "tag_sets")},
        "schema": schema.to_dict(),
        "job": job.to_dict(),
    }


def read_export_metadata(export_dir: str) -> Dict[str, Any]:
    """The metadata recorded with an export made by `export_model` (local or gs://)."""
    path = storage.join(export_dir, METADATA_FILE)
    if not storage.exists(path):
        raise FileNotFoundError(f"{export_dir!r} has no {METADATA_FILE}; it was not exported by export_model")
    return json.loads(storage.read_text(path))


# -- serving from an export -----------------------------------------------------------------------------------
@dataclasses.dataclass(frozen=True)
class ServingModel:
    """The CPU graph of an export, loaded; keep it alive while calling `signature`.

    Attributes:
      loaded: the object `tf.saved_model.load` returned (owns the variables and tables).
      signature: the `predict` signature: examples string [B] -> model outputs.
      local_dir: where the SavedModel was read (a temporary copy for gs://; `close()` deletes it).
      export_dir: the export as given (local or gs://).
    """

    loaded: Any
    signature: Any
    local_dir: str
    export_dir: str

    def close(self) -> None:
        if self.local_dir != self.export_dir:
            shutil.rmtree(self.local_dir, ignore_errors=True)


def load_serving_model(export_dir: str, signature: str = serving.PREDICT_SIGNATURE) -> ServingModel:
    """Loads the `serve` (CPU) meta graph of an export for calling its signature on the host CPU."""
    local = local_copy(export_dir)
    try:
        loaded = tf.saved_model.load(local, tags=list(CPU_TAGS))
        if signature not in loaded.signatures:
            raise ExportVerificationError(
                f"{export_dir!r} has no signature {signature!r}; it has {sorted(loaded.signatures)}"
            )
    except BaseException:
        if local != export_dir:  # the downloaded copy of a gs:// export
            shutil.rmtree(local, ignore_errors=True)
        raise
    return ServingModel(loaded, loaded.signatures[signature], local, export_dir)
