"""`build_model_fn`: one model_fn returning `TPUEstimatorSpec` in TRAIN, EVAL and PREDICT.

Layers of the model (after google-research/bert): the logits come from a model family (pure graph,
`estimator_lib.model.families`); `create_head` turns logits and labels into per-example losses and predictions;
`model_fn` wires the mode-specific parts (optimizer, eval_metrics, export outputs).

What runs where:
  * TPU (or CPU with use_tpu=False): the logits, the loss, the gradients and the optimizer step.
  * Host CPU: `metric_fn` (eval metrics; TensorBoard's training scalars come from Estimator and the progress
    hook, `hooks.ProgressHook`). It receives batch-major tensors of rank >= 1 only, as the TPU outfeed requires.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable, Dict, List, Optional, Tuple

import tensorflow as tf
from tensorflow_estimator.python.estimator.tpu import tpu_estimator

from estimator_lib.config import ConfigError, JobConfig, OptimizerConfig
from estimator_lib.data.example_keys import KEY_BYTES_FEATURE
from estimator_lib.model import metrics as metrics_lib
from estimator_lib.model.families import ModelContext, load_logits_fn
from estimator_lib.model.inputs import PREDICT_BATCHES_PER_RUN, STEPS_PER_RUN
from estimator_lib.model.warm_start import warm_start_scaffold_fn
from estimator_lib.schema import CODES_FEATURE, INDEX_FEATURE, PADDING_FEATURE, Schema, SchemaError

ModeKeys = tf.estimator.ModeKeys
TPUEstimatorSpec = tf.compat.v1.estimator.tpu.TPUEstimatorSpec
ModelFn = Callable[..., TPUEstimatorSpec]
StepFn = Callable[[Dict[str, tf.Tensor], tf.Tensor], Tuple[tf.Tensor, tf.Operation, tf.Tensor]]
# With params[STEPS_PER_RUN] = k > 1 (`estimator.build_estimator`, CPU only), the input_fn feeds [k, B] batches
# and a TRAIN session.run trains k steps; params[TARGET_STEP] is the step the train() call stops at.
TARGET_STEP = "target_step"
# The eval set's real rows per eval step (rows / steps): makes EVAL mode's loss exact under padding (`_eval_loss`).
EVAL_ROWS_PER_STEP = "eval_rows_per_step"

# What the predict input adds for the host only: the predictions carry it whole, the model never sees it.
CARRIED = (KEY_BYTES_FEATURE, CODES_FEATURE)


@dataclasses.dataclass(frozen=True)
class Head:
    """Per-example losses and predictions of one task. All tensors are batch-major.

    Attributes:
      per_example_loss: float32 [B] (standardised units for regression).
      predictions: {"class_ids" int32 [B], "probabilities" float32 [B, K], "logits"} for classification;
        {"predictions" float32 [B]} in the label's units for regression.
    """

    per_example_loss: Optional[tf.Tensor]
    predictions: Dict[str, tf.Tensor]


def create_head(logits: tf.Tensor, labels: Optional[tf.Tensor], schema: Schema) -> Head:
    """Loss and predictions for the schema's label head. logits float32 [B, num_logits]."""
    label = schema.label
    if label.head == "regression":
        value = logits[:, 0] * label.std + label.mean
        loss = None if labels is None else tf.square(logits[:, 0] - (labels - label.mean) / label.std)
        return Head(loss, {"predictions": value})
    if label.head == "binary":
        p = tf.sigmoid(logits[:, 0])
        probabilities = tf.stack([1.0 - p, p], axis=1)
        class_ids = tf.cast(p > 0.5, tf.int32)
        loss = None
        if labels is not None:
            loss = tf.nn.sigmoid_cross_entropy_with_logits(labels=tf.cast(labels, tf.float32), logits=logits[:, 0])
    else:
        probabilities = tf.nn.softmax(logits)
        class_ids = tf.argmax(logits, axis=1, output_type=tf.int32)
        loss = None if labels is None else tf.nn.sparse_softmax_cross_entropy_with_logits(labels=labels, logits=logits)
    return Head(loss, {"class_ids": class_ids, "probabilities": probabilities, "logits": logits})


