"""`input_fn` builders for TFRecord files of `tf.train.Example` (the format `prepare` writes).

These run on the TPU host's CPU. They honour the TPUEstimator contracts:
  * `params['batch_size']` is the batch for this `input_fn` call: the per-replica batch with PER_HOST_V2 on a
    TPU, the global batch on CPU. It is never computed here.
  * Every batch has a static, full batch dimension (`drop_remainder=True`): XLA compiles one fixed shape.
  * Training reads one endless stream that is a pure function of the seed: epoch e is the files and records
    shuffled with a seed folded from (seed, e). A `train()` call that starts at global step s (a resumed run,
    or the next round of training) skips the s steps' records already fed, so every step gets the same batch
    whether or not training was interrupted, and successive calls continue the stream, never replay it.
  * Evaluation and prediction are finite and padded with empty Examples to whole batches: every row carries
    `is_padding` (0.0 real, 1.0 padding), metrics weight padding to zero, prediction drops it on the host.
    Evaluation runs exactly `eval_steps(...)` steps, so a TPU never waits for input that will not come.
  * Training and evaluation check their files' first records against the schema before an estimator reads them
    (`check_records`): parsing would silently fill in what a record of another schema lacks.
  * Strings and int64 never reach the model: see `estimator_lib.model.transform`.
"""

from __future__ import annotations

import math
import os
from typing import Any, Callable, Dict, List, Mapping, Optional, Protocol, Sequence, Tuple, Union

import tensorflow as tf

from estimator_lib.data import example_keys, records
from estimator_lib.data.common import DataError
from estimator_lib.model import record_check, transform
from estimator_lib.schema import (
    CODES_FEATURE,
    INDEX_FEATURE,
    KEY_FEATURE,
    PADDING_FEATURE,
    Schema,
)

InputFn = Callable[[Dict], tf.data.Dataset]


class Bins(Protocol):
    """What the predict input computes the skew check's columns with (`predict.tally.Bins`)."""

    def spec(self) -> Dict[str, Any]: ...

    def columns(self, parsed: Mapping[str, tf.Tensor], rows: tf.Tensor) -> tf.Tensor: ...


Patterns = Union[str, Sequence[str]]
_AUTOTUNE = tf.data.AUTOTUNE
_INTERLEAVE_CYCLE = 4
_COUNT_BATCH = 8192
# Eval and predict pipelines use fixed parallelism and a fixed prefetch depth: tf.data's autotuning costs as
# much CPU per record as the read itself, and these pipelines work on whole batches after the read.
PARSE_PARALLELISM = max(2, min(os.cpu_count() or 2, 8))
PREFETCH_BATCHES = 4
# Training data whose parsed rows fit in this many bytes is parsed once per train() call and kept in memory.
CACHE_BYTES = 1 << 30
# The cap on the bytes of one element of k batches (k training steps per CPU session.run).
STEPS_PER_RUN_BYTES = 64 << 20
STEPS_PER_RUN = "steps_per_run"  # the params key that asks for k steps (see model_fn.train_loop)
# Prediction on CPU feeds up to this many rows per element (whole predict batches, parsed at once) and the
# model predicts them batch by batch in one `session.run` (see model_fn.predict_loop) ...
PREDICT_ROWS_PER_RUN = 8192
# ... for inputs of at least this many rows: the loop adds graph building and session start-up, which only
# large inputs repay (benchmarks/RESULTS.md has the measurement).
PREDICT_LOOP_MIN_ROWS = 131072
PREDICT_BATCHES_PER_RUN = "predict_batches_per_run"  # the params key that asks for k batches per run


def fixed_pipeline_options() -> tf.data.Options:
    """Options for the batch-at-a-time eval/predict pipelines: no autotuning (see above)."""
    options = tf.data.Options()
    options.autotune.enabled = False
    return options


def resolve_files(patterns: Patterns) -> List[str]:
    """Expands file patterns (local or gs://) to a sorted, de-duplicated list; errors when nothing matches."""
    patterns = [patterns] if isinstance(patterns, str) else list(patterns)
    files: List[str] = []
    for pattern in patterns:
        matched = tf.io.gfile.glob(pattern)
        if not matched:
            raise FileNotFoundError(f"no TFRecord file matches {pattern!r}")
        files.extend(matched)
    return sorted(set(files))


