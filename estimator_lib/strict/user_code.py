"""Where a user's own code is: the frames of a traceback or stack outside TensorFlow, installed packages and this
library, and the error that names an exception the user's model_fn raised while strict mode built it."""

from __future__ import annotations

import os
import sys
import sysconfig
from types import FrameType, TracebackType
from typing import Callable, Iterator, List, NamedTuple, Optional, Sequence

_TENSORFLOW_PARTS = ("/tensorflow/", "/tensorflow_estimator/", "/keras/")
_LIBRARY_PARTS = _TENSORFLOW_PARTS + ("/estimator_lib/", "/site-packages/", "/dist-packages/")
_STDLIB = sysconfig.get_paths()["stdlib"]


class ModelBuildError(ValueError):
    """The user's model_fn raised an exception of its own (not a TPU finding) while strict mode built it."""


class Frame(NamedTuple):
    """One frame: file, line, function (qualified name when known) and module (when known)."""

    path: str
    line: int
    function: str
    module: str = ""


def is_tensorflow(path: str) -> bool:
    """A file of TensorFlow, tensorflow_estimator or Keras."""
    return any(part in path for part in _TENSORFLOW_PARTS)


def is_user(path: str) -> bool:
    """A file of the user's: not TensorFlow, Keras, this library, an installed package or the standard library."""
    if path.startswith("<") or path.startswith(_STDLIB):
        return False
    return not any(part in path for part in _LIBRARY_PARTS)


def _frame(f: FrameType, line: int) -> Frame:
    code = f.f_code
    return Frame(code.co_filename, line, getattr(code, "co_qualname", code.co_name), f.f_globals.get("__name__", ""))


def traceback_frames(tb: Optional[TracebackType]) -> List[Frame]:
    """The frames of a traceback, outermost first."""
    frames = []
    while tb is not None:
        frames.append(_frame(tb.tb_frame, tb.tb_lineno))
        tb = tb.tb_next
    return frames


def stack_frames() -> Iterator[Frame]:
    """The calling stack, innermost first."""
    f = sys._getframe(1)
    while f is not None:
        yield _frame(f, f.f_lineno)
        f = f.f_back


def user_frame(frames: Sequence[Frame]) -> Optional[Frame]:
    """The innermost of `frames` (outermost first) in the user's own code, or None."""
    return next((f for f in reversed(frames) if is_user(f.path)), None)


def short_path(path: str) -> str:
    """`path` relative to the import path entry that holds it (e.g. "my_model/model.py"), else its file name."""
    roots = [os.path.abspath(p or os.curdir) for p in sys.path]
    path = os.path.abspath(path)
    holding = [r for r in roots if path.startswith(r.rstrip(os.sep) + os.sep)]
    return os.path.relpath(path, max(holding, key=len)) if holding else os.path.basename(path)


def located(frame: Frame) -> str:
    """ "my_model/model.py:42 (in model_fn)"."""
    return f"{short_path(frame.path)}:{frame.line} (in {frame.function})"


def _raised_in(error: BaseException) -> str:
    frames = traceback_frames(error.__traceback__)
    return frames[-1].path if frames else ""


def raised_by_tensorflow(error: BaseException) -> bool:
    """The exception was raised inside TensorFlow, tensorflow_estimator or Keras."""
    return is_tensorflow(_raised_in(error))


def raised_by_user_code(error: BaseException) -> bool:
    """The exception was raised by the user's code or a package it calls (absl's flags, numpy), not inside
    TensorFlow, tensorflow_estimator, Keras or this library."""
    path = _raised_in(error)
    return bool(path) and not is_tensorflow(path) and "/estimator_lib/" not in path


def model_build_error(error: BaseException, model_fn: Callable, mode: str, params: str) -> ModelBuildError:
    """The error naming what the user's model_fn raised: "model_fn my_model.model:model_fn raised KeyError:
    'label_ids' at my_model/model.py:42 (in model_fn) while building the train graph"."""
    frames = traceback_frames(error.__traceback__)
    own = [f for f in frames if is_user(f.path)]
    entry = f"{own[0].module}:{own[0].function}" if own else getattr(model_fn, "__qualname__", repr(model_fn))
    at = f" at {located(own[-1])}" if own else ""
    message = f"{type(error).__name__}: {error}" if str(error) else type(error).__name__
    return ModelBuildError(
        f"model_fn {entry} raised {message}{at} while building the {mode} graph\n"
        f"  (TPU-strict mode builds the graph TPUEstimator builds on a TPU, with params {params}; the exception "
        "comes from the model's own code, not from a TPU rule)"
    )
