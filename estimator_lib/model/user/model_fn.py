"""A user's own TPUEstimator `model_fn`, called exactly as TPUEstimator calls it, inside the stages' contracts.

TPUEstimator calls `model_fn(features, labels, mode, params[, config])`: `labels` only if the function takes
them (and a ValueError when the input gives labels to a model_fn without a `labels` argument), `mode` if it
takes it, `config` only if its signature names it, `params` always (with `batch_size`: per shard on a TPU,
global on CPU, absent at export; `use_tpu`; `context` on a TPU), and, from the library, `train_steps` (the
training budget in steps, the same in every mode). `wrap_model_fn` keeps that call and adds what the stages
need around it, without changing what the user's model computes:

- Evaluation: the padded rows (`is_padding`, from `user.inputs`) are removed from every tensor of
  `eval_metrics=(metric_fn, tensors)` before the user's metric_fn sees them. metric_fn runs on the host (on a
  TPU the shards' tensors are concatenated first), so masking along the batch dimension is exact: the metrics
  are those of the real rows, whatever the eval size.
- Prediction: `is_padding` and `example_index` are added to the user's predictions, so the host drops the
  padding and checks the order; the user's own prediction keys are kept as they are.
- Sliced evaluation (`blessing.slices`): the eval input adds `slice_ids` (int32 [B, S]: each row's slice under
  each of S slice specs, assigned on the host, `evaluation.slices`), and the user's metric_fn is called once
  more per slice, in the same pass, with every tensor masked to the slice's real rows (the padding mask's
  mechanism); its metrics come back as "slice:<slice name>/<metric>" (`slice_metric_name`).

A plain `EstimatorSpec` in PREDICT (TPUEstimator takes one on CPU and at export, its TPU prediction loop does not)
becomes the equivalent TPUEstimatorSpec.

The markers are taken out of `features` before the user's model_fn sees them; with a spec's `single_input`, the
model_fn then gets that feature's tensor itself (the eval and predict inputs carry a dict: markers and feature).

Model code that reads absl `FLAGS` (as TPUEstimator samples do inside their model_fn) gets them parsed, with the
hyperparameters of the same names set on them (`apply_flags`), when it is loaded.
"""

from __future__ import annotations

import importlib
import json
import sys
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence

import tensorflow as tf
from absl import flags
from tensorflow.python.util import function_utils
from tensorflow_estimator.python.estimator.model_fn import EstimatorSpec
from tensorflow_estimator.python.estimator.tpu.tpu_estimator import TPUEstimatorSpec

from estimator_lib.config.feature_spec import SLICE_FEATURE
from estimator_lib.config.job import RESERVED_PARAMS
from estimator_lib.model.calling import call_as_tpu_estimator
from estimator_lib.schema import INDEX_FEATURE, PADDING_FEATURE

ModeKeys = tf.estimator.ModeKeys
MARKERS = (PADDING_FEATURE, INDEX_FEATURE, SLICE_FEATURE)
SLICE_PREFIX = "slice:"
SliceNames = Sequence[Sequence[str]]  # per slice spec, its slices' names in id order
# The params the library adds: the training budget in steps (model_fn and input_fn), and the train records'
# files (a user's input_fn).
TRAIN_STEPS = "train_steps"
TRAIN_FILES = "train_files"


class UserCodeError(ValueError):
    """A user's function cannot be loaded or does not keep TPUEstimator's contract; the message says how."""


def load_function(reference: str, what: str, code_dir: Optional[str] = None) -> Callable:
    """The function `reference` ("package.module:function") names, imported with `code_dir` (the user's code
    folder) first on the import path.

    Raises:
      UserCodeError: the reference is malformed, the module cannot be imported, or has no such callable.
    """
    module_name, _, name = reference.partition(":")
    if not module_name or not name:
        raise UserCodeError(f"{what} {reference!r}: expected MODULE:FUNCTION, e.g. my_model.model:model_fn")
    if code_dir and code_dir not in sys.path:
        sys.path.insert(0, code_dir)
    try:
        module = importlib.import_module(module_name)
    except ImportError as e:
        where = f" (looked in --code {code_dir} and the installed packages)" if code_dir else ""
        raise UserCodeError(f"{what} {reference!r}: module {module_name!r} cannot be imported{where}: {e}") from e
    function = getattr(module, name, None)
    if not callable(function):
        raise UserCodeError(f"{what} {reference!r}: {module_name} has no function {name!r}")
    return function