# -- the files against the schema ----------------------------------------------------------------------------
# Records read, at most, before a schema feature that no record holds is called absent: prepared records leave a
# feature out where its value is missing, so one record that lacks it proves nothing.
SCHEMA_SAMPLE_RECORDS = 1000


def _check_lacked(files: Sequence[str], lacked: Dict[str, str], contract: record_check.Contract) -> None:
    """Raises for a feature that no record of a sample holds (`lacked`: key -> the first file whose first record
    lacks it), when its schema says the training split had it in every row."""
    seen: set = set()
    read = 0
    with records.named_data_loss(files):
        for serialized in tf.data.TFRecordDataset(list(files)).take(SCHEMA_SAMPLE_RECORDS).as_numpy_iterator():
            seen.update(tf.train.Example.FromString(serialized).features.feature)
            read += 1
    for e in [e for e in contract.expectations if e.key in lacked and e.key not in seen]:  # the schema's first
        found = (
            f"{record_check.NO_SUCH_FEATURE}, nor in any of the first {read:,} records of the {len(files)} file(s), "
            "though the schema's training split had a value in every row"
        )
        raise DataError(
            record_check.Mismatch(lacked[e.key], 0, e.key, e.expected, found, e.what, contract.hint).message()
        )


def check_records(files: Sequence[str], schema: Schema) -> None:
    """Refuses labelled TFRecord files (training, validation, evaluation) that were not prepared with `schema`,
    before an estimator reads them: parsing fills a feature a record lacks with its default (the training mean,
    the out-of-vocabulary id) without a word, and a model trained on such records learns nothing.

    Reads the first record of every file (`record_check.schema_contract`). A feature or the label holding another
    type, or more or fewer values than one, a missing label, or a missing feature beside keys the schema does not
    know, is an error. A feature the first records merely lack may be missing values (prepared records leave those
    out): up to `SCHEMA_SAMPLE_RECORDS` records are read, and a feature none of them holds is an error when the
    schema records no missing value of it in the training split (`FeatureSpec.missing_count` 0).

    Raises:
      DataError: naming the file, the record, the feature, what was expected and what was found.
    """
    contract = record_check.schema_contract(schema)
    lacked: Dict[str, str] = {}
    found = record_check.first_mismatch(files, contract, per_file=1, lacked=lacked)
    if found is not None:
        raise DataError(found.message())
    always_held = {f.key for f in schema.features if f.missing_count == 0}
    lacked = {key: path for key, path in lacked.items() if key in always_held}
    if lacked:
        _check_lacked(files, lacked, contract)


def _record_count(files: Sequence[str], compression: str = "") -> tf.Tensor:
    """int64 scalar: the records in TFRecord files (one pass, a batch at a time); eager or in a graph."""
    dataset = tf.data.TFRecordDataset(list(files), compression_type=compression).batch(_COUNT_BATCH)
    dataset = dataset.with_options(fixed_pipeline_options())
    return dataset.reduce(tf.constant(0, tf.int64), lambda n, b: n + tf.cast(tf.shape(b)[0], tf.int64))


def count_records(patterns: Patterns, compression: str = "") -> int:
    """Counts the records in TFRecord files: from their framing for uncompressed files (`records.file_records`),
    else one `tf.data` pass over the data, a batch at a time; `compression` is "GZIP" for gzip-compressed files.

    Raises:
      DataError: an uncompressed file whose records run past its end, named.
    """
    files = resolve_files(patterns)
    if compression:
        return int(_record_count(files, compression).numpy())
    return sum(records.file_records(path) for path in files)


def eval_steps(num_examples: int, global_batch_size: int) -> int:
    """Evaluation steps that cover `num_examples` rows in whole global batches (the last one padded)."""
    return math.ceil(num_examples / global_batch_size)


def fold_seed(seed: int, epoch):
    """Mixes an epoch number (a Python int or an int64 tensor) into the base seed: the same (seed, epoch)
    always gives the same order, and each epoch gets its own."""
    return (seed * 1_000_003 + epoch * 7_919) % (2**31 - 1)


def start_step(model_dir: Optional[str]) -> int:
    """The global step of the newest checkpoint in `model_dir` (0 when there is none)."""
    checkpoint = tf.train.latest_checkpoint(model_dir) if model_dir else None
    if checkpoint is None:
        return 0
    return int(tf.train.load_variable(checkpoint, "global_step"))


