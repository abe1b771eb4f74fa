"""model/warm_start.py without training: which checkpoint a source path means, the source's schema, the
row maps between vocabularies, and the scaffold that loads a real checkpoint into a fresh graph (variables as
they are, embedding rows by value, fresh rows left to their initialiser) or refuses a different architecture.
(Warm starts through `estimator.train` are in tests/lib/model/test_training.py.)"""

from __future__ import annotations

import json
import logging
import os

import numpy as np
import pytest
import tensorflow as tf

from estimator_lib.data.retrain import EXPORT_METADATA
from estimator_lib.model import warm_start
from estimator_lib.schema import CATEGORICAL, NUMERIC, FeatureSpec, LabelSpec, Schema

OLD_TABLE = np.arange(8, dtype=np.float32).reshape(4, 2)  # rows: a, b, c, then the OOV bucket
OLD_KERNEL = np.float32([[1.5], [-2.5]])


def schema(vocabulary, oov=1) -> Schema:
    return Schema(
        (
            FeatureSpec("c", "f_c", CATEGORICAL, value_type="string", vocabulary=vocabulary, num_oov_buckets=oov),
            FeatureSpec("n", "f_n", NUMERIC),
        ),
        LabelSpec("y", "regression"),
    )


OLD = schema(("a", "b", "c"))


def save(prefix: str, variables: dict) -> str:
    """A real checkpoint of {name: value} at `prefix`."""
    with tf.Graph().as_default():
        made = [tf.compat.v1.get_variable(name, initializer=tf.constant(value)) for name, value in variables.items()]
        with tf.compat.v1.Session() as session:
            session.run(tf.compat.v1.variables_initializer(made))
            return tf.compat.v1.train.Saver(made).save(session, prefix, write_meta_graph=False)


@pytest.fixture
def model_dir(tmp_path) -> str:
    save(str(tmp_path / "model" / "model.ckpt-7"), {"dnn/embeddings/f_c": OLD_TABLE, "dnn/logits/kernel": OLD_KERNEL})
    with open(tmp_path / "model" / "checkpoint", "w") as f:
        f.write('model_checkpoint_path: "model.ckpt-7"\n')
    return str(tmp_path / "model")


@pytest.fixture
def export_dir(tmp_path) -> str:
    """An export's layout: a SavedModel's variables checkpoint and the schema in its metadata."""
    root = tmp_path / "export"
    (root / "variables").mkdir(parents=True)
    save(str(root / "variables" / "variables"), {"dnn/embeddings/f_c": OLD_TABLE, "dnn/logits/kernel": OLD_KERNEL})
    (root / "saved_model.pb").write_bytes(b"")
    (root / "assets.extra").mkdir()
    (root / EXPORT_METADATA).write_text(json.dumps({"schema": OLD.to_dict()}))
    return str(root)


# -- the source ----------------------------------------------------------------------------------------------
def test_resolve_checkpoint_of_each_kind_of_source(model_dir, export_dir, tmp_path):
    assert warm_start.resolve_checkpoint(export_dir) == f"{export_dir}/variables/variables"
    assert warm_start.resolve_checkpoint(model_dir) == os.path.join(model_dir, "model.ckpt-7")
    prefix = os.path.join(model_dir, "model.ckpt-7")
    assert warm_start.resolve_checkpoint(prefix) == prefix


def test_resolve_checkpoint_errors_name_the_setting(tmp_path):
    (tmp_path / "empty").mkdir()
    with pytest.raises(FileNotFoundError) as e:
        warm_start.resolve_checkpoint(str(tmp_path / "empty"))
    assert str(e.value) == (
        f"training.warm_start_from={str(tmp_path / 'empty')!r} is a directory with neither a SavedModel nor a "
        "checkpoint"
    )
    with pytest.raises(FileNotFoundError, match="does not exist; give a checkpoint prefix, a model directory or a"):
        warm_start.resolve_checkpoint(str(tmp_path / "nowhere"))


def test_source_schema_only_for_exports(model_dir, export_dir):
    assert warm_start.source_schema(export_dir) == OLD
    assert warm_start.source_schema(model_dir) is None