def learning_rate(opt: OptimizerConfig, train_steps: Optional[int], global_step: tf.Tensor) -> tf.Tensor:
    """The scheduled learning rate (float32 scalar) at `global_step`, with optional linear warm-up.

    A decaying schedule spans `opt.decay_steps`, by default the step budget `train_steps` (which
    `estimator.train` derives from the train split when `training.train_steps` is null: `TrainingConfig.budget`)."""
    decay_steps = opt.decay_steps or train_steps
    if decay_steps is None and opt.schedule != "constant":
        raise ConfigError(
            f"optimizer.schedule={opt.schedule!r} needs the step budget, but training.train_steps is null here; "
            "train through estimator.train (it derives the budget from the train split's rows), or set "
            "training.train_steps or optimizer.decay_steps"
        )
    v1 = tf.compat.v1.train
    schedules = {
        "constant": lambda: tf.constant(opt.learning_rate, tf.float32),
        "exponential_decay": lambda: v1.exponential_decay(opt.learning_rate, global_step, decay_steps, opt.decay_rate),
        "cosine_decay": lambda: v1.cosine_decay(opt.learning_rate, global_step, decay_steps),
        "linear_decay": lambda: v1.polynomial_decay(
            opt.learning_rate, global_step, decay_steps, opt.end_learning_rate, power=1.0
        ),
    }
    lr = tf.cast(schedules[opt.schedule](), tf.float32)
    if opt.warmup_steps:
        warm = tf.cast(global_step + 1, tf.float32) / float(opt.warmup_steps)
        lr = lr * tf.minimum(1.0, warm)
    return lr


def create_optimizer(opt: OptimizerConfig, lr: tf.Tensor, use_tpu: bool) -> tf.compat.v1.train.Optimizer:
    """The optimizer; wrapped in CrossShardOptimizer on a TPU so gradients are summed across replicas."""
    v1 = tf.compat.v1.train
    optimizer = {
        "sgd": lambda: v1.GradientDescentOptimizer(lr),
        "momentum": lambda: v1.MomentumOptimizer(lr, opt.momentum),
        "adam": lambda: v1.AdamOptimizer(lr),
        "adagrad": lambda: v1.AdagradOptimizer(lr),
        "rmsprop": lambda: v1.RMSPropOptimizer(lr),
    }[opt.name]()
    return tf.compat.v1.tpu.CrossShardOptimizer(optimizer) if use_tpu else optimizer


def _train_step(loss: tf.Tensor, config: JobConfig, params: Dict) -> Tuple[tf.Operation, tf.Tensor]:
    """One optimizer step on `loss`: (train_op, the learning rate it used)."""
    opt_config = config.training.optimizer
    global_step = tf.compat.v1.train.get_or_create_global_step()
    lr = learning_rate(opt_config, config.training.train_steps, global_step)
    optimizer = create_optimizer(opt_config, lr, params["use_tpu"])
    grads_and_vars = optimizer.compute_gradients(loss)
    if opt_config.clip_gradient_norm:
        grads, variables = zip(*grads_and_vars)
        grads, _ = tf.clip_by_global_norm(grads, opt_config.clip_gradient_norm)
        grads_and_vars = list(zip(grads, variables))
    return optimizer.apply_gradients(grads_and_vars, global_step=global_step), lr


def _train_spec(loss, train_op, scaffold_fn, hooks) -> TPUEstimatorSpec:
    """The TRAIN spec. No host_call: Estimator writes the `loss` summary itself, and the learning rate and
    steps/s come from the progress hook (`hooks.ProgressHook`), on the host, into the same event file."""
    return TPUEstimatorSpec(ModeKeys.TRAIN, loss=loss, train_op=train_op, scaffold_fn=scaffold_fn, training_hooks=hooks)


class _RoundCheckpointHook(tf.compat.v1.train.CheckpointSaverHook):
    """TensorFlow's checkpoint hook, less the repeats of a resumed `train()` call (each early-stopping round is
    one): a session restored from a checkpoint of its own global step neither saves that checkpoint again nor
    rewrites the graph files (graph.pbtxt, the event file's graph); the first call of a model directory writes
    both, and every later save is TensorFlow's own."""

    def after_create_session(self, session, coord):
        step = int(session.run(self._global_step_tensor))
        latest = tf.train.latest_checkpoint(self._checkpoint_dir)
        if latest is None or not latest.endswith(f"-{step}"):
            super().after_create_session(session, coord)
            return
        self._timer.update_last_triggered_step(step)


def loop_checkpoint_hook(run_config, steps_per_run: int) -> tf.compat.v1.train.CheckpointSaverHook:
    """The estimator's checkpoint hook, told that a session.run trains `steps_per_run` steps (as TPUEstimator
    tells it on a TPU): it then saves at every `save_checkpoints_steps` multiple, not at every other one."""
    hook = _RoundCheckpointHook(
        run_config.model_dir,
        save_steps=run_config.save_checkpoints_steps,
        save_graph_def=run_config.checkpoint_save_graph_def,
    )
    hook._set_steps_per_run(steps_per_run)  # noqa: SLF001 - the setter TPUEstimator uses for its own loop
    return hook