def deployment(params: Dict) -> Tuple[int, int, int]:
    """(invocation index, invocation count, replicas fed by this call) of this input_fn call.

    On a TPU, `params['context'].current_input_fn_deployment()` tells it: with PER_HOST_V2 there is one call
    per host, each feeding that host's replicas. Without a context (CPU) there is one call feeding one replica.
    """
    context = params.get("context")
    if context is None:
        return 0, 1, 1
    _, index, count, replicas = context.current_input_fn_deployment()
    return index, count, replicas


def host_files(files: List[str], params: Dict) -> List[str]:
    """This call's share of the files on a multi-host TPU slice (all files on one host or on CPU)."""
    index, count, _ = deployment(params)
    if count == 1:
        return files
    if len(files) < count:
        raise ValueError(
            f"{len(files)} training file(s) cannot be split over {count} TPU hosts; "
            f"write at least {count} shards (prepare's num_shards)"
        )
    return files[index::count]


def _epoch_order(
    items: tf.data.Dataset, count: int, epoch_seed, interleave: Callable, parallel_calls: Optional[int]
) -> tf.data.Dataset:
    """`count` items (files, or file numbers) in an order seeded by `epoch_seed`, their records interleaved
    deterministically. The order depends only on the seed and the items' record counts, not on their contents
    or on `parallel_calls` (files are read in parallel; positions are cheaper to interleave in one thread)."""
    dataset = items.shuffle(count, seed=epoch_seed)
    parallel = {"num_parallel_calls": parallel_calls, "deterministic": True} if parallel_calls else {}
    return dataset.interleave(interleave, cycle_length=min(count, _INTERLEAVE_CYCLE), **parallel)


def _epoch_records(
    files: List[str], seed: int, shuffle_buffer_size: int, epoch: tf.Tensor, compression: str = ""
) -> tf.data.Dataset:
    """One pass over `files` (serialized records): files in an order seeded by (seed, epoch), interleaved
    deterministically, records shuffled with a buffer seeded the same way."""
    epoch_seed = fold_seed(seed, epoch)
    files_dataset = tf.data.Dataset.from_tensor_slices(files)
    read = lambda f: tf.data.TFRecordDataset(f, compression_type=compression)  # noqa: E731
    dataset = _epoch_order(files_dataset, len(files), epoch_seed, read, _AUTOTUNE)
    return dataset.shuffle(shuffle_buffer_size, seed=epoch_seed + 1)


def _epoch_indices(counts: Sequence[int], seed: int, shuffle_buffer_size: int, epoch: tf.Tensor) -> tf.data.Dataset:
    """`_epoch_records` of files holding `counts` records, as int64 positions in the files' concatenation: the
    same permutation (shuffling and deterministic interleaving depend only on seeds and lengths)."""
    epoch_seed = fold_seed(seed, epoch)
    starts = tf.constant([sum(counts[:i]) for i in range(len(counts))], tf.int64)
    lengths = tf.constant(list(counts), tf.int64)
    ranges = lambda i: tf.data.Dataset.range(starts[i], starts[i] + lengths[i])
    dataset = _epoch_order(tf.data.Dataset.range(len(counts)), len(counts), epoch_seed, ranges, None)
    return dataset.shuffle(shuffle_buffer_size, seed=epoch_seed + 1)


def _endless(epoch_fn: Callable[[tf.Tensor], tf.data.Dataset], per_epoch, position: int) -> tf.data.Dataset:
    """Epoch 0, epoch 1, ... of `epoch_fn`, from element number `position` on (whole epochs stepped over)."""
    first_epoch, offset = 0, 0
    if position:
        first_epoch, offset = position // per_epoch, position % per_epoch
    epochs = tf.data.experimental.Counter(start=first_epoch)
    stream = epochs.flat_map(epoch_fn)
    return stream.skip(offset).apply(tf.data.experimental.assert_cardinality(tf.data.INFINITE_CARDINALITY))


