"""model/races.py: unordered reads and writes of one variable in a training step, found in TF1 graphs built as
TPUEstimator builds them (the global step first, then the model_fn), and ordered so that training repeats bit
for bit: the BERT pattern's learning rate against its step increment, reference and resource variables, the
built-in model_fn (no race), and the BERT pattern trained with its race ordered."""

from __future__ import annotations

import os

import numpy as np
import pytest
import synthetic
import tensorflow as tf
from tpu_patterns import bert_pattern

from estimator_lib.config import JobConfig, ModelConfig, OptimizerConfig, TPUSettings, TrainingConfig
from estimator_lib.config.feature_spec import FeatureSpec
from estimator_lib.engine.user import UserModel, run
from estimator_lib.model import races
from estimator_lib.model.model_fn import build_model_fn
from estimator_lib.model.user.model_fn import wrap_model_fn

ModeKeys = tf.estimator.ModeKeys
B = 4
PATTERN = bert_pattern.__file__


def _line(text: str) -> int:
    """The line of bert_pattern.py holding `text` (once)."""
    with open(PATTERN, encoding="utf-8") as f:
        lines = [i for i, line in enumerate(f, 1) if text in line]
    assert len(lines) == 1, (text, lines)
    return lines[0]


def bert_train_graph(model_fn):
    """(graph, TRAIN spec) of a BERT-pattern model_fn, features and labels fed through placeholders."""
    graph = tf.Graph()
    with graph.as_default():
        tf.compat.v1.set_random_seed(1)
        tf.compat.v1.train.get_or_create_global_step()
        shape = [B, bert_pattern.SEQ_LENGTH]
        features = {k: tf.compat.v1.placeholder(tf.int32, shape, k) for k in ("input_ids", "input_mask", "segment_ids")}
        labels = tf.compat.v1.placeholder(tf.int32, [B], "labels")
        spec = model_fn(features, labels, ModeKeys.TRAIN, {**bert_pattern.HPARAMS, "use_tpu": False})
    return graph, spec


def test_the_bert_pattern_reads_global_step_unordered_with_its_increment():
    graph, spec = bert_train_graph(bert_pattern.model_fn)
    [race] = races.find_races(graph, spec.train_op)
    assert race.variable == "global_step"
    assert (graph.get_operation_by_name(race.read).type, graph.get_operation_by_name(race.write).type) == (
        "ReadVariableOp",
        "AssignVariableOp",
    )
    assert race.read_site == f"{PATTERN}:{_line('step = tf.cast(tf.compat.v1.train.get_global_step()')}"
    assert race.write_site == f"{PATTERN}:{_line('[global_step.assign(new_global_step)]')}"
    assert race.message().startswith(f"global_step: {race.read} (created at {race.read_site}) and {race.write}")
    assert "may read global_step before or after it is written: training is not bitwise reproducible" in (
        race.message()
    )


def test_an_increment_ordered_after_the_update_is_no_race():
    graph, spec = bert_train_graph(bert_pattern.ordered_model_fn)
    assert races.find_races(graph, spec.train_op) == []


def test_ordering_the_race_leaves_none():
    graph, spec = bert_train_graph(bert_pattern.model_fn)
    found = races.find_races(graph, spec.train_op)
    assert races.order_races(graph, found) == []
    assert races.find_races(graph, spec.train_op) == []
    read, write = graph.get_operation_by_name(found[0].read), graph.get_operation_by_name(found[0].write)
    assert read in write.control_inputs


def _two_accesses(use_resource: bool, ordered: bool):
    """A variable read by one branch of the step and incremented by another."""
    graph = tf.Graph()
    with graph.as_default():
        v = tf.compat.v1.get_variable("v", [], initializer=tf.compat.v1.zeros_initializer(), use_resource=use_resource)
        doubled = (v.read_value() if use_resource else tf.identity(v, name="read")) * 2.0
        with tf.control_dependencies([doubled] if ordered else []):
            increment = tf.compat.v1.assign_add(v, 1.0, name="increment")
        return graph, tf.group(doubled, increment)


# A reference variable's value is read by its `v/read` snapshot, made with the variable; a resource variable's by
# a ReadVariableOp made where the value is used.
@pytest.mark.parametrize(
    "use_resource, read, line",
    [(True, ("ReadVariableOp", "Read/ReadVariableOp"), 5), (False, ("Identity", "v/read"), 4)],
)
def test_resource_and_reference_variables(use_resource, read, line):
    graph, train_op = _two_accesses(use_resource, ordered=False)
    [race] = races.find_races(graph, train_op)
    assert (race.variable, graph.get_operation_by_name(race.read).type, race.read) == ("v", *read)
    assert graph.get_operation_by_name(race.write).type == ("AssignAddVariableOp" if use_resource else "AssignAdd")
    assert race.read_site == f"{__file__}:{_two_accesses.__code__.co_firstlineno + line}"
    assert race.write_site == f"{__file__}:{_two_accesses.__code__.co_firstlineno + 7}"
    graph, train_op = _two_accesses(use_resource, ordered=True)
    assert races.find_races(graph, train_op) == []


def test_a_race_in_a_while_loops_body_names_the_captured_variable():
    """A TPU training loop runs the model_fn in a while loop's body: a function graph capturing the variables."""
    found = []

    def body(i):
        doubled = v.read_value() * 2.0
        step = tf.group(doubled, v.assign_add(1.0))
        graph = tf.compat.v1.get_default_graph()
        found.append(races.find_races(graph, step))
        races.order_races(graph, found[0])
        found.append(races.find_races(graph, step))
        with tf.control_dependencies([step]):
            return i + 1

    with tf.Graph().as_default():
        v = tf.compat.v1.get_variable("v", [], initializer=tf.compat.v1.zeros_initializer(), use_resource=True)
        tf.compat.v1.while_loop(lambda i: i < 3, body, [0])
    [[race], after] = found
    assert (race.variable, race.read_site, after) == ("v", f"{__file__}:{body.__code__.co_firstlineno + 1}", [])