def check_model_fn(model_fn: Callable, reference: str) -> None:
    """TPUEstimator's own check, before anything runs: the model_fn must take `params`."""
    if "params" not in function_utils.fn_args(model_fn):
        raise UserCodeError(
            f"--model-fn {reference}: the function must take a `params` argument (TPUEstimator passes the "
            "per-shard batch size as params['batch_size']): def model_fn(features, labels, mode, params)"
        )


def check_hparams(hparams: Mapping[str, Any], train_steps: Optional[int] = None) -> None:
    """Refuses hyperparameters named like the params TPUEstimator or the library set (`train_steps` may be
    given when it equals the budget `train_steps`)."""
    reserved = sorted(set(hparams) & set(RESERVED_PARAMS))
    if reserved:
        raise UserCodeError(
            f"hyperparameter(s) {reserved}: TPUEstimator sets params['batch_size'] and params['context'] itself; "
            "set the batch sizes with --set training.train_batch_size=... and rename the others"
        )
    if TRAIN_FILES in hparams:
        raise UserCodeError(
            f"hyperparameter {TRAIN_FILES}: the library sets params['{TRAIN_FILES}'] for your input_fn (the train "
            "records' files); rename it"
        )
    given = hparams.get(TRAIN_STEPS, train_steps)
    if train_steps is not None and given != train_steps:
        raise UserCodeError(
            f"hyperparameter {TRAIN_STEPS}={given!r}: params['{TRAIN_STEPS}'] is the training budget, {train_steps} "
            "steps (training.train_steps, else derived from the train records' count); remove the "
            "hyperparameter and set the budget with --set training.train_steps=N"
        )


def _package_flags(module_name: str) -> Dict[str, Any]:
    """{name: absl Flag} of the flags the user's package (the top-level package of `module_name`) defines."""
    package = module_name.split(".")[0]
    by_module = flags.FLAGS.flags_by_module_dict()
    return {
        flag.name: flag
        for module, defined in by_module.items()
        if module == package or module.startswith(package + ".")
        for flag in defined
    }


def _flag_argument(flag: Any, value: Any) -> Any:
    """The argument absl's parser of `flag` takes for a JSON hyperparameter: its JSON text for a text flag (64 ->
    "64"), else the value itself, which the flag's parser checks (an int flag refuses 1.5, a bool flag "yes")."""
    if flag.flag_type() == "string" and not isinstance(value, str):
        return json.dumps(value)
    return value


def apply_flags(hparams: Mapping[str, Any], module_name: str) -> List[str]:
    """Lets model code read absl `FLAGS`: when the user's package (`module_name`'s top-level package) defines
    flags, they are marked parsed (with their defaults) if no program parsed them, and each flag whose name is a
    hyperparameter is set to its value, parsed by the flag's own parser. Returns the names set.

    Raises:
      UserCodeError: a hyperparameter's value is not one its flag takes, or a flag's validator refuses the
        values (names the flag and the hyperparameter).
    """
    own = _package_flags(module_name)
    if not own:
        return []
    if not flags.FLAGS.is_parsed():
        flags.FLAGS.mark_as_parsed()
    names = sorted(set(own) & set(hparams))
    for name in names:
        flag = own[name]
        flag.unparse()  # set, not appended to, when loaded again (a multi flag extends a parsed value)
        try:
            flag.parse(_flag_argument(flag, hparams[name]))
        except (flags.Error, TypeError, ValueError) as e:
            raise UserCodeError(
                f"hyperparameter {name}={hparams[name]!r}: your code's absl flag --{name} ({flag.flag_type()}) does "
                f"not take it: {e}; give a value of its type in --hparams"
            ) from None
    try:
        flags.FLAGS.validate_all_flags()
    except flags.IllegalFlagValueError as e:
        raise UserCodeError(
            f"your code's absl flags are not valid with the hyperparameters {names}: {e}; a flag your code requires "
            "is given as a hyperparameter of its name (--hparams NAME=VALUE)"
        ) from None
    return names