def training_records(
    files: List[str], seed: int, shuffle_buffer_size: int, position: int, compression: str = ""
) -> tf.data.Dataset:
    """The endless training stream of serialized records, from record number `position` on.

    The stream is epoch 0, epoch 1, ... (`_epoch_records`), so it depends on nothing but (files, seed, buffer
    size): a run resumed at `position` sees exactly the records an uninterrupted run sees from there. Skipping
    costs at most one epoch's reading (whole epochs are stepped over by number); the records per epoch are
    counted only when `position` > 0.
    """
    per_epoch = _record_count(files, compression) if position else 1  # in the input_fn's graph, when it starts
    epoch_fn = lambda epoch: _epoch_records(files, seed, shuffle_buffer_size, epoch, compression)  # noqa: E731
    return _endless(epoch_fn, per_epoch, position)


def cached_training_batches(
    files: List[str],
    counts: Sequence[int],
    parse: Callable[[tf.Tensor], Any],
    seed: int,
    shuffle_buffer_size: int,
    position: int,
    size: int,
    compression: str = "",
) -> tf.data.Dataset:
    """`training_records` from `position` on, parsed, in batches of `size`, with the files read and parsed once.

    The files are parsed whole into memory (one element, cached), and the stream is the same permutation drawn
    over record positions (`_epoch_indices`), gathered from the parsed columns: the same batches as parsing
    `training_records`, with no reading or parsing per step and a resume that skips positions, not records.
    """
    total = sum(counts)
    table = tf.data.TFRecordDataset(files, compression_type=compression).batch(total).map(parse)
    table = table.cache().repeat()
    positions = _endless(lambda epoch: _epoch_indices(counts, seed, shuffle_buffer_size, epoch), total, position)
    batches = positions.batch(size, drop_remainder=True).with_options(fixed_pipeline_options())
    gather = lambda index, data: tf.nest.map_structure(lambda t: tf.gather(t, index), data)
    return tf.data.Dataset.zip((batches, table)).map(gather)


def row_bytes(schema: Schema) -> int:
    """Bytes of one parsed training row: every model feature and the label are 4-byte scalars."""
    return 4 * (len(schema.features) + 1)


def steps_per_run(iterations_per_loop: int, batch_size: int, schema: Schema) -> int:
    """Training steps per `session.run` on CPU: `iterations_per_loop`, as on a TPU, or its largest divisor
    whose batches (fed as one element) stay under `STEPS_PER_RUN_BYTES`, so checkpoints still fall on
    multiples of `iterations_per_loop`."""
    fits = lambda k: k * batch_size * row_bytes(schema) <= STEPS_PER_RUN_BYTES
    return max(k for k in range(1, iterations_per_loop + 1) if iterations_per_loop % k == 0 and (k == 1 or fits(k)))


def _file_counts(files: List[str], num_examples: Optional[int], schema: Schema) -> Optional[Dict[str, int]]:
    """Records per file when the parsed training data fits in `CACHE_BYTES` (None otherwise, or when unknown)."""
    if num_examples is None or num_examples * row_bytes(schema) > CACHE_BYTES:
        return None
    return {f: records.file_records(f) for f in files}


def _split_steps(features: Dict[str, tf.Tensor], label: tf.Tensor, steps: int, batch_size: int):
    """[steps * batch] tensors as [steps, batch]: step i's batch is rows i*batch .. (i+1)*batch - 1."""
    split = lambda t: tf.reshape(t, [steps, batch_size])
    return {k: split(v) for k, v in features.items()}, split(label)