def test_the_read_that_feeds_its_write_is_ordered():
    graph = tf.Graph()
    with graph.as_default():
        v = tf.compat.v1.get_variable("v", [], use_resource=True)
        assert races.find_races(graph, v.assign(v * 3.0 + 1.0).op) == []


def test_a_train_op_of_another_graph_is_refused():
    graph, spec = bert_train_graph(bert_pattern.model_fn)
    with pytest.raises(ValueError, match="is not an op of the graph given; pass the graph it was built in"):
        races.find_races(tf.Graph(), spec.train_op)


def test_the_built_in_model_fn_has_no_race(tmp_path):
    optimizer = OptimizerConfig(name="adam", schedule="cosine_decay", warmup_steps=2, clip_gradient_norm=1.0)
    job = JobConfig(
        training=TrainingConfig(train_steps=10, seed=3, optimizer=optimizer),
        model=ModelConfig(family="dnn", hidden_units=(5,), embedding_dim=2, dropout=0.1),
    )
    graph = tf.Graph()
    with graph.as_default():
        tf.compat.v1.set_random_seed(3)
        tf.compat.v1.train.get_or_create_global_step()
        features = {k: tf.compat.v1.placeholder(tf.float32, [B], k) for k in ("f_x_1", "f_x_2")}
        features["f_colour"] = tf.compat.v1.placeholder(tf.int32, [B], "f_colour")
        labels = tf.compat.v1.placeholder(tf.int32, [B], "labels")
        config = tf.compat.v1.estimator.tpu.RunConfig(model_dir=str(tmp_path))
        model_fn = build_model_fn(synthetic.make_schema("binary"), job)
        spec = model_fn(features, labels, ModeKeys.TRAIN, {"batch_size": B, "use_tpu": False}, config)
        assert races.find_races(graph, spec.train_op) == []


# -- training ------------------------------------------------------------------------------------------------
STEPS = 30


def _job() -> JobConfig:
    return JobConfig(
        tpu=TPUSettings(iterations_per_loop=1),
        training=TrainingConfig(train_batch_size=16, train_steps=STEPS, save_checkpoints_steps=STEPS, seed=5),
    )


def _trained(model_fn: str, files: str, model_dir: str) -> dict:
    """The final checkpoint's variables after training bert_pattern's `model_fn` to STEPS through the user-model
    train stage's call (`engine.user.run.train`: its estimator orders the races under `training.deterministic`)."""
    spec = FeatureSpec.from_json(bert_pattern.SPEC, label=bert_pattern.LABEL)
    user = UserModel(f"tpu_patterns.bert_pattern:{model_fn}", spec, {**bert_pattern.HPARAMS, "num_train_steps": STEPS})
    run.train(_job(), user, files, model_dir)
    reader = tf.train.load_checkpoint(model_dir)
    return {name: reader.get_tensor(name) for name in reader.get_variable_to_shape_map()}


@pytest.mark.determinism
def test_the_bert_pattern_as_written_trains_bitwise_alike(tmp_path, caplog):
    """Twice with one seed: identical checkpoints, equal to the model whose increment waits for the update."""
    files = str(tmp_path / "train.tfrecord")
    bert_pattern.write_records(files, 256, seed=1)
    with caplog.at_level("WARNING", logger=races.__name__):
        first, second = (_trained("model_fn", files, str(tmp_path / name)) for name in ("a", "b"))
    reference = _trained("ordered_model_fn", files, str(tmp_path / "ordered"))
    logged = [r.getMessage() for r in caplog.records if r.name == races.__name__]
    assert len(logged) == 2 and all("(ordered read first): global_step: " in m for m in logged)
    assert first["global_step"] == STEPS
    assert (
        sorted(first) == sorted(second) == sorted(reference) and len(first) == 3 * 19 + 1
    )  # 19 trainable variables, their m and v, the step
    for name in first:
        assert first[name].tobytes() == second[name].tobytes() == reference[name].tobytes(), name
    assert np.isfinite(first["classifier/kernel"]).all()


def test_the_race_is_logged_with_its_sites(tmp_path, caplog):
    graph = tf.Graph()
    with graph.as_default():
        tf.compat.v1.set_random_seed(1)
        tf.compat.v1.train.get_or_create_global_step()
        features = {
            k: tf.compat.v1.placeholder(tf.int32, [B, bert_pattern.SEQ_LENGTH], k)
            for k in ("input_ids", "input_mask", "segment_ids")
        }
        labels = tf.compat.v1.placeholder(tf.int32, [B], "labels")
        model_fn = races.ordered_model_fn(wrap_model_fn(bert_pattern.model_fn))
        params = {**bert_pattern.HPARAMS, "use_tpu": False}
        with caplog.at_level("WARNING", logger=races.__name__):
            model_fn(features, labels, ModeKeys.TRAIN, params, tf.compat.v1.estimator.tpu.RunConfig())
    [record] = [r for r in caplog.records if r.name == races.__name__]
    assert record.getMessage().startswith("train: unordered read and write (ordered read first): global_step: ")
    assert f"{os.path.basename(PATTERN)}:{_line('[global_step.assign(new_global_step)]')}" in record.getMessage()