class LoopStopHook(tf.compat.v1.train.SessionRunHook):
    """Stops training after the `session.run` whose loop reached `target_step`.

    Estimator's StopAtStepHook counts one step per run: with k steps per run it asks for one more run, which
    trains no step (the loop stops at the target) but still fetches an element of k batches and runs the hooks.
    """

    def __init__(self, after_loop: tf.Tensor, target_step: int):
        with tf.control_dependencies([after_loop]):
            self._step = tf.compat.v1.train.get_or_create_global_step().read_value()
        self._target_step = target_step

    def before_run(self, run_context):
        return tf.compat.v1.train.SessionRunArgs(self._step)

    def after_run(self, run_context, run_values):
        if run_values.results >= self._target_step:
            run_context.request_stop()


def train_loop(step_fn: StepFn, features: Dict[str, tf.Tensor], labels: tf.Tensor, target_step: int):
    """Runs up to k training steps in one `session.run` on CPU, as `iterations_per_loop` does on a TPU.

    `features` and `labels` hold k batches ([k, B] each, `inputs.STEPS_PER_RUN`); step i trains on batch i.
    The loop stops early at `target_step` (the `max_steps` of this `train()` call), so training never passes
    it. `parallel_iterations=1`: each step reads the variables the step before it wrote.

    Args:
      step_fn: (features [B], labels [B]) -> (loss, train_op, learning rate) of one step.
      target_step: the global step this `train()` call stops at.

    Returns:
      (loss, train_op, learning rate): the last step's loss and rate, and the op that runs the steps.
    """
    k = labels.shape[0]
    global_step = tf.compat.v1.train.get_or_create_global_step()
    steps = tf.minimum(tf.constant(k, tf.int64), tf.constant(target_step, tf.int64) - global_step.read_value())

    packed = _stacked_by_kind(features)

    def body(i, _, __):
        loss, train_op, lr = step_fn(_step_features(packed, i, list(features)), labels[i])
        with tf.control_dependencies([train_op]):
            return i + 1, tf.identity(loss), tf.identity(lr)

    start = (tf.constant(0, tf.int64), tf.constant(0.0), tf.constant(0.0))
    _, loss, lr = tf.compat.v1.while_loop(lambda i, _, __: i < steps, body, start, parallel_iterations=1)
    return loss, tf.group(loss, lr), lr


def _stacked_by_kind(features: Dict[str, tf.Tensor]) -> List[Tuple[List[str], tf.Tensor]]:
    """The [k, B, ...] features stacked into one [k, n, B, ...] tensor per dtype and shape: a loop (training's,
    prediction's) then carries and slices a few tensors per step instead of one per feature (each costs ops in
    every iteration). Stacking and unstacking move values without changing a bit."""
    groups: Dict[Tuple, List[str]] = {}
    for key, tensor in features.items():
        groups.setdefault((tensor.dtype, tuple(tensor.shape[1:])), []).append(key)
    return [(keys, tf.stack([features[k] for k in keys], axis=1)) for keys in groups.values()]


def _step_features(packed: List[Tuple[List[str], tf.Tensor]], i: tf.Tensor, order: List[str]) -> Dict[str, tf.Tensor]:
    """Step i's features {key: [B, ...]}, in the input's key order, from `_stacked_by_kind`'s tensors."""
    columns: Dict[str, tf.Tensor] = {}
    for keys, stacked in packed:
        columns.update(zip(keys, tf.unstack(stacked[i], axis=0)))
    return {key: columns[key] for key in order}


def head_signature(schema: Schema) -> Dict[str, Tuple[tf.DType, tf.TensorShape]]:
    """{prediction key: (dtype, shape of one row)} of `create_head`'s predictions for the schema's label."""
    with tf.Graph().as_default():  # a scratch graph: a handful of ops, not added to the model's graph
        logits = tf.zeros([1, schema.label.num_logits])
        return {k: (v.dtype, v.shape[1:]) for k, v in create_head(logits, None, schema).predictions.items()}


