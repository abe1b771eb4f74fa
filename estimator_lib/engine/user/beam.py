"""A user's model_fn batch-predicted on Apache Beam (`engine="beam"`), its output `run.predict`'s byte for byte.

The plan, pipelines and commit are `predict.beam.score_records`'s; this module gives it the user's `Scorer`
(`BeamScorer`): each worker process imports the model_fn (`stages.locate_code`: a gs:// wheel is copied to the
worker), builds the TPUEstimator on its host CPU and keeps one predict loop open (`FedModel`), fed the batches of
`training.predict_batch_size` records the plan cuts (across file ends, as the in-process input does), the last
one padded with the spec's padding record, so every row is predicted in the batch it has in-process; rows are
formatted by the in-process `run.RecordLines`.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable, Dict, Iterator, List, Optional, Sequence, Tuple

import numpy as np
import tensorflow as tf

from estimator_lib.config import JobConfig
from estimator_lib.config.beam import BeamConfig
from estimator_lib.config.feature_spec import FeatureSpec
from estimator_lib.config.skew import SkewConfig
from estimator_lib.engine.user import run, stages
from estimator_lib.estimator import build_user_estimator
from estimator_lib.model import inputs
from estimator_lib.model.inputs import InputFn, Patterns
from estimator_lib.model.user import records
from estimator_lib.model.user.prepare import PreparedRecords
from estimator_lib.predict import PredictResult, skew_beam
from estimator_lib.predict.beam import FedBatches, score_records
from estimator_lib.predict.rows import Batch, HostRows
from estimator_lib.predict.shards import check_num_shards
from estimator_lib.predict.skew import SkewCheck, SkewFinish
from estimator_lib.schema import INDEX_FEATURE, PADDING_FEATURE


def _fed_input_fn(batches: Callable[[], Iterator[Any]], spec: FeatureSpec, batch_size: int) -> InputFn:
    """The predict input_fn over batches handed in one at a time (`FedBatches`): each (records [batch_size]: real
    ones, then padding records; the real count), parsed as `user_inputs.padded_input_fn_builder` parses them."""

    @tf.autograph.experimental.do_not_convert  # plain TF calls: converting them only costs start-up
    def parse(serialized: tf.Tensor, real: tf.Tensor):
        index = tf.range(batch_size, dtype=tf.int32)
        parsed = records.parse_batch(serialized, spec, with_label=False)
        features = parsed[0] if isinstance(parsed, tuple) else parsed
        features[PADDING_FEATURE] = tf.cast(index >= real, tf.float32)
        features[INDEX_FEATURE] = index
        return parsed

    def input_fn(params: Dict) -> tf.data.Dataset:  # TPUEstimator reads `params` from this signature
        signature = (tf.TensorSpec([batch_size], tf.string), tf.TensorSpec([], tf.int32))
        fed = tf.data.Dataset.from_generator(batches, output_signature=signature)
        return fed.map(parse).with_options(inputs.fixed_pipeline_options())

    return input_fn


def _key_of(record: bytes, name: str) -> Any:
    """A record's key as `records.read_column` gives it: text, an int, or a float."""
    value = tf.train.Example.FromString(record).features.feature[name]
    first = getattr(value, value.WhichOneof("kind")).value[0]
    return first.decode("utf-8", "backslashreplace") if isinstance(first, bytes) else first


class FedModel:
    """A user's model_fn predicting batches handed in one at a time on a worker's host CPU: one TPUEstimator
    predict loop per worker process, fed `training.predict_batch_size` records at a time."""

    def __init__(self, job: JobConfig, user: run.UserModel, model_dir: str, checkpoint: str, files: Sequence[str]):
        self._size, self._key, self._spec, self._files = (
            job.training.predict_batch_size,
            user.spec.key,
            user.spec,
            files,
        )
        self._padding = records.padding_record(user.spec)
        estimator = build_user_estimator(job, user.load(), user.params, model_dir)
        input_fn = lambda batches: _fed_input_fn(batches, user.spec, self._size)  # noqa: E731
        self._fed = FedBatches(
            lambda batches: estimator.predict(
                input_fn(batches), checkpoint_path=checkpoint, yield_single_examples=False
            )
        )

    def predict(self, batch: List[bytes]) -> Tuple[HostRows, Batch]:
        """(the records' keys, their predictions) of one batch of at most `predict_batch_size` records."""
        padded = np.array(batch + [self._padding] * (self._size - len(batch)), dtype=object)
        try:
            outputs = run.real_rows(self._fed.predict((padded, len(batch))), 0)
        except tf.errors.InvalidArgumentError as e:  # a record the spec does not describe: name it, as in-process
            records.raise_for_records(self._files, self._spec, False, e)
        keys = [_key_of(record, self._key) for record in batch] if self._key else None
        return run.host_rows(keys, len(batch)), outputs

    def close(self) -> None:
        self._fed.close()


