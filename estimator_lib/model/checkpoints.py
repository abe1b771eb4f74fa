"""Which checkpoint of a model directory is the model: the best one by validation loss, kept in `best/`.

Early stopping (`estimator.train`) copies each checkpoint that improves the validation loss into
`MODEL_DIR/best/` (with its own `checkpoint` state file) and records the rounds in `MODEL_DIR/validation.json`.
Evaluation, batch prediction, export and warm start call `selected_checkpoint`, which returns that copy, or the
newest checkpoint of a model trained without a validation split. TensorFlow's file system does the copying:
the model directory is TensorFlow's (local or gs://, written by TPUEstimator).

`ValidationHistory` is the record of the rounds (TensorFlow-free): a resumed training run reads it and carries
on where it stopped, and a finished one returns at once.
"""

from __future__ import annotations

import dataclasses
import json
import posixpath
from typing import Any, Dict, List, Optional, Tuple

import tensorflow as tf

from estimator_lib import storage

BEST_DIR = "best"
HISTORY_FILE = "validation.json"


# -- the record of the rounds --------------------------------------------------------------------------------
@dataclasses.dataclass(frozen=True)
class ValidationHistory:
    """Validation loss after each round, the best so far and why training stopped.

    Attributes:
      losses: ((global step, mean validation loss), ...) in training order.
      best_step, best_loss: the round with the lowest loss (improvements of at most `min_delta` do not count).
      best_checkpoint: the copy of that round's checkpoint, relative to the model directory
        ("best/model.ckpt-N"), so the record holds no location.
      stopped: why training ended: "patience" (no improvement for `patience` rounds), "budget" (the step
        budget is spent), or None while it goes on.
    """

    losses: Tuple[Tuple[int, float], ...] = ()
    best_step: Optional[int] = None
    best_loss: Optional[float] = None
    best_checkpoint: Optional[str] = None
    stopped: Optional[str] = None

    @property
    def steps(self) -> Tuple[int, ...]:
        return tuple(step for step, _ in self.losses)

    def improves(self, loss: float, min_delta: float) -> bool:
        return self.best_loss is None or loss < self.best_loss - min_delta

    def rounds_since_best(self) -> int:
        """Rounds measured after the best one."""
        return 0 if self.best_step is None else sum(1 for step in self.steps if step > self.best_step)

    def with_round(self, step: int, loss: float, best_checkpoint: Optional[str]) -> "ValidationHistory":
        """The history with one more round; `best_checkpoint` is given when this round is the new best."""
        history = dataclasses.replace(self, losses=self.losses + ((step, loss),))
        if best_checkpoint is None:
            return history
        return dataclasses.replace(history, best_step=step, best_loss=loss, best_checkpoint=best_checkpoint)

    def to_dict(self) -> Dict[str, Any]:
        out = dataclasses.asdict(self)
        out["losses"] = [[step, loss] for step, loss in self.losses]
        return out

    @classmethod
    def from_dict(cls, data: Dict[str, Any]) -> "ValidationHistory":
        losses = tuple((int(step), float(loss)) for step, loss in data.get("losses", ()))
        return cls(
            losses, data.get("best_step"), data.get("best_loss"), data.get("best_checkpoint"), data.get("stopped")
        )


def read_history(model_dir: str) -> ValidationHistory:
    """The record in `model_dir` (an empty one when training has not validated yet)."""
    path = storage.join(model_dir, HISTORY_FILE)
    if not storage.exists(path):
        return ValidationHistory()
    return ValidationHistory.from_dict(json.loads(storage.read_text(path)))


def write_history(model_dir: str, history: ValidationHistory) -> None:
    """Writes the record whole (a temp file renamed into place locally, one object upload on gs://)."""
    storage.write_text(storage.join(model_dir, HISTORY_FILE), json.dumps(history.to_dict(), indent=2, sort_keys=True))


# -- the best checkpoint -------------------------------------------------------------------------------------
def _checkpoint_files(checkpoint: str) -> List[str]:
    files = tf.io.gfile.glob(checkpoint + ".*")
    if not any(f.endswith(".index") for f in files):
        raise FileNotFoundError(f"checkpoint {checkpoint!r} has no .index file; it cannot be kept as the best one")
    return sorted(files)


def keep_best(checkpoint: str, model_dir: str) -> str:
    """Copies `checkpoint` (a prefix in `model_dir`) into `model_dir/best/` and points best/checkpoint at it;
    the previous best's files are deleted afterwards. Returns the copy's prefix.

    The copy is what later stages use, so TPUEstimator's own clean-up of old checkpoints
    (`keep_checkpoint_max`) can never delete the best model.
    """
    best_dir = storage.join(model_dir, BEST_DIR)
    tf.io.gfile.makedirs(best_dir)
    name = posixpath.basename(checkpoint)
    previous = tf.io.gfile.glob(storage.join(best_dir, "model.ckpt-*"))
    for source in _checkpoint_files(checkpoint):
        tf.io.gfile.copy(source, storage.join(best_dir, posixpath.basename(source)), overwrite=True)
    tf.compat.v1.train.update_checkpoint_state(best_dir, name, all_model_checkpoint_paths=[name])
    for old in previous:
        if not posixpath.basename(old).startswith(name + "."):
            tf.io.gfile.remove(old)
    return storage.join(model_dir, kept_name(checkpoint))


def kept_name(checkpoint: str) -> str:
    """The name `keep_best` gives a checkpoint's copy, relative to the model directory."""
    return f"{BEST_DIR}/{posixpath.basename(checkpoint)}"


def best_checkpoint(model_dir: str) -> Optional[str]:
    """The kept best checkpoint of `model_dir`, or None when training kept none (no validation split)."""
    best_dir = storage.join(model_dir, BEST_DIR)
    return tf.train.latest_checkpoint(best_dir) if tf.io.gfile.isdir(best_dir) else None


def selected_checkpoint(model_dir: str) -> Optional[str]:
    """The checkpoint that is the model: the best by validation loss, else the newest; None before training."""
    return best_checkpoint(model_dir) or tf.train.latest_checkpoint(model_dir)