def predict_loop(
    predict_fn: Callable[[Dict[str, tf.Tensor]], Dict[str, tf.Tensor]],
    features: Dict[str, tf.Tensor],
    batch_size: int,
    signature: Dict[str, Tuple[tf.DType, tf.TensorShape]],
) -> Dict[str, tf.Tensor]:
    """Predicts several batches in one `session.run` on CPU, one batch at a time.

    `features` hold m whole batches, [m * batch_size] each (rank 1, as `transform.to_model_features` gives
    them; `inputs.PREDICT_BATCHES_PER_RUN`; m is known at run time only). `predict_fn` (features ->
    predictions, as `signature` describes them) sees each [batch_size] batch in turn (a `while_loop`), so
    every row is predicted by the same kernels on the same batch as with one batch per run: bitwise the same
    values. (Predicting all m batches at once would not
    be: TensorFlow's CPU kernels may round a row differently in a tensor of another size.)

    Returns:
      predict_fn's outputs for the m batches in order: [m * batch_size, ...] each.
    """
    for name in sorted(features):
        if features[name].shape.rank != 1:
            raise ValueError(f"predict_loop takes rank-1 features [rows]; {name!r} has shape {features[name].shape}")
    batches = {k: tf.reshape(v, [-1, batch_size]) for k, v in features.items()}  # [m, batch_size] each
    packed = _stacked_by_kind(batches)
    count = tf.shape(next(iter(batches.values())))[0]
    arrays = {
        k: tf.TensorArray(dtype, size=count, element_shape=tf.TensorShape([batch_size]).concatenate(shape))
        for k, (dtype, shape) in signature.items()
    }

    def body(i, arrays):
        outputs = predict_fn(_step_features(packed, i, list(features)))
        return i + 1, {k: arrays[k].write(i, outputs[k]) for k in arrays}

    _, arrays = tf.compat.v1.while_loop(lambda i, _: i < count, body, (tf.constant(0), arrays), parallel_iterations=1)
    return {k: tf.reshape(a.stack(), [-1, *signature[k][1]]) for k, a in arrays.items()}


def _export_outputs(head: Head, schema: Schema) -> Dict[str, Any]:
    export = tf.estimator.export
    outputs = {"predict": export.PredictOutput(head.predictions)}
    if schema.label.head == "regression":
        outputs["regression"] = export.RegressionOutput(head.predictions["predictions"])
    else:
        outputs["classification"] = export.ClassificationOutput(scores=head.predictions["probabilities"])
    outputs[tf.saved_model.DEFAULT_SERVING_SIGNATURE_DEF_KEY] = outputs["predict"]
    return outputs


def _predicts_in_loop(mode: str, params: Dict) -> bool:
    """Whether this PREDICT call gets several batches per element (`inputs.PREDICT_BATCHES_PER_RUN`, CPU only)."""
    return mode == ModeKeys.PREDICT and params.get(PREDICT_BATCHES_PER_RUN, 1) > 1 and not params["use_tpu"]


def _model_inputs(features: Dict[str, tf.Tensor]) -> Dict[str, tf.Tensor]:
    """The features the model reads: without the row markers, which the predictions copy whole."""
    return {k: v for k, v in features.items() if k not in (PADDING_FEATURE, INDEX_FEATURE)}


def _model_schema(schema: Schema, job: JobConfig) -> Schema:
    try:
        return schema.select(job.model.features)
    except SchemaError as e:
        raise ConfigError(f"model.features: {e}; list original column names from the schema") from e


def _eval_loss(per_example_loss: tf.Tensor, weights: tf.Tensor, params: Dict) -> tf.Tensor:
    """EVAL mode's loss: the one `loss` Estimator reports, as the mean of this tensor over the eval steps.

    With `params[EVAL_ROWS_PER_STEP]` = rows / steps, each step's value is its real rows' summed loss (summed over
    the replicas on a TPU, where TPUEstimator keeps the first shard's loss) divided by that, so the mean over the
    steps is the mean loss of the real rows exactly, padding or not. Without it (a caller that does not know the
    row count), the batch's own weighted mean.
    """
    total = tf.reduce_sum(per_example_loss * weights)
    rows_per_step = params.get(EVAL_ROWS_PER_STEP)
    if rows_per_step is None:
        return total / tf.maximum(tf.reduce_sum(weights), 1.0)
    context = params.get("context")
    if params.get("use_tpu") and context is not None and context.num_replicas > 1:
        total = tf.compat.v1.tpu.cross_replica_sum(total)
    return total / rows_per_step