def train_input_fn_builder(
    patterns: Patterns,
    schema: Schema,
    seed: int,
    shuffle_buffer_size: int,
    model_dir: Optional[str] = None,
    num_examples: Optional[int] = None,
) -> InputFn:
    """Builds the training input_fn: interleaved files, seeded shuffle per epoch, endless, full static batches.

    Each call starts where the checkpoint in `model_dir` left off: global step s has consumed s batches of
    every replica this call feeds, so s x replicas x batch records of this host's stream are skipped. A run
    killed and resumed from its checkpoint therefore trains on the same batches, step for step, as one that was
    not interrupted (bitwise equal variables on CPU, with `training.deterministic`).

    When `num_examples` is given and the parsed rows fit in `CACHE_BYTES`, the files are read and parsed once
    per call and kept in memory (`cached_training_batches`: the same batches). With `params[STEPS_PER_RUN]`
    = k > 1 (CPU only: the model_fn then runs k steps per `session.run`), each element holds k consecutive
    batches.

    Args:
      patterns: TFRecord file patterns of the training split.
      schema: the feature schema.
      seed: the stream's seed (`training_records`).
      shuffle_buffer_size: records in the shuffle buffer.
      model_dir: the estimator's model directory (to read the step a resumed run starts from).
      num_examples: records in the files, when known (prepare's manifest).

    Returns:
      input_fn(params) -> Dataset of (features, label): features {key: float32/int32 [batch]}, label [batch]
      ([k, batch] each with k steps per run).

    Raises:
      DataError: the files' records were not prepared with `schema` (`check_records`).
    """
    files = resolve_files(patterns)
    check_records(files, schema)
    counts = _file_counts(files, num_examples, schema)

    # AutoGraph would rewrite every function given to tf.data below (the parse, the per-epoch order, the gather)
    # from its source, about 0.4 s per train() call; none branches or loops on a tensor, so the graph is the same.
    @tf.autograph.experimental.do_not_convert
    def build(params: Dict) -> tf.data.Dataset:
        batch_size = params["batch_size"]
        steps = params.get(STEPS_PER_RUN, 1) if params.get("context") is None else 1
        own_files = host_files(files, params)
        _, _, replicas = deployment(params)
        position = start_step(model_dir) * replicas * batch_size
        size = steps * batch_size
        if counts is None:
            dataset = training_records(own_files, seed, shuffle_buffer_size, position)
            dataset = dataset.batch(size, drop_remainder=True)
            dataset = dataset.map(lambda s: transform.parse_batch(s, schema), num_parallel_calls=_AUTOTUNE)
        else:
            host_counts = [counts[f] for f in own_files]
            parse = lambda s: transform.parse_batch(s, schema)  # noqa: E731
            dataset = cached_training_batches(own_files, host_counts, parse, seed, shuffle_buffer_size, position, size)
        if steps > 1:
            dataset = dataset.map(lambda f, label: _split_steps(f, label, steps, batch_size))
        return dataset.prefetch(_AUTOTUNE)

    def input_fn(params: Dict) -> tf.data.Dataset:  # TPUEstimator reads `params` from this signature
        return build(params)

    return input_fn


