"""The train input_fn's rate on this machine's CPU, as TPUEstimator's host would pull it (PER_HOST_V2, host 0).

The input_fn is called in a fresh graph with the TPU params (`strict.inputs.input_params`); one iterator then
yields batches, pulled many per `session.run` so the measure is the pipeline's, not the session's. After a warm-up
(the shuffle buffer filled, files opened), examples are counted for the given seconds.
"""

from __future__ import annotations

import time
from typing import Callable, Tuple

import tensorflow as tf

from estimator_lib.strict.inputs import TPUTarget, input_params

TRAIN = tf.estimator.ModeKeys.TRAIN
WARM_UP_SECONDS = 1.0


def _puller(dataset: tf.data.Dataset):
    """(the iterator, a placeholder for how many batches to pull, the op pulling them that returns the examples
    pulled)."""
    iterator = tf.compat.v1.data.make_initializable_iterator(dataset)
    count = tf.compat.v1.placeholder(tf.int64, [], name="batches")

    def body(i, examples):
        element = tf.nest.flatten(iterator.get_next())
        with tf.control_dependencies(element):  # every component computed, as the infeed takes them all
            return i + 1, examples + tf.shape(element[0], out_type=tf.int64)[0]

    zero = tf.constant(0, tf.int64)
    return iterator, count, tf.while_loop(lambda i, _: i < count, body, [zero, zero])[1]


def measure_rate(input_fn: Callable, target: TPUTarget, seconds: float) -> Tuple[float, int]:
    """(examples per second, examples counted) of `input_fn`'s training Dataset over about `seconds` on this CPU.

    A Dataset that ends is measured over what it held (OutOfRange ends the count).
    """
    graph = tf.Graph()
    with graph.as_default():
        iterator, count, pull = _puller(input_fn(input_params(target, TRAIN)))
        with tf.compat.v1.Session(graph=graph) as session:
            session.run([tf.compat.v1.tables_initializer(), iterator.initializer])
            examples, batches, started = 0, 1, time.perf_counter()
            try:
                while time.perf_counter() - started < WARM_UP_SECONDS:
                    session.run(pull, {count: batches})
                    batches *= 2
                started = time.perf_counter()
                while time.perf_counter() - started < seconds:
                    examples += int(session.run(pull, {count: batches}))
            except tf.errors.OutOfRangeError:
                pass  # a Dataset that ends is measured over what it held
            elapsed = time.perf_counter() - started
    return (examples / elapsed if elapsed > 0 else 0.0), examples
