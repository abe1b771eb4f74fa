"""Input pipelines: static full batches, padding to whole batches, order, per-host sharding, seeds."""

from __future__ import annotations

import numpy as np
import pytest
import synthetic
import tensorflow as tf

from estimator_lib.model import inputs, transform


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    schema = synthetic.make_schema("binary")
    pattern, _ = synthetic.write_dataset(str(tmp_path_factory.mktemp("d")), synthetic.make_rows(100, 5), schema, 4)
    return schema, pattern


def _all_static(spec):
    return all(s.shape.is_fully_defined() for s in tf.nest.flatten(spec))


def test_train_batches_are_static_full_and_tpu_typed(data):
    schema, pattern = data
    dataset = inputs.train_input_fn_builder(pattern, schema, seed=1, shuffle_buffer_size=50)({"batch_size": 16})
    features, label = dataset.element_spec
    assert _all_static(dataset.element_spec)
    assert {k: (v.shape.as_list(), v.dtype.name) for k, v in features.items()} == {
        "f_x_1": ([16], "float32"),
        "f_x_2": ([16], "float32"),
        "f_colour": ([16], "int32"),
    }
    assert (label.shape.as_list(), label.dtype.name) == ([16], "int32")


@pytest.mark.parametrize("batch, steps", [(16, 7), (100, 1), (128, 1), (1, 100)])
def test_eval_covers_every_row_once_in_padded_full_batches(data, batch, steps):
    schema, pattern = data
    input_fn = inputs.eval_input_fn_builder(pattern, schema)
    assert input_fn.num_examples == 100 and inputs.eval_steps(100, batch) == steps
    dataset = input_fn({"batch_size": batch})
    assert _all_static(dataset.element_spec)
    padding = np.concatenate([f["is_padding"].numpy() for f, _ in dataset])
    assert len(padding) == steps * batch
    assert padding.tolist() == [0.0] * 100 + [1.0] * (steps * batch - 100)


def test_predict_rows_keep_file_order_with_their_index(data):
    schema, pattern = data
    batches = list(inputs.predict_input_fn_builder(pattern, schema)({"batch_size": 32}))
    index = np.concatenate([b["example_index"].numpy() for b in batches])
    padding = np.concatenate([b["is_padding"].numpy() for b in batches])
    assert index.tolist() == list(range(128)) and padding.sum() == 28
    assert all(b["f_x_1"].shape == (32,) for b in batches)


def test_predict_on_cpu_feeds_several_whole_batches_per_element(data):
    """100 rows, batch 16: 7 padded batches; 3 per element gives 48, 48 and the last 16 rows, the same rows."""
    schema, pattern = data
    builder = inputs.predict_input_fn_builder(pattern, schema)
    grouped = list(builder({"batch_size": 16, inputs.PREDICT_BATCHES_PER_RUN: 3}))
    single = list(builder({"batch_size": 16}))
    assert [len(g["example_index"]) for g in grouped] == [48, 48, 16]
    for key in single[0]:
        together = lambda elements, key=key: np.concatenate([e[key].numpy() for e in elements])
        assert np.array_equal(together(grouped), together(single)), key
    tpu = list(builder({"batch_size": 16, inputs.PREDICT_BATCHES_PER_RUN: 3, "use_tpu": True}))
    assert all(e["example_index"].shape == (16,) for e in tpu)  # static batches on a TPU


def test_eval_fails_loudly_when_the_count_is_wrong(data):
    schema, pattern = data
    dataset = inputs.eval_input_fn_builder(pattern, schema, num_examples=120)({"batch_size": 16})
    with pytest.raises(
        tf.errors.FailedPreconditionError, match="expected to contain 120 elements but contained only 100"
    ):
        list(dataset)


class FakeTPUContext:
    """Stand-in for TPUEstimator's per-host input context (no TPU here): 2 hosts x 4 replicas."""

    num_hosts, num_replicas = 2, 8

    def __init__(self, host_id):
        self.host_id = host_id

    def current_input_fn_deployment(self):
        # (host device, invocation index, invocation count, replicas fed by this call), as with PER_HOST_V2
        return f"/job:worker/task:{self.host_id}/device:CPU:0", self.host_id, self.num_hosts, 4


def test_training_files_are_split_between_hosts(data):
    files = inputs.resolve_files(data[1])
    assert inputs.host_files(files, {"context": FakeTPUContext(0)}) == files[0::2]
    assert inputs.host_files(files, {"context": FakeTPUContext(1)}) == files[1::2]
    with pytest.raises(ValueError, match=r"1 training file\(s\) cannot be split over 2 TPU hosts"):
        inputs.host_files(files[:1], {"context": FakeTPUContext(0)})


