"""The training and validation loss curves of a model directory, for the evaluation report. Host CPU.

The training loss is read from the train stage's TensorBoard event files in the model directory
(`summaries.event_files`); the validation rounds' losses from the record that chose the model
(`checkpoints.read_history`, `validation.json`): the same numbers the rounds logged, and the best step the
evaluated checkpoint was kept at.
"""

from __future__ import annotations

from typing import Any, Dict, Iterator, List, Optional, Tuple

import tensorflow as tf

from estimator_lib import summaries
from estimator_lib.model import checkpoints

# The training loss's tag: Estimator's own summary of the train op's loss (the model writes no second one).
TRAIN_LOSS_TAGS = ("loss",)


def _value(value: Any) -> float:
    """A scalar summary's value: a TF1 `simple_value`, or a TF2 summary's scalar tensor."""
    if value.HasField("simple_value"):
        return float(value.simple_value)
    return float(tf.make_ndarray(value.tensor))


def _events(path: str) -> Iterator[Any]:
    """The events of one event file, up to a record cut short (the last one, when a kill stopped its writer)."""
    try:
        yield from tf.compat.v1.train.summary_iterator(path)
    except tf.errors.DataLossError:
        return


def scalar_series(files: List[str], tags: Tuple[str, ...]) -> List[Tuple[int, float]]:
    """[(step, value)] of the first of `tags` the event `files` hold, by step; a step written twice (a resumed
    run) keeps its latest value. A file cut short (a killed attempt's) is read up to its cut."""
    found: Dict[str, Dict[int, Tuple[float, float]]] = {}
    for event in (e for path in files for e in _events(path)):
        for value in event.summary.value:
            if value.tag in tags:
                series = found.setdefault(value.tag, {})
                if event.step not in series or series[event.step][0] <= event.wall_time:
                    series[event.step] = (event.wall_time, _value(value))
    tag = next((t for t in tags if t in found), None)
    return [] if tag is None else [(step, v) for step, (_, v) in sorted(found[tag].items())]


def read_curves(model_dir: str) -> Optional[Dict[str, Any]]:
    """{"train": [[step, loss]], "validation": [[step, loss]], "best_step": int or None} of a model directory;
    None when it holds neither."""
    train = scalar_series(summaries.event_files(model_dir), TRAIN_LOSS_TAGS)
    history = checkpoints.read_history(model_dir)
    if not train and not history.losses:
        return None
    return {
        "train": [[step, loss] for step, loss in train],
        "validation": [[step, loss] for step, loss in history.losses],
        "best_step": history.best_step,
    }
