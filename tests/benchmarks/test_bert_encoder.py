"""benchmarks/bert_encoder.py at a tiny size: it trains under TPUEstimator on the CPU, AdamWeightDecay keeps two
slots per trainable variable, and strict mode builds and XLA-compiles its train step for a TPU of 2 cores."""

from __future__ import annotations

import os
import sys

import numpy as np
import tensorflow as tf
from repo import ROOT

from estimator_lib import strict
from estimator_lib.config import JobConfig, TPUSettings, TrainingConfig

sys.path.insert(0, os.path.join(ROOT, "benchmarks"))
import bert_encoder  # noqa: E402

TINY = bert_encoder.BertSize(layers=2, hidden=32, heads=4, vocab_size=100, max_positions=16)
SEQ = 12


def test_trains_on_the_cpu_with_two_adam_slots_per_variable(tmp_path):
    config = tf.compat.v1.estimator.tpu.RunConfig(model_dir=str(tmp_path), tf_random_seed=1)
    estimator = tf.compat.v1.estimator.tpu.TPUEstimator(
        model_fn=bert_encoder.model_fn_builder(TINY), config=config, use_tpu=False, train_batch_size=4
    )
    estimator.train(bert_encoder.input_fn_builder(SEQ, TINY, rows=8), max_steps=2)
    shapes = tf.train.load_checkpoint(str(tmp_path)).get_variable_to_shape_map()
    params = {n: s for n, s in shapes.items() if not n.endswith(("adam_m", "adam_v")) and n != "global_step"}
    # embeddings 100x32 + 16x32 + 2x32 and their norm; per layer q, k, v, attention output (32x32 + 32),
    # two norms, intermediate 32x128 + 128, output 128x32 + 32; pooler 32x32 + 32; classifier 32x2 + 2
    layer = 4 * (32 * 32 + 32) + 2 * 2 * 32 + (32 * 128 + 128) + (128 * 32 + 32)
    expected = (100 + 16 + 2) * 32 + 2 * 32 + 2 * layer + 32 * 32 + 32 + 32 * 2 + 2
    assert sum(int(np.prod(s)) for s in params.values()) == expected
    assert sorted(n for n in shapes if n.endswith(("adam_m", "adam_v"))) == sorted(
        f"{n}/{slot}" for n in params for slot in ("adam_m", "adam_v")
    )


def test_strict_mode_compiles_its_train_step_for_two_tpu_cores():
    job = JobConfig(
        tpu=TPUSettings(num_cores=2),
        training=TrainingConfig(train_batch_size=8, eval_batch_size=8, predict_batch_size=8),
    )
    report = strict.check_model(
        job,
        None,
        bert_encoder.model_fn_builder(TINY),
        train_input_fn=bert_encoder.input_fn_builder(SEQ, TINY),
        modes=(tf.estimator.ModeKeys.TRAIN,),
    )
    assert "train: xla" in report.checks
    assert report.findings == ()