def test_fold_seed_differs_by_epoch_and_is_stable():
    assert inputs.fold_seed(42, 0) == inputs.fold_seed(42, 0)
    assert len({inputs.fold_seed(42, s) for s in range(100)}) == 100
    assert int(inputs.fold_seed(42, tf.constant(7, tf.int64))) == inputs.fold_seed(42, 7)  # in-graph epochs


def test_the_training_stream_resumed_at_any_record_is_the_rest_of_the_same_stream(data):
    """The stream depends on the seed alone: started at record p (a resumed run) it is the uninterrupted stream
    from p on, across epoch boundaries. Each epoch holds every record once, in its own order."""
    files = inputs.resolve_files(data[1])

    def records(position, n):
        stream = inputs.training_records(files, seed=3, shuffle_buffer_size=50, position=position)
        return [r.numpy() for r in stream.take(n)]

    whole = records(0, 330)
    assert sorted(whole[:100]) == sorted(whole[100:200]) and len(set(whole[:100])) == 100
    assert whole[:100] != whole[100:200]
    for position in (1, 99, 100, 137, 250):
        assert records(position, 330 - position) == whole[position:], position
    assert int(inputs.training_records(files, 3, 50, 0).cardinality()) == tf.data.INFINITE_CARDINALITY


def test_a_train_input_fn_starts_at_the_checkpoint_step(data, tmp_path, monkeypatch):
    """Resumed at global step 3 with batches of 16 on one replica, the first batch is the fresh stream's fourth."""
    schema, pattern = data
    fresh = inputs.train_input_fn_builder(pattern, schema, seed=1, shuffle_buffer_size=50)
    steps = [f["f_x_1"].numpy() for f, _ in fresh({"batch_size": 16}).take(5)]
    monkeypatch.setattr(inputs, "start_step", lambda model_dir: 3)
    resumed = inputs.train_input_fn_builder(pattern, schema, seed=1, shuffle_buffer_size=50, model_dir="m")
    assert [f["f_x_1"].numpy().tolist() for f, _ in resumed({"batch_size": 16}).take(2)] == [
        s.tolist() for s in steps[3:5]
    ]


def test_missing_files_are_named(tmp_path):
    with pytest.raises(FileNotFoundError, match=r"no TFRecord file matches '.*nothing-\*.tfrecord'"):
        inputs.resolve_files(str(tmp_path / "nothing-*.tfrecord"))


# -- several TPU hosts: each host's input_fn call with its own current_input_fn_deployment() -------------------------
HOSTS, REPLICAS_PER_HOST = 2, 4


def host_datasets(builder, per_replica_batch):
    """Each simulated host's dataset, grouped per step: REPLICAS_PER_HOST per-replica batches at a time."""
    params = [{"batch_size": per_replica_batch, "context": FakeTPUContext(h)} for h in range(HOSTS)]
    return [builder(p).batch(REPLICAS_PER_HOST, drop_remainder=True) for p in params]


def merged(builder, per_replica_batch):
    """What the TPU computation sees at each step: the replicas' batches in replica order (host 0's four,
    then host 1's), concatenated as TPUEstimator concatenates the replicas' outputs."""

    def concat(*host_groups):
        flat = [tf.nest.map_structure(lambda x: tf.reshape(x, [-1, *x.shape[2:]]), g) for g in host_groups]
        return tf.nest.map_structure(lambda *xs: tf.concat(xs, axis=0), *flat)

    return tf.data.Dataset.zip(tuple(host_datasets(builder, per_replica_batch))).map(concat)


def test_each_host_reads_its_own_share_and_the_merged_steps_cover_every_row_in_order(data):
    schema, pattern = data
    builder = inputs.predict_input_fn_builder(pattern, schema)
    per_host = [list(d) for d in host_datasets(builder, 4)]  # global batch 2 x 4 x 4 = 32: 4 steps for 100 rows
    assert [len(steps) for steps in per_host] == [4, 4]
    first_step = [s[0]["example_index"].numpy()[:, 0].tolist() for s in per_host]
    assert first_step == [[0, 4, 8, 12], [16, 20, 24, 28]]  # host 1 feeds replicas 4-7: rows 16-31
    steps = list(merged(builder, 4))
    index = np.concatenate([s["example_index"].numpy() for s in steps])
    padding = np.concatenate([s["is_padding"].numpy() for s in steps])
    assert index.tolist() == list(range(128)) and padding.tolist() == [0.0] * 100 + [1.0] * 28
    single = list(builder({"batch_size": 32}))
    for a, b in zip(steps, single):
        assert a.keys() == b.keys() and all(np.array_equal(a[k].numpy(), b[k].numpy()) for k in a)