def slice_metric_name(slice_name: str, metric: str) -> str:
    """The name a metric of the user's metric_fn on one slice is reported under."""
    return f"{SLICE_PREFIX}{slice_name}/{metric}"


def _sliced_calls(call: Callable, keep: tf.Tensor, slice_ids: Optional[tf.Tensor], slices: SliceNames) -> Dict:
    """`call(mask)` (the user's metric_fn on the rows of a bool [B] mask) on the real rows, then once per slice on
    the slice's real rows, its metrics renamed by `slice_metric_name`."""
    out = dict(call(keep))
    for s, names in enumerate(slices):
        for j, name in enumerate(names):
            with tf.name_scope(f"slice_{s}_{j}"):
                metrics = call(tf.logical_and(keep, tf.equal(slice_ids[:, s], j)))
            out.update({slice_metric_name(name, k): v for k, v in metrics.items()})
    return out


def _masked_metric_fn(metric_fn: Callable, tensors, slices: SliceNames = ()):
    """(metric_fn', tensors') that drop the padded rows of every tensor before `metric_fn` sees them, and with
    `slices`, call it again per slice (tensors' gets the slice ids after the padding marker)."""
    real = lambda padding: tf.equal(tf.reshape(padding, [-1]), 0.0)  # noqa: E731
    if isinstance(tensors, dict):

        def masked_by_name(**named):
            keep, ids = real(named.pop(PADDING_FEATURE)), named.pop(SLICE_FEATURE, None)
            call = lambda mask: metric_fn(**{k: tf.boolean_mask(v, mask) for k, v in named.items()})  # noqa: E731
            return _sliced_calls(call, keep, ids, slices)

        return masked_by_name, dict(tensors)

    def masked(*given):
        *values, padding, ids = given if slices else (*given, None)
        call = lambda mask: metric_fn(*[tf.boolean_mask(v, mask) for v in values])  # noqa: E731
        return _sliced_calls(call, real(padding), ids, slices)

    return masked, list(tensors)


def _check_metric_tensors(metric_fn: Callable, tensors) -> None:
    if isinstance(tensors, (list, tuple)):
        takes = function_utils.fn_args(metric_fn)
        if len(takes) != len(tensors):
            raise UserCodeError(
                f"eval_metrics: metric_fn takes {len(takes)} argument(s) {list(takes)} but {len(tensors)} tensor(s) "
                "were given; give one tensor per argument (or a dict keyed by the argument names)"
            )


def _rebuilt(spec, **changes):
    """`spec` with `changes`, through its constructor: TPUEstimatorSpec records its host calls when it is built,
    so a namedtuple `_replace` would keep the old ones."""
    return type(spec)(**{**spec._asdict(), **changes})


def _with_masked_metrics(spec, padding: tf.Tensor, slice_ids: Optional[tf.Tensor] = None, slices: SliceNames = ()):
    if isinstance(spec, EstimatorSpec) and not isinstance(spec, TPUEstimatorSpec):
        raise UserCodeError(
            "model_fn returned an EstimatorSpec in EVAL mode: its eval_metric_ops are built over every row, padding "
            "included, and cannot be masked; return TPUEstimatorSpec(mode, loss=..., eval_metrics=(metric_fn, "
            "tensors)), whose metric_fn runs on the host over the real rows"
        )
    if spec.eval_metrics is None:
        return spec
    metric_fn, tensors = spec.eval_metrics
    _check_metric_tensors(metric_fn, tensors)
    slices = slices if slice_ids is not None else ()
    masked_fn, masked_tensors = _masked_metric_fn(metric_fn, tensors, slices)
    markers = {PADDING_FEATURE: padding, **({SLICE_FEATURE: slice_ids} if slices else {})}
    if isinstance(masked_tensors, dict):
        masked_tensors.update(markers)
    else:
        masked_tensors.extend(markers.values())
    return _rebuilt(spec, eval_metrics=(masked_fn, masked_tensors))


