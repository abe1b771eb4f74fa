"""model/checkpoints.py: the validation record on disk (local and gs://), and the best checkpoint kept from a
real TensorFlow checkpoint: its values survive the copy, its state file names only it, and the model's
checkpoint is the best one, else the newest. (Copying fake checkpoint files and the history's arithmetic are
covered in tests/lib/model/test_early_stopping.py.)"""

from __future__ import annotations

import dataclasses
import json
import os

import numpy as np
import pytest
import tensorflow as tf

from estimator_lib.model import checkpoints
from estimator_lib.model.checkpoints import ValidationHistory


def save_checkpoint(model_dir: str, step: int, value: float) -> str:
    """A real checkpoint of one variable "w" [2] = value, at `step`; returns its prefix."""
    with tf.Graph().as_default():
        w = tf.compat.v1.get_variable("w", initializer=tf.constant([value, -value]))
        with tf.compat.v1.Session() as session:
            session.run(w.initializer)
            saver = tf.compat.v1.train.Saver(max_to_keep=10)
            return saver.save(session, os.path.join(model_dir, "model.ckpt"), global_step=step)


# -- the record of the rounds --------------------------------------------------------------------------------
def test_history_is_empty_before_validation(tmp_path):
    assert checkpoints.read_history(str(tmp_path)) == ValidationHistory()


def test_history_round_trips_through_its_file(tmp_path):
    history = ValidationHistory().with_round(10, 0.5, "best/model.ckpt-10").with_round(20, 0.75, None)
    history = dataclasses.replace(history, stopped="patience")
    checkpoints.write_history(str(tmp_path), history)
    assert checkpoints.read_history(str(tmp_path)) == history
    with open(tmp_path / checkpoints.HISTORY_FILE) as f:
        assert json.load(f) == {
            "losses": [[10, 0.5], [20, 0.75]],
            "best_step": 10,
            "best_loss": 0.5,
            "best_checkpoint": "best/model.ckpt-10",
            "stopped": "patience",
        }


def test_history_from_a_partial_record():
    history = ValidationHistory.from_dict({"losses": [["3", "0.25"]]})
    assert history == ValidationHistory(losses=((3, 0.25),))
    assert (history.best_step, history.stopped, history.rounds_since_best()) == (None, None, 0)


def test_history_on_cloud_storage(gcs_prefix):
    history = ValidationHistory().with_round(4, 1.25, "best/model.ckpt-4")
    assert checkpoints.read_history(gcs_prefix) == ValidationHistory()
    checkpoints.write_history(gcs_prefix, history)
    assert checkpoints.read_history(gcs_prefix) == history


# -- the best checkpoint -------------------------------------------------------------------------------------
def test_before_training_there_is_no_checkpoint(tmp_path):
    assert checkpoints.best_checkpoint(str(tmp_path)) is None
    assert checkpoints.selected_checkpoint(str(tmp_path)) is None


def test_without_a_best_copy_the_newest_checkpoint_is_the_model(tmp_path):
    save_checkpoint(str(tmp_path), 5, 1.0)
    newest = save_checkpoint(str(tmp_path), 9, 2.0)
    assert checkpoints.best_checkpoint(str(tmp_path)) is None
    assert checkpoints.selected_checkpoint(str(tmp_path)) == newest


def test_kept_checkpoint_holds_the_same_values(tmp_path):
    model_dir = str(tmp_path)
    best = save_checkpoint(model_dir, 10, 3.0)
    newer = save_checkpoint(model_dir, 100, 7.0)
    kept = checkpoints.keep_best(best, model_dir)
    assert kept == os.path.join(model_dir, "best", "model.ckpt-10")
    assert checkpoints.kept_name(best) == "best/model.ckpt-10"
    np.testing.assert_array_equal(tf.train.load_variable(kept, "w"), [3.0, -3.0])
    # the best, not the newest, is the model; the model directory's own state is untouched
    assert checkpoints.selected_checkpoint(model_dir) == kept
    assert tf.train.latest_checkpoint(model_dir) == newer
    state = tf.train.get_checkpoint_state(os.path.join(model_dir, "best"))
    assert [os.path.basename(p) for p in state.all_model_checkpoint_paths] == ["model.ckpt-10"]


def test_a_step_whose_name_prefixes_the_old_best_replaces_it(tmp_path):
    model_dir = str(tmp_path)
    checkpoints.keep_best(save_checkpoint(model_dir, 100, 1.0), model_dir)
    kept = checkpoints.keep_best(save_checkpoint(model_dir, 10, 2.0), model_dir)  # "model.ckpt-10" prefixes "-100"
    files = sorted(os.listdir(os.path.join(model_dir, "best")))
    assert files == ["checkpoint", "model.ckpt-10.data-00000-of-00001", "model.ckpt-10.index", "model.ckpt-10.meta"]
    np.testing.assert_array_equal(tf.train.load_variable(kept, "w"), [2.0, -2.0])


def test_keeping_the_same_checkpoint_twice_keeps_its_files(tmp_path):
    model_dir = str(tmp_path)
    checkpoint = save_checkpoint(model_dir, 3, 1.5)
    checkpoints.keep_best(checkpoint, model_dir)
    kept = checkpoints.keep_best(checkpoint, model_dir)
    assert checkpoints.best_checkpoint(model_dir) == kept
    np.testing.assert_array_equal(tf.train.load_variable(kept, "w"), [1.5, -1.5])


def test_keep_best_of_a_missing_checkpoint_names_it(tmp_path):
    missing = os.path.join(str(tmp_path), "model.ckpt-42")
    with pytest.raises(FileNotFoundError) as e:
        checkpoints.keep_best(missing, str(tmp_path))
    assert str(e.value) == f"checkpoint {missing!r} has no .index file; it cannot be kept as the best one"
    assert checkpoints.best_checkpoint(str(tmp_path)) is None