def test_multi_host_cardinality_is_known_for_the_fixed_eval_steps(data):
    schema, pattern = data
    dataset = inputs.eval_input_fn_builder(pattern, schema)({"batch_size": 4, "context": FakeTPUContext(1)})
    assert int(dataset.cardinality()) == 4 * REPLICAS_PER_HOST  # 4 steps x this host's 4 replicas


def test_two_host_eval_and_predict_equal_a_single_host_run(data, tmp_path):
    from estimator_lib import estimator
    from estimator_lib.config import JobConfig, TPUSettings, TrainingConfig
    from estimator_lib.model.outputs import real_rows

    schema, pattern = data
    job = JobConfig(
        tpu=TPUSettings(iterations_per_loop=10),
        training=TrainingConfig(
            train_batch_size=16, eval_batch_size=32, predict_batch_size=32, train_steps=20, save_checkpoints_steps=10
        ),
    )
    model_dir = str(tmp_path / "model")
    estimator.train(job, schema, pattern, model_dir)
    single = estimator.evaluate(job, schema, pattern, model_dir)
    est = estimator.build_estimator(job, schema, model_dir, eval_rows_per_step=single.num_examples / single.steps)
    eval_builder = inputs.eval_input_fn_builder(pattern, schema)
    two_hosts = est.evaluate(lambda params: merged(eval_builder, 4), steps=single.steps)
    assert single.steps == 4
    for name, value in single.metrics.items():
        assert two_hosts[name] == pytest.approx(value, abs=1e-6), name

    predict_builder = inputs.predict_input_fn_builder(pattern, schema)
    keys = ["class_ids", "probabilities", "example_index", "is_padding"]

    def rows(input_fn):
        batches = est.predict(input_fn, predict_keys=keys, yield_single_examples=False)
        return np.concatenate([b["probabilities"] for b in real_rows(batches, 100)])

    assert np.array_equal(rows(lambda params: merged(predict_builder, 4)), rows(predict_builder))


@pytest.mark.parametrize("position", [0, 37, 230])
def test_cached_batches_are_the_parsed_training_stream(data, position):
    """Parsed once and gathered by position, the batches equal parsing the record stream, resumed or not."""
    schema, pattern = data
    files = inputs.resolve_files(pattern)
    counts = [inputs.count_records(f) for f in files]
    parsed = inputs.training_records(files, 3, 50, position).batch(16).map(lambda s: transform.parse_batch(s, schema))
    cached = inputs.cached_training_batches(
        files, counts, lambda s: transform.parse_batch(s, schema), 3, 50, position, 16
    )
    for (f1, l1), (f2, l2) in zip(parsed.take(15), cached.take(15)):  # 240 rows: past two epoch boundaries
        assert l1.numpy().tolist() == l2.numpy().tolist()
        for key in f1:
            assert f1[key].numpy().tobytes() == f2[key].numpy().tobytes(), key


def test_the_train_input_fn_caches_when_the_count_is_given_and_feeds_k_steps_per_element(data):
    """With STEPS_PER_RUN = 4 an element holds the next 4 batches ([4, 16]), the same rows as 4 elements."""
    schema, pattern = data
    plain = inputs.train_input_fn_builder(pattern, schema, seed=1, shuffle_buffer_size=50)({"batch_size": 16})
    cached = inputs.train_input_fn_builder(pattern, schema, seed=1, shuffle_buffer_size=50, num_examples=100)
    grouped = cached({"batch_size": 16, inputs.STEPS_PER_RUN: 4})
    features, label = grouped.element_spec
    assert features["f_x_1"].shape.as_list() == [4, 16] and label.shape.as_list() == [4, 16]
    singles = [f["f_colour"].numpy().tolist() for f, _ in plain.take(8)]
    groups = [f["f_colour"].numpy().tolist() for f, _ in grouped.take(2)]
    assert groups[0] + groups[1] == singles


def test_steps_per_run_divides_iterations_per_loop_and_caps_the_element_size(data):
    schema, _ = data
    row = inputs.row_bytes(schema)
    assert inputs.steps_per_run(100, 64, schema) == 100
    assert inputs.steps_per_run(100, inputs.STEPS_PER_RUN_BYTES // (30 * row), schema) == 25
    assert inputs.steps_per_run(7, inputs.STEPS_PER_RUN_BYTES // row, schema) == 1
