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
- A user's own training input_fn (`--input-fn`, `user_input_fn`): called as TPUEstimator calls it, with what
  it yields checked against what the spec gives the model in evaluation and prediction (`check_user_input`), so
  a model trained on it is evaluated on the same tensors.

Every tensor has a static shape: [B, *shape] per feature, the label [B, *shape].
"""

from __future__ import annotations

from typing import Any, Callable, Dict, List, Mapping, Optional, Tuple, Union

import numpy as np
import tensorflow as tf
from tensorflow.python.util import function_utils

from estimator_lib.config.feature_spec import SLICE_FEATURE, Feature, FeatureSpec
from estimator_lib.model import inputs
from estimator_lib.model.inputs import InputFn, Patterns
from estimator_lib.model.user import records
from estimator_lib.model.user.model_fn import UserCodeError
from estimator_lib.schema import INDEX_FEATURE, PADDING_FEATURE

Structure = Union[Dict[str, Any], Any]  # a dict of specs, or one spec


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
            features = parsed[0] if isinstance(parsed, tuple) else parsed
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


# -- a user's own training input_fn ---------------------------------------------------------------------------
def user_input_fn(function: Callable, reference: str, spec: FeatureSpec, params: Mapping[str, Any]) -> InputFn:
    """The user's training input_fn (`reference` names it) as TPUEstimator calls it: `params` are TPUEstimator's
    (`batch_size` per shard on a TPU, global on CPU; `context` on a TPU) over `params` given here (the
    hyperparameters, `train_steps`, `train_files`: strict mode's calls pass only TPUEstimator's); `config`, `mode`
    and `input_context` only if its signature names them. Every Dataset it returns is checked against the spec
    (`check_user_input`) before it is used.

    Raises:
      UserCodeError: the function takes no `params` (TPUEstimator refuses it too).
    """
    takes = function_utils.fn_args(function)
    if "params" not in takes:
        raise UserCodeError(
            f"--input-fn {reference}: the function must take a `params` argument (TPUEstimator passes the per-shard "
            "batch size as params['batch_size']): def input_fn(params)"
        )
    given = dict(params)

    def input_fn(params, config=None, mode=None, input_context=None):  # TPUEstimator reads this signature
        named = {"config": config, "mode": mode, "input_context": input_context}
        dataset = function(params={**given, **params}, **{k: v for k, v in named.items() if k in takes})
        check_user_input(dataset, spec, reference)
        return dataset

    input_fn.reference = reference  # type: ignore[attr-defined]
    return input_fn


def model_input(spec: FeatureSpec) -> Tuple[Structure, Optional[tf.TensorSpec]]:
    """(features, labels) as `tf.TensorSpec`s of what the model_fn gets from the spec's input: a dict by feature
    name, or one tensor (`single_input`); labels None when the label stays in the features or there is none."""
    features: Structure = {f.name: _tensor_spec(f) for f in spec.model_features}
    if spec.single_input is not None:
        features = features[spec.single_input]
    labels = None if spec.label is None or spec.label_in_features else _tensor_spec(spec.feature(spec.label))
    return features, labels


def _tensor_spec(feature: Feature) -> tf.TensorSpec:
    dtype = tf.string if feature.tensor_dtype == "bytes" else tf.as_dtype(feature.tensor_dtype)
    return tf.TensorSpec([None, *feature.shape], dtype, name=feature.name)


def check_user_input(dataset: Any, spec: FeatureSpec, reference: str) -> None:
    """Checks that `dataset` (what the user's input_fn returned) yields what the spec's eval and predict input
    gives the model_fn: the same structure (a dict of the same names, or one tensor; labels or none), and each
    tensor's dtype and per-row shape (its dimensions after the batch's).

    Raises:
      UserCodeError: naming the first feature or label that differs, both versions, and the fix.
    """
    where = f"--input-fn {reference}"
    if not isinstance(dataset, tf.data.Dataset):
        raise UserCodeError(
            f"{where} returned {type(dataset).__name__}, not a tf.data.Dataset: return the Dataset of batches "
            "(its element_spec is checked against the feature spec before training)"
        )
    element = dataset.element_spec
    features, labels = element if isinstance(element, tuple) and len(element) == 2 else (element, None)
    expected_features, expected_labels = model_input(spec)
    found = _difference("the features", features, expected_features) or _label_difference(labels, expected_labels, spec)
    if found:
        raise UserCodeError(
            f"{where}: {found}. Evaluation and prediction build the model's input from {spec.source} (every record "
            "once, in order), so a model trained on your input_fn must get the same tensors there: make the "
            "input_fn yield them, or change the feature spec"
        )


def _describe(value: Any) -> str:
    if isinstance(value, tf.TensorSpec):
        if value.shape.rank is None:
            return f"{value.dtype.name} of unknown shape"
        return f"{value.dtype.name} [batch{''.join(f', {d}' for d in value.shape.as_list()[1:])}]"
    if isinstance(value, dict):
        return f"a dict of {sorted(value)}"
    return type(value).__name__


def _difference(what: str, given: Any, expected: Structure) -> Optional[str]:
    """The first way `given` (an element_spec part) differs from `expected`, or None."""
    if isinstance(expected, dict):
        if not isinstance(given, dict) or set(given) != set(expected):
            return f"{what}: {_describe(given)}, the spec gives {_describe(expected)}"
        found = (_difference(f"feature {name!r}", given[name], expected[name]) for name in sorted(expected))
        return next((f for f in found if f), None)
    same = (
        isinstance(given, tf.TensorSpec)
        and given.dtype == expected.dtype
        and given.shape.rank == expected.shape.rank
        and given.shape.as_list()[1:] == expected.shape.as_list()[1:]
    )
    return None if same else f"{what}: {_describe(given)}, the spec gives {_describe(expected)}"


def _label_difference(given: Any, expected: Optional[tf.TensorSpec], spec: FeatureSpec) -> Optional[str]:
    if expected is None and given is not None:
        why = "label_in_features keeps it in the features" if spec.label_in_features else "the spec names no label"
        return f"it yields labels ({_describe(given)}), but {why}: yield only the features"
    if expected is not None and given is None:
        return (
            f"it yields no labels, but the spec's label {spec.label!r} reaches the model_fn as `labels`: yield "
            f"(features, labels), or set label_in_features in the spec"
        )
    return None if expected is None else _difference(f"the label {spec.label!r}", given, expected)