def build_model_fn(schema: Schema, job: JobConfig, metric_fn: Optional[metrics_lib.MetricFn] = None) -> ModelFn:
    """Returns a TPUEstimator model_fn for `schema` and the job config `job`.

    `metric_fn` is the EVAL mode's host-side metric function; by default the label head's full set
    (`metrics.metric_fn_for`); early stopping passes `metrics.loss_metric_fn`.

    Checks at construction (not at first run) that the model's features exist in the schema and that the
    model family can be loaded.

    The model_fn reads `params['use_tpu']` (set by TPUEstimator) and the run config's model_dir. Features
    are those of `estimator_lib.model.transform.to_model_features`; labels int32 [B] or float32 [B].
    """
    model_schema = _model_schema(schema, job)
    logits_fn = load_logits_fn(job.model)
    metric_fn = metric_fn or metrics_lib.metric_fn_for(schema.label)

    def model_fn(features, labels, mode, params, config):
        """The TPUEstimator model_fn; `config` is the estimator's RunConfig (for model_dir)."""
        if mode == ModeKeys.PREDICT and params.get("use_tpu") and "context" not in params:
            # Export API v2, `serve,tpu` meta graph: TPUEstimator sets use_tpu (without a TPU context) and
            # leaves tpu.rewrite + TPUPartitionedCall to us; the inner call builds the plain PREDICT graph.
            cpu_params = dict(params, use_tpu=False)
            return tpu_estimator.model_fn_inference_on_tpu(model_fn, features, labels, config, cpu_params)
        if mode == ModeKeys.TRAIN:

            def step_fn(step_features, step_labels):
                return train_step(step_features, step_labels, params)

            hooks = []
            if params.get(STEPS_PER_RUN, 1) > 1 and not params["use_tpu"]:
                loss, train_op, _ = train_loop(step_fn, features, labels, params[TARGET_STEP])
                hooks += [loop_checkpoint_hook(config, params[STEPS_PER_RUN]), LoopStopHook(loss, params[TARGET_STEP])]
            else:
                loss, train_op, _ = step_fn(features, labels)
            return _train_spec(loss, train_op, scaffold_fn(), hooks)
        ctx = ModelContext(model_schema, job.model, mode, schema.label.num_logits)
        # The packed example key and the skew check's codes only travel from the input to the predictions; the
        # model never sees them.
        carried = {k: features[k] for k in CARRIED if isinstance(features, dict) and k in features}
        if carried:
            features = {k: v for k, v in features.items() if k not in carried}
        if _predicts_in_loop(mode, params):
            logits, head = None, predict_head(features, ctx, params)
        else:
            logits = logits_fn(features, ctx)
            head = create_head(logits, labels, schema)
        if mode == ModeKeys.PREDICT:
            predictions = dict(head.predictions)
            for passthrough in (PADDING_FEATURE, INDEX_FEATURE):
                if passthrough in features:
                    predictions[passthrough] = tf.identity(features[passthrough])
            predictions.update({k: tf.identity(v) for k, v in carried.items()})
            return TPUEstimatorSpec(mode, predictions=predictions, export_outputs=_export_outputs(head, schema))
        weights = 1.0 - features.get(PADDING_FEATURE, tf.zeros_like(head.per_example_loss))
        eval_metrics = (metric_fn, [labels, logits, head.per_example_loss, weights])
        return TPUEstimatorSpec(
            mode, loss=_eval_loss(head.per_example_loss, weights, params), eval_metrics=eval_metrics
        )

    def predict_head(features, ctx, params) -> Head:
        """The predictions of several batches in one `session.run` (CPU only): see `predict_loop`."""

        def predict_fn(batch):
            return create_head(logits_fn(batch, ctx), None, schema).predictions

        predictions = predict_loop(predict_fn, _model_inputs(features), params["batch_size"], head_signature(schema))
        return Head(None, predictions)

    def scaffold_fn():
        """The warm start's scaffold_fn, or None; call it once the model's variables exist."""
        return (
            warm_start_scaffold_fn(job.training.warm_start_from, model_schema) if job.training.warm_start_from else None
        )

    def train_step(features, labels, params):
        """One training step's graph: (loss, train_op, learning rate). Runs on the TPU, or the CPU."""
        ctx = ModelContext(model_schema, job.model, ModeKeys.TRAIN, schema.label.num_logits)
        head = create_head(logits_fn(features, ctx), labels, schema)
        weights = 1.0 - features.get(PADDING_FEATURE, tf.zeros_like(head.per_example_loss))
        weighted_loss = tf.reduce_sum(head.per_example_loss * weights) / tf.maximum(tf.reduce_sum(weights), 1.0)
        loss = weighted_loss + tf.compat.v1.losses.get_regularization_loss()
        train_op, lr = _train_step(loss, job, params)
        return loss, train_op, lr

    return model_fn
