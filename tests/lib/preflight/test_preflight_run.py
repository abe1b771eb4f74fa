"""preflight/run.py on hand-made model_fns: exact variable bytes of a dense model, the batch search, a huge
embedding that does not fit, a slow input named input-bound, the record and its cost."""

from __future__ import annotations

import json
import time

import pytest
import tensorflow as tf

from estimator_lib.cloud.cost import PriceTable
from estimator_lib.config import JobConfig
from estimator_lib.preflight import DOES_NOT_FIT, FITS, INPUT_BOUND, largest_batch, run, run_preflight
from estimator_lib.preflight.chips import chip
from estimator_lib.preflight.step import compile_train_step
from estimator_lib.strict.inputs import InputInfo, TPUTarget

TPUEstimatorSpec = tf.compat.v1.estimator.tpu.TPUEstimatorSpec
JOB = JobConfig()  # global batch 64: 8 rows per core on 8 cores


def dense_model_fn(features, labels, mode, params):
    """x [B, 5] -> 16 (relu) -> 1, squared error, Adam through CrossShardOptimizer."""
    hidden = tf.compat.v1.layers.dense(features["x"], 16, activation=tf.nn.relu, name="h")
    prediction = tf.compat.v1.layers.dense(hidden, 1, name="out")[:, 0]
    loss = tf.reduce_mean(tf.square(prediction - labels))
    optimizer = tf.compat.v1.tpu.CrossShardOptimizer(tf.compat.v1.train.AdamOptimizer(0.01))
    return TPUEstimatorSpec(mode, loss=loss, train_op=optimizer.minimize(loss, tf.compat.v1.train.get_global_step()))


def dense_input_fn(params):
    rows = tf.data.Dataset.from_tensors(({"x": tf.ones([5])}, tf.constant(1.0))).repeat()
    return rows.batch(params["batch_size"], drop_remainder=True)


def slow_input_fn(params):
    """The dense input with 20 ms of host work per batch (a Python function: it holds the GIL, one at a time)."""

    def slow(features, labels):
        labels = tf.py_function(lambda y: time.sleep(0.02) or y, [labels], tf.float32)
        return features, tf.ensure_shape(labels, [params["batch_size"]])

    return dense_input_fn(params).map(slow)


def embedding_model_fn(features, labels, mode, params):
    """A 50M x 64 float32 item embedding (12.8 GB, 23.8 GiB padded to 128 lanes), averaged over 5 ids."""
    table = tf.compat.v1.get_variable("item_embedding", [50_000_000, 64])
    pooled = tf.reduce_mean(tf.nn.embedding_lookup(table, features["ids"]), axis=1)
    logits = tf.compat.v1.layers.dense(pooled, 1, name="out")[:, 0]
    loss = tf.reduce_mean(tf.nn.sigmoid_cross_entropy_with_logits(labels=labels, logits=logits))
    optimizer = tf.compat.v1.tpu.CrossShardOptimizer(tf.compat.v1.train.AdamOptimizer(0.01))
    return TPUEstimatorSpec(mode, loss=loss, train_op=optimizer.minimize(loss, tf.compat.v1.train.get_global_step()))


def ids_input_fn(params):
    rows = tf.data.Dataset.from_tensors(({"ids": tf.zeros([5], tf.int32)}, tf.constant(1.0))).repeat()
    return rows.batch(params["batch_size"], drop_remainder=True)


@pytest.fixture(scope="module")
def dense():
    prices = PriceTable(
        "2026-01-01", "test", "USD", 0.03, {("us-central1", "cloud-tpu", "TPU_V3 x8"): {"onDemand": 8.0}}, "t"
    )
    return run_preflight(
        JOB, None, dense_model_fn, train_input_fn=dense_input_fn, accelerator="TPU_V3", cores=8, prices=prices,
        train_steps=1000, input_seconds=0.5, max_compiles=1,
    )  # fmt: skip


def test_dense_model_variables_are_the_hand_computed_bytes(dense):
    m = dense.memory
    weights = 5 * 16 + 16 + 16 * 1 + 1  # 113 float32
    assert m.batch == 8
    assert m.parameters_unpadded == weights * 4 + 8  # and the int64 global step
    assert m.slots_unpadded == 2 * weights * 4 + 2 * 4  # Adam's m and v, and its two beta powers
    assert m.gradients_unpadded == weights * 4
    # Padded: [5,16] -> [8,128]; [16,1] -> [16,128]; vectors and scalars -> 256 elements.
    tile, vector = 8 * 128 * 4, 256 * 4
    assert m.parameters == tile + vector + 2 * tile + vector + 256 * 8
    assert m.slots == 2 * (tile + vector + 2 * tile + vector) + 2 * vector
    assert m.gradients == tile + vector + 2 * tile + vector
    assert 0 < m.activations < 1 << 20 and m.total == m.parameters + m.slots + m.gradients + m.activations


class MomentumOfItsOwn(tf.compat.v1.train.Optimizer):
    """An optimizer with its own apply_gradients (as BERT's AdamWeightDecayOptimizer): one slot per variable."""

    def __init__(self):
        super().__init__(use_locking=False, name="MomentumOfItsOwn")

    def apply_gradients(self, grads_and_vars, global_step=None, name=None):
        updates = []
        for grad, variable in grads_and_vars:
            zeros = tf.compat.v1.zeros_initializer()
            slot = tf.compat.v1.get_variable(
                variable.op.name + "/m", variable.shape, initializer=zeros, trainable=False
            )
            updates += [slot.assign(0.9 * slot + grad), variable.assign_sub(0.1 * slot)]
        return tf.group(updates)


