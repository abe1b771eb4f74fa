"""TPU input_fns over a user's TFRecords, built from their `FeatureSpec` (the reads run on the host CPU).

- Training: the files split over TPU hosts (`params['context']`), a seeded order per epoch, endless, batches of
  `params['batch_size']` (per shard on a TPU) with `drop_remainder=True` (static shapes), resumed where the
  checkpoint left off (`model.inputs.training_records`: the same stream the built-in models read; files that
  fit in memory are read and parsed once per call, `inputs.cached_training_batches`).
- Evaluation and prediction: every record once, in file order, padded to whole batches with a record that
  matches the spec; each row carries `is_padding` (float32 [B]: 1.0 on padding rows) and `example_index`
  (int32 [B]: its position in the input), and, for a sliced evaluation, `slice_ids` (int32 [B, S]: its slice
  under each slice spec, looked up by its position), which the model_fn wrapper takes out before the user's
  model_fn sees the features.

Every tensor has a static shape: [B, *shape] per feature, the label [B, *shape].
"""

from __future__ import annotations

from typing import Dict, List, Optional

import numpy as np
import tensorflow as tf

from estimator_lib.config.feature_spec import SLICE_FEATURE, FeatureSpec
from estimator_lib.model import inputs
from estimator_lib.model.inputs import InputFn, Patterns
from estimator_lib.model.user import records
from estimator_lib.schema import INDEX_FEATURE, PADDING_FEATURE


def train_input_fn_builder(
    patterns: Patterns, spec: FeatureSpec, seed: int, shuffle_buffer_size: int, model_dir: Optional[str] = None
) -> InputFn:
    """input_fn(params) -> Dataset of (features {name: [B, *shape]}, label [B, *shape]) (features only when the
    spec has no label). `input_fn.files` and `input_fn.compression` say what it reads."""
    files = inputs.resolve_files(patterns)
    compression = records.compression(files)
    counts = _file_counts(files, compression)
    parse = lambda s: records.parse_batch(s, spec, with_label=True)  # noqa: E731

    # AutoGraph would rewrite every function given to tf.data below (the parse, the per-epoch order, the gather)
    # from its source, about 0.5 s per train() call; none branches or loops on a tensor, so the graph is the same.
    @tf.autograph.experimental.do_not_convert
    def build(params: Dict) -> tf.data.Dataset:
        batch_size = params["batch_size"]
        own_files = inputs.host_files(files, params)
        _, _, replicas = inputs.deployment(params)
        position = inputs.start_step(model_dir) * replicas * batch_size
        if counts is not None:
            own_counts = [counts[f] for f in own_files]
            dataset = inputs.cached_training_batches(
                own_files, own_counts, parse, seed, shuffle_buffer_size, position, batch_size, compression
            )
        else:
            stream = inputs.training_records(own_files, seed, shuffle_buffer_size, position, compression)
            dataset = stream.batch(batch_size, drop_remainder=True).map(parse, num_parallel_calls=tf.data.AUTOTUNE)
        return dataset.prefetch(tf.data.AUTOTUNE)

    def input_fn(params: Dict) -> tf.data.Dataset:  # TPUEstimator reads `params` from this signature
        return build(params)

    input_fn.files = files  # type: ignore[attr-defined]
    return input_fn


@tf.autograph.experimental.do_not_convert  # the counts' tf.data functions are plain TF calls
def _file_counts(files: List[str], compression: str) -> Optional[Dict[str, int]]:
    """Records per file when the files are small enough to hold parsed in memory (`inputs.CACHE_BYTES`, judged
    by their stored size, which parsing at most doubles for these dtypes), else None. A cached table is read and
    parsed once per `train()` call and batches are gathered from it: the same batches as the record stream
    (`inputs.cached_training_batches`), without a per-record cost in every epoch."""
    if sum(tf.io.gfile.stat(f).length for f in files) * (8 if compression else 2) > inputs.CACHE_BYTES:
        return None
    return {f: inputs.count_records([f], compression) for f in files}


def padded_input_fn_builder(
    patterns: Patterns,
    spec: FeatureSpec,
    num_examples: Optional[int],
    with_label: bool,
    slice_ids: Optional[np.ndarray] = None,
) -> InputFn:
    """The eval (`with_label`) or predict input_fn: every record once, padded to whole global batches.

    `slice_ids`: int [N, S], each record's slice under each slice spec, in input order (`evaluation.slices`);
    given, every batch carries its rows' as `slice_ids` (padding rows repeat the last record's: they are masked).
    `input_fn.num_examples` holds the real record count, `input_fn.files` the files in order."""
    files = inputs.resolve_files(patterns)
    compression = records.compression(files)
    count = inputs.count_records(files, compression) if num_examples is None else num_examples
    padding = records.padding_record(spec)
    if slice_ids is not None:
        slice_ids = np.asarray(slice_ids, np.int32).reshape(count, -1)

    def input_fn(params: Dict) -> tf.data.Dataset:
        batch_size = params["batch_size"]
        _, hosts, replicas_per_host = inputs.deployment(params)
        steps = inputs.eval_steps(count, batch_size * replicas_per_host * hosts)

        @tf.autograph.experimental.do_not_convert  # plain TF calls: converting them only costs start-up
        def parse(batch_index, serialized):
            index = tf.cast(batch_index, tf.int32) * batch_size + tf.range(batch_size, dtype=tf.int32)
            parsed = records.parse_batch(serialized, spec, with_label)
            features = parsed[0] if with_label and spec.label else parsed
            features[PADDING_FEATURE] = tf.cast(index >= count, tf.float32)
            features[INDEX_FEATURE] = index
            if slice_ids is not None:
                features[SLICE_FEATURE] = tf.gather(slice_ids, tf.minimum(index, count - 1))
            return parsed

        dataset = inputs.padded_batches(files, count, batch_size, steps, params, 1, padding, compression)
        dataset = dataset.map(parse, num_parallel_calls=inputs.PARSE_PARALLELISM).prefetch(inputs.PREFETCH_BATCHES)
        return dataset.with_options(inputs.fixed_pipeline_options())

    input_fn.num_examples = count  # type: ignore[attr-defined]
    input_fn.files = files  # type: ignore[attr-defined]
    return input_fn
