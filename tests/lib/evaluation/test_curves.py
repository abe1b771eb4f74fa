"""The loss curves of a model directory: the training loss from its event files, the validation rounds from
the record that chose the model."""

from __future__ import annotations

import pytest
import tensorflow as tf

from estimator_lib.evaluation.curves import read_curves
from estimator_lib.model import checkpoints


def _write_v1(directory, tag, points):
    """A TF1 event file of `tag` scalars (simple_value), as TPUEstimator writes its loss."""
    suffix = f".{len(list(directory.glob('events.out.tfevents.*'))) if directory.exists() else 0}"
    with tf.Graph().as_default(), tf.compat.v1.summary.FileWriter(str(directory), filename_suffix=suffix) as writer:
        for step, value in points:
            summary = tf.compat.v1.Summary(value=[tf.compat.v1.Summary.Value(tag=tag, simple_value=value)])
            writer.add_summary(summary, step)


def _write_v2(directory, tag, points):
    """A TF2 event file of `tag` scalars (tensors), as a host_call writes them."""
    writer = tf.summary.create_file_writer(str(directory))
    with writer.as_default():
        for step, value in points:
            tf.summary.scalar(tag, value, step=step)
    writer.close()


def test_the_curves_are_the_estimators_loss_and_the_validation_rounds(tmp_path):
    _write_v1(tmp_path, "loss", [(100, 2.0), (200, 1.5)])
    _write_v1(tmp_path, "loss", [(200, 1.25), (300, 1.0)])  # a resumed run wrote step 200 again, later
    _write_v1(tmp_path / "eval_valid", "loss", [(100, 7.0)])  # another directory: not training's
    history = checkpoints.ValidationHistory().with_round(100, 1.8, "best/model.ckpt-100").with_round(300, 1.9, None)
    checkpoints.write_history(str(tmp_path), history)
    curves = read_curves(str(tmp_path))
    assert curves == {
        "train": [[100, 2.0], [200, 1.25], [300, 1.0]],
        "validation": [[100, pytest.approx(1.8)], [300, pytest.approx(1.9)]],
        "best_step": 100,
    }


def test_one_loss_tag_is_read_whichever_writer_wrote_it(tmp_path):
    _write_v2(tmp_path, "loss", [(100, 0.5), (200, 0.25)])
    assert read_curves(str(tmp_path)) == {"train": [[100, 0.5], [200, 0.25]], "validation": [], "best_step": None}


def test_a_directory_without_losses_has_no_curves(tmp_path):
    _write_v1(tmp_path, "learning_rate", [(100, 0.1)])
    assert read_curves(str(tmp_path)) is None


def test_an_event_file_cut_short_by_a_kill_is_read_up_to_its_cut(tmp_path):
    _write_v1(tmp_path, "loss", [(100, 2.0), (200, 1.5)])
    _write_v1(tmp_path, "loss", [(300, 1.25), (400, 1.0)])  # the attempt a kill cut short, then cut below
    interrupted = sorted(tmp_path.glob("events.out.tfevents.*"))[-1]
    whole = interrupted.read_bytes()
    for size in (len(whole) - 1, len(whole) - 20, 30, 5, 0):
        interrupted.write_bytes(whole[:size])
        curves = read_curves(str(tmp_path))
        assert curves["train"][:2] == [[100, 2.0], [200, 1.5]], size
        assert curves["train"][2:] == [[300, 1.25]][: size > len(whole) - 25], size