def test_slots_of_an_optimizer_with_its_own_apply_gradients():
    def model_fn(features, labels, mode, params):
        prediction = tf.compat.v1.layers.dense(features["x"], 1, name="out")[:, 0]
        loss = tf.reduce_mean(tf.square(prediction - labels))
        return TPUEstimatorSpec(mode, loss=loss, train_op=MomentumOfItsOwn().minimize(loss))

    found = run_preflight(JOB, None, model_fn, train_input_fn=dense_input_fn, accelerator="TPU_V2", cores=8,
                          input_seconds=0, max_compiles=1)  # fmt: skip
    assert found.memory.slots_unpadded == (5 + 1) * 4 and found.memory.parameters_unpadded == (5 + 1) * 4 + 8


def test_a_gathered_variable_compiles_without_being_allocated():
    def model_fn(features, labels, mode, params):  # ResourceGather, ResourceGatherNd and VariableShape on handles
        table = tf.compat.v1.get_variable("table", [1000, 4])
        rows = tf.gather(table, features["ids"]) + tf.gather_nd(table, features["ids"][:, :1, None])
        loss = tf.reduce_mean(rows) + tf.cast(tf.shape(table)[0], tf.float32) * 0.0 + 0.0 * labels[0]
        return TPUEstimatorSpec(
            mode, loss=loss, train_op=tf.compat.v1.train.GradientDescentOptimizer(0.1).minimize(loss)
        )

    found = run_preflight(JOB, None, model_fn, train_input_fn=ids_input_fn, accelerator="TPU_V3", cores=8,
                          input_seconds=0, max_compiles=1)  # fmt: skip
    assert found.memory.gradients_unpadded == 1000 * 4 * 4 and found.memory.slots == 0


def test_dense_model_time_cost_and_record(dense):
    v3 = chip("TPU_V3")
    compute, traffic = dense.flops / v3.peak_flops_per_core, dense.bytes_accessed / v3.hbm_bytes_per_second_per_core
    assert dense.flops > 2 * 8 * 5 * 16 and dense.step_seconds == max(compute, traffic)
    assert dense.examples_per_second == pytest.approx(64 / dense.step_seconds)
    assert dense.run_seconds == pytest.approx(1000 * dense.step_seconds)
    assert dense.run_cost == pytest.approx(dense.run_seconds / 3600 * 8.0)
    assert dense.verdict == FITS and dense.fits and dense.largest_batch >= 8
    record = json.loads(json.dumps(dense.to_dict()))
    assert record["verdict"] == "fits" and record["memory"]["total"] == dense.memory.total
    assert {"name", "op", "kind", "shape", "bytes", "padded_bytes", "waste"} <= set(record["top_buffers"][0])
    assert dense.lines()[0].startswith("preflight v3-8: fits (peak ")
    assert "ex/s needed" in dense.lines()[0] and dense.lines()[0].endswith(": keeps up")


def test_a_missing_price_is_named():
    prices = PriceTable("2026-01-01", "test", "USD", None, {}, "prices.json")
    found = run_preflight(JOB, None, dense_model_fn, train_input_fn=dense_input_fn, accelerator="TPU_V2",
                          cores=8, prices=prices, train_steps=10, input_seconds=0, max_compiles=1)  # fmt: skip
    assert found.run_cost is None and found.input is None
    assert found.price_note == "no price for cloud-tpu + TPU_V2 x8 in region us-central1 (prices.json)"


def test_the_search_brackets_the_largest_batch():
    target = TPUTarget.for_job(JOB)
    info = InputInfo({"x": tf.TensorSpec([8, 5], tf.float32)}, tf.TensorSpec([8], tf.float32), None)
    total = lambda batch: run.measure(compile_train_step(dense_model_fn, info, target, batch, "/tmp"))[0].total  # noqa: E731
    hbm = total(1000)
    fit, fail = run._search(run._Compiler(dense_model_fn, info, target, "/tmp"), hbm, 8, max_compiles=10)
    assert fail is not None and 0 < fail - fit <= max(1, fit // 32)
    assert total(fit) <= hbm < total(fail)
    assert largest_batch(JOB, None, dense_model_fn, train_input_fn=dense_input_fn, hbm_bytes=hbm) == fit


def test_a_huge_embedding_does_not_fit_and_is_named():
    found = run_preflight(JOB, None, embedding_model_fn, train_input_fn=ids_input_fn, accelerator="TPU_V2",
                          cores=8, input_seconds=0.2)  # fmt: skip
    assert found.verdict == DOES_NOT_FIT and not found.fits
    assert found.largest_batch == 0 and found.smallest_failing_batch == 1
    top = found.top_buffers[0]
    assert (top.name, top.kind, top.shape) == ("item_embedding", "parameter", "float32[50000000,64]")
    assert top.bytes == 50_000_000 * 64 * 4 and top.padded_bytes == 2 * top.bytes  # 64 lanes padded to 128
    assert "batch 1 does not fit" in found.lines()[0]
    assert "parameter item_embedding: float32[50000000,64]" in found.describe()
    assert largest_batch(JOB, None, embedding_model_fn, train_input_fn=ids_input_fn, hbm_bytes=8 << 30) == 0


def test_a_slow_input_is_input_bound_and_told_what_to_change():
    found = run_preflight(JOB, None, dense_model_fn, train_input_fn=slow_input_fn, accelerator="TPU_V3", cores=8,
                          input_seconds=1.0, max_compiles=1)  # fmt: skip
    assert found.fits and found.verdict == INPUT_BOUND
    assert found.input.measured < 8 / 0.02 and not found.input.keeps_up
    text = found.describe()
    assert "cannot keep up" in found.lines()[0] and "num_parallel_calls" in text and "iterations_per_loop" in text