# -- row maps ------------------------------------------------------------------------------------------------
def test_row_map_with_fewer_oov_buckets_and_an_empty_vocabulary():
    old = OLD.features[0]
    new = schema(("c", "a"), oov=1).features[0]
    assert warm_start.row_map(old, new) == [2, 0, 3]
    hashed = schema((), oov=2).features[0]
    assert warm_start.row_map(hashed, schema(("a",), oov=3).features[0]) == [-1, 0, 1, -1]


def test_row_maps_only_for_changed_shared_features(caplog):
    assert warm_start.row_maps(None, OLD) == {} and warm_start.row_maps(OLD, None) == {}
    assert warm_start.row_maps(OLD, OLD) == {}
    with caplog.at_level(logging.INFO, logger="estimator_lib.model.warm_start"):
        maps = warm_start.row_maps(OLD, schema(("c", "d", "a")))
    assert maps == {"f_c": ([2, -1, 0, 3], 4)}
    assert "c: 2 of 3 values keep their trained rows (2 at a new id), fresh rows for ['d']" in caplog.text


# -- the scaffold in a fresh graph ---------------------------------------------------------------------------
def warm_values(path: str, new_schema, table_rows: int, kernel_shape=(2, 1)):
    """Builds the new model's variables, applies the warm start scaffold, returns their values."""
    with tf.Graph().as_default():
        with tf.compat.v1.variable_scope("dnn"):
            table = tf.compat.v1.get_variable(
                "embeddings/f_c", [table_rows, 2], initializer=tf.compat.v1.constant_initializer(-9.0)
            )
            kernel = tf.compat.v1.get_variable("logits/kernel", list(kernel_shape))
        scaffold = warm_start.warm_start_scaffold_fn(path, new_schema)()
        with tf.compat.v1.Session() as session:
            session.run(tf.compat.v1.global_variables_initializer())
            if scaffold.init_fn is not None:
                scaffold.init_fn(session)  # Scaffold binds itself as the first argument
            return session.run([table, kernel])


def test_same_vocabulary_loads_every_variable_as_it_is(export_dir):
    table, kernel = warm_values(export_dir, OLD, 4)
    np.testing.assert_array_equal(table, OLD_TABLE)
    np.testing.assert_array_equal(kernel, OLD_KERNEL)


def test_embedding_rows_follow_their_values(export_dir):
    table, kernel = warm_values(export_dir, schema(("c", "d", "a")), 4)
    np.testing.assert_array_equal(table, [OLD_TABLE[2], [-9.0, -9.0], OLD_TABLE[0], OLD_TABLE[3]])
    np.testing.assert_array_equal(kernel, OLD_KERNEL)


def test_a_model_directory_is_loaded_by_position(model_dir):
    """A plain checkpoint carries no schema, so a reordered vocabulary cannot be mapped: rows load as stored."""
    table, _ = warm_values(model_dir, schema(("c", "b", "a")), 4)
    np.testing.assert_array_equal(table, OLD_TABLE)


def test_another_architecture_is_refused_naming_each_variable(model_dir):
    with pytest.raises(ValueError) as e:
        warm_values(model_dir, OLD, 4, kernel_shape=(3, 1))
    assert "dnn/logits/kernel has shape [3, 1] here but [2, 1] there" in str(e.value)
    assert str(e.value).endswith("warm start needs the same architecture")
    with pytest.raises(ValueError, match="dnn/embeddings/f_c has shape \\[5, 2\\] here but \\[4, 2\\] there"):
        warm_values(model_dir, OLD, 5)  # a bigger table with no schema to map it by


def test_a_variable_missing_from_the_source_is_named(model_dir):
    with tf.Graph().as_default():
        tf.compat.v1.get_variable("extra/bias", [1])
        with pytest.raises(
            ValueError, match=r"cannot warm start from .*model.ckpt-7': extra/bias is not in the checkpoint"
        ):
            warm_start.warm_start_scaffold_fn(model_dir, OLD)
