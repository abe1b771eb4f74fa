"""Input pipelines: static full batches, padding to whole batches, order, per-host sharding, seeds."""

from __future__ import annotations

import numpy as np
import pytest
import synthetic
import tensorflow as tf

from estimator_lib.model import inputs


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
    assert inputs._host_files(files, {"context": FakeTPUContext(0)}) == files[0::2]
    assert inputs._host_files(files, {"context": FakeTPUContext(1)}) == files[1::2]
    with pytest.raises(ValueError, match=r"1 training file\(s\) cannot be split over 2 TPU hosts"):
        inputs._host_files(files[:1], {"context": FakeTPUContext(0)})


def test_fold_seed_differs_by_step_and_is_stable():
    assert inputs.fold_seed(42, 0) == inputs.fold_seed(42, 0)
    assert len({inputs.fold_seed(42, s) for s in range(100)}) == 100


def test_missing_files_are_named(tmp_path):
    with pytest.raises(FileNotFoundError, match=r"no TFRecord file matches '.*nothing-\*.tfrecord'"):
        inputs.resolve_files(str(tmp_path / "nothing-*.tfrecord"))


def test_padded_input_refuses_multi_host_slices(data):
    schema, pattern = data
    with pytest.raises(ValueError, match=r"on a TPU slice with 2 hosts is not supported: every host would read"):
        inputs.eval_input_fn_builder(pattern, schema)({"batch_size": 4, "context": FakeTPUContext(0)})