@dataclasses.dataclass(frozen=True)
class BeamScorer:
    """A user's model as the workers score it (`predict.beam.Scorer`): the model_fn imported on each worker from
    `code` (`stages.locate_code`), restored from `checkpoint`, rows formatted by `run.RecordLines`."""

    job: JobConfig
    user: run.UserModel
    code: Optional[str]
    model_dir: str
    checkpoint: str
    files: Tuple[str, ...]

    @property
    def cache_key(self) -> str:
        return repr(self)

    def load(self) -> FedModel:
        user = dataclasses.replace(self.user, code_dir=stages.locate_code(self.code))
        return FedModel(self.job, user, self.model_dir, self.checkpoint, self.files)

    def formatter(self, files: Sequence[str], per_file: Sequence[int]) -> run.RecordLines:
        return run.RecordLines(files, per_file)


def predict(
    job: JobConfig,
    user: run.UserModel,
    data: Patterns,
    model_dir: str,
    output_dir: str,
    *,
    num_examples: Optional[int] = None,
    num_shards: int = 1,
    checkpoint_path: Optional[str] = None,
    beam_config: Optional[BeamConfig] = None,
    code: Optional[str] = None,
    finish: Optional[SkewFinish] = None,
) -> PredictResult:
    """`run.predict` on Apache Beam (`beam_config`; None: the DirectRunner here): the same arguments, the same
    bytes. The workers count the records, predict them and write the shards; the launcher holds a count per file.

    `job` is placed on the host CPU (`tpu.use_tpu=False`): the workers have no TPU. `code`: where the workers
    import the model_fn from (a folder they can read, or a wheel, gs:// on Dataflow: the job's `model.code`);
    None: `user.code_dir`. The launcher checks each file's first record against the spec; a later record that
    does not match it fails the worker that reads it, naming the file, the record and the feature (as in-process).
    `finish`: the skew check (`skew_finish`, its records counted by the workers) written before the commit.
    """
    user = run.resolve_train_steps(job, user)
    files = inputs.resolve_files(data)
    checkpoint = run.checkpoint_of(model_dir, checkpoint_path, "predict with")
    check_num_shards(num_shards)
    records.check_first_records(files, user.spec, with_label=False)
    scorer = BeamScorer(job, user, user.code_dir if code is None else code, model_dir, checkpoint, tuple(files))
    provenance = run.prediction_provenance(checkpoint, files, user)
    compression = records.compression(files)  # one kind for all files, as in-process
    size = job.training.predict_batch_size
    return score_records(
        scorer,
        files,
        output_dir,
        size,
        num_examples,
        num_shards,
        [],
        provenance,
        beam_config,
        compression,
        None,
        finish,
    )


def skew_finish(
    check: Optional[SkewCheck],
    files: Sequence[str],
    spec: FeatureSpec,
    count: Optional[int],
    beam_config: Optional[BeamConfig] = None,
) -> Optional[SkewFinish]:
    """`run.skew_finish` with the records counted on Beam's workers (`predict.skew_beam`), before the scoring."""
    if check is None:
        return None
    pending = skew_beam.start(check, files, spec, count, beam_config, records.compression(files))
    return check.finish(pending, None)


def predict_stage(
    job: JobConfig,
    prepared: PreparedRecords,
    model_dir: str,
    data: str,
    output_dir: str,
    beam: BeamConfig,
    skew: Optional[SkewConfig] = None,
) -> PredictResult:
    """`stages.predict` on Apache Beam (`beam` says where): the workers import the job's code (`model.code`)
    and count the records for the skew check."""
    files, count = stages.predict_inputs(prepared, data)
    user = stages.user_model(job, prepared)
    finish = skew_finish(stages.skew_check(prepared, skew), files, prepared.spec, count, beam)
    on_beam = dict(beam_config=beam, code=job.model.code, finish=finish)
    return predict(job, user, files, model_dir, output_dir, num_examples=count, **on_beam)