def predict_batches_per_run(batch_size: int, num_examples: int) -> int:
    """Predict batches per `session.run` on CPU: as many whole batches as fit in `PREDICT_ROWS_PER_RUN` rows,
    for an input of at least `PREDICT_LOOP_MIN_ROWS` rows (one batch per run below)."""
    if num_examples < PREDICT_LOOP_MIN_ROWS:
        return 1
    return max(1, PREDICT_ROWS_PER_RUN // batch_size)


def padded_batches(
    files: List[str],
    num_examples: int,
    batch_size: int,
    steps: int,
    params: Dict,
    group: int = 1,
    padding_record: bytes = b"",
    compression: str = "",
) -> tf.data.Dataset:
    """(batch index, serialized [batch_size]) pairs of this input_fn call's replicas, for `steps` steps.

    With `group` k > 1 (CPU only: one replica, no static shape needed) an element holds k consecutive
    batches, [k * batch_size], numbered by group; the last element holds the batches left (a multiple of
    batch_size rows).

    The whole input is one stream: the `num_examples` real records in file order, then empty Examples up to
    `steps` global batches, cut into per-replica batches numbered 0, 1, ... Step s feeds global replica k the
    batch s * replicas + k. On a slice of several hosts (PER_HOST_V2: one call per host, feeding that host's
    replicas in order), each host keeps the groups of batches of its own replicas (replica k is on host
    k // replicas_per_host, as TPUEstimator places them without model parallelism), and TPUEstimator
    concatenates the replicas' outputs in replica order: metrics cover every row once, predictions come back
    in input order (and `outputs.real_rows` checks it). Every host reads the records; only its own share is
    parsed. Fails at run time if the files do not hold exactly `num_examples` records.

    Padding is added to the record stream and everything after the read works on whole batches (per-record
    maps cost more than the model here). A padding record is `padding_record` (an empty Example by default,
    which the prepared data's parse spec fills with defaults; a user's strict spec needs one that matches it).
    `compression` is "GZIP" for gzip-compressed files."""
    host, hosts, replicas_per_host = deployment(params)
    batches = steps * replicas_per_host * hosts
    real = tf.data.TFRecordDataset(files, compression_type=compression)
    real = real.apply(tf.data.experimental.assert_cardinality(num_examples))
    padding = tf.data.Dataset.from_tensors(tf.constant(padding_record)).repeat(batches * batch_size - num_examples)
    if group > 1:
        return real.concatenate(padding).batch(batch_size * group).enumerate()
    numbered = real.concatenate(padding).batch(batch_size, drop_remainder=True).enumerate()
    if hosts == 1:
        return numbered
    own = numbered.batch(replicas_per_host, drop_remainder=True).shard(hosts, host).unbatch()
    return own.apply(tf.data.experimental.assert_cardinality(steps * replicas_per_host))


def _padded_input_fn(
    files: List[str], schema: Schema, num_examples: Optional[int], with_label: bool, bins: Optional[Bins] = None
) -> InputFn:
    count = count_records(files) if num_examples is None else num_examples
    spec = transform.parse_spec(schema, with_label=with_label, label_default=True)
    if bins is not None:  # its numerics parse missing as NaN, then take the schema's default
        spec.update(bins.spec())

    def input_fn(params: Dict) -> tf.data.Dataset:
        batch_size = params["batch_size"]
        _, hosts, replicas_per_host = deployment(params)
        steps = eval_steps(count, batch_size * replicas_per_host * hosts)
        group = 1 if with_label or params.get("use_tpu") else params.get(PREDICT_BATCHES_PER_RUN, 1)

        @tf.autograph.experimental.do_not_convert  # plain TF calls: converting them only costs start-up
        def parse(batch_index, serialized):
            rows = batch_size if group == 1 else tf.shape(serialized)[0]  # static on a TPU
            index = tf.cast(batch_index, tf.int32) * batch_size * group + tf.range(rows, dtype=tf.int32)
            parsed = tf.io.parse_example(serialized, spec)
            codes = None
            if bins is not None:
                codes, parsed = bins.columns(parsed, rows), transform.impute_numerics(parsed, schema)
            features = transform.to_model_features(parsed, schema)
            features[PADDING_FEATURE] = tf.cast(index >= count, tf.float32)
            if not with_label:
                features[INDEX_FEATURE] = index
                features[example_keys.KEY_BYTES_FEATURE] = example_keys.encode(parsed[KEY_FEATURE])
                if codes is not None:
                    features[CODES_FEATURE] = codes
                return features
            return features, transform.to_model_label(parsed, schema)

        dataset = padded_batches(files, count, batch_size, steps, params, group)
        dataset = dataset.map(parse, num_parallel_calls=PARSE_PARALLELISM).prefetch(PREFETCH_BATCHES)
        return dataset.with_options(fixed_pipeline_options())

    input_fn.num_examples = count  # type: ignore[attr-defined]
    return input_fn


def eval_input_fn_builder(patterns: Patterns, schema: Schema, num_examples: Optional[int] = None) -> InputFn:
    """Builds the evaluation input_fn: every record once, padded to `eval_steps(...)` whole global batches.

    Args:
      patterns: TFRecord file patterns of the evaluation split.
      schema: the feature schema.
      num_examples: records in the files, when known (prepare's manifest); counted otherwise.

    Returns:
      input_fn(params) -> Dataset of (features, label), features including `is_padding` float32 [batch].
      `input_fn.num_examples` holds the real record count.

    Raises:
      DataError: the files' records were not prepared with `schema` (`check_records`).
    """
    files = resolve_files(patterns)
    check_records(files, schema)
    return _padded_input_fn(files, schema, num_examples, with_label=True)


def predict_input_fn_builder(
    patterns: Patterns, schema: Schema, num_examples: Optional[int] = None, bins: Optional[Bins] = None
) -> InputFn:
    """Builds the prediction input_fn: every record once, in file order, padded to whole batches.

    Returns:
      input_fn(params) -> Dataset of features, including `is_padding` float32 [batch], `example_index`
      int32 [batch] (the row's position in the input, so the host can check order) and `example_key_bytes`
      int32 [batch, example_keys.WIDTH] (the row's key, packed by `example_keys.encode`); with `bins`, the skew
      check's `skew_codes` float32 [batch, features] too (`predict.tally`: counted from the predictions, so the check
      reads and parses no row of its own).

    The files are not checked against the schema here: batch prediction checks TFRecords from elsewhere where
    it takes them (`predict.sources`), and a prepared split is checked when the model trains on its dataset.
    """
    return _padded_input_fn(resolve_files(patterns), schema, num_examples, with_label=False, bins=bins)
