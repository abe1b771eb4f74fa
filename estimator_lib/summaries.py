"""TensorBoard event files: where TPUEstimator writes them, and their copy where Vertex AI TensorBoard reads.

TPUEstimator writes its summaries into the model directory (the train stage's Model artifact): training
summaries as `MODEL_DIR/events.out.tfevents.*` (one file per training process: `loss` from Estimator, and
`learning_rate` and `steps_per_second` from the progress hook, `model.hooks.ProgressHook`, through the same
cached writer), early stopping's validation as `MODEL_DIR/eval_valid/`, evaluation summaries as
`MODEL_DIR/eval/events.out.tfevents.*`. A Vertex AI
custom job with a TensorBoard uploads what appears under its `AIP_TENSORBOARD_LOG_DIR` (its base output
directory's `logs/`), and the model directory is not there, so the stages copy their event files across when
they finish: `copy_event_files(MODEL_DIR, LOG_DIR/train)` after training, `MODEL_DIR/eval` to `LOG_DIR/eval`
after evaluating. The model directory keeps the originals (a local `tensorboard --logdir MODEL_DIR` works too).
"""

from __future__ import annotations

import posixpath
from typing import List

from estimator_lib import storage

EVENT_FILE_PREFIX = "events.out.tfevents."
EVAL_DIR = "eval"  # TPUEstimator's evaluate(name=None) writes into MODEL_DIR/eval


def event_files(directory: str) -> List[str]:
    """The TensorBoard event files directly in `directory` (not in its subdirectories), sorted."""
    return storage.glob(storage.join(directory, EVENT_FILE_PREFIX + "*"))


def copy_event_files(source_dir: str, destination_dir: str) -> List[str]:
    """Copies the event files directly in `source_dir` to `destination_dir` (local or gs://); returns the copies.

    Event files are append-only logs with unique names, so copying them again later only refreshes them.
    """
    copies = []
    for path in event_files(source_dir):
        copy = storage.join(destination_dir, posixpath.basename(path))
        storage.write_bytes(copy, storage.read_bytes(path))
        copies.append(copy)
    return copies