def _with_markers(spec, markers: Dict[str, tf.Tensor]):
    predictions = spec.predictions
    if not isinstance(predictions, dict):
        predictions = {"predictions": predictions}
    clash = sorted(set(predictions) & set(markers))
    if clash:
        raise UserCodeError(f"predictions {clash}: these keys are the pipeline's row markers; rename them")
    predictions = {**predictions, **{k: tf.identity(v) for k, v in markers.items()}}
    return _rebuilt(spec, predictions=predictions)


def wrap_model_fn(
    user_model_fn: Callable,
    slices: SliceNames = (),
    single_input: Optional[str] = None,
    params: Optional[Mapping[str, Any]] = None,
) -> Callable:
    """The model_fn TPUEstimator gets: the user's, called as TPUEstimator would, with padded rows masked out of
    the eval metrics and the row markers added to the predictions (see the module docstring); with `slices`
    (each spec's slice names, in the ids' order), the eval metrics also per slice of an input with `slice_ids`.

    `single_input`: a feature the user's model_fn gets as `features` itself when the input gives a dict (the
    spec's eval, predict, serving and training inputs); an input that yields a tensor (the user's own input_fn)
    passes it unchanged. `params`: what the library adds to TPUEstimator's params (`TRAIN_STEPS`)."""
    added = dict(params or {})

    def model_fn(features, labels, mode, params, config):
        markers = {}
        if isinstance(features, dict) and PADDING_FEATURE in features:
            markers = {k: features[k] for k in MARKERS if k in features}
            features = {k: v for k, v in features.items() if k not in MARKERS}
        if single_input is not None and isinstance(features, dict):
            features = features[single_input]
        params = {**params, **added}
        spec = call_as_tpu_estimator(user_model_fn, features, labels, mode, params, config)
        if not isinstance(spec, (TPUEstimatorSpec, EstimatorSpec)):
            raise UserCodeError(f"model_fn returned {type(spec).__name__}; it must return a TPUEstimatorSpec")
        if mode == ModeKeys.EVAL and markers:
            return _with_masked_metrics(spec, markers[PADDING_FEATURE], markers.get(SLICE_FEATURE), slices)
        if mode == ModeKeys.PREDICT:
            spec = _as_tpu_prediction(spec)
            if markers:
                return _with_markers(spec, {k: v for k, v in markers.items() if k != SLICE_FEATURE})
        return spec

    return named_like(model_fn, user_model_fn)


def named_like(wrapper: Callable, function: Callable) -> Callable:
    """`wrapper` with the module and qualified name of the user's `function`, so that messages (strict mode's)
    name the user's code. Only the names: `__wrapped__` would make TPUEstimator read the user's signature."""
    wrapper.__module__ = getattr(function, "__module__", wrapper.__module__)
    wrapper.__qualname__ = getattr(function, "__qualname__", wrapper.__qualname__)
    return wrapper


def _as_tpu_prediction(spec):
    """A plain `EstimatorSpec` returned in PREDICT (as the ResNet sample's model_fn does) as the TPUEstimatorSpec
    that TPUEstimator's TPU prediction loop requires (it refuses an EstimatorSpec there): the same predictions,
    export outputs, prediction hooks and scaffold."""
    if isinstance(spec, TPUEstimatorSpec) or not isinstance(spec, EstimatorSpec):
        return spec
    scaffold = spec.scaffold
    return TPUEstimatorSpec(
        spec.mode,
        predictions=spec.predictions,
        export_outputs=spec.export_outputs,
        prediction_hooks=spec.prediction_hooks,
        scaffold_fn=lambda: scaffold,
    )
