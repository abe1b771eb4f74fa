"""TPU-strict mode: for each rule a model or input with the mistake is rejected with its message (a `fails`
finding), and the correct version passes; findings accepted by name do not block; the report and the error
list every finding grouped and counted. Graphs are built, nothing is trained except in the slow export/hook
test. (The patterns of the public TPUEstimator models are in test_patterns.py.)"""

from __future__ import annotations

import copy
import dataclasses

import pytest
import synthetic
import tensorflow as tf

from estimator_lib import estimator as estimator_lib
from estimator_lib import strict
from estimator_lib.config import JobConfig, ModelConfig, TPUSettings, TrainingConfig
from estimator_lib.export import serving
from estimator_lib.model import inputs
from estimator_lib.model.families import ModelContext
from estimator_lib.model.families.linear import linear_logits
from estimator_lib.model.model_fn import build_model_fn, create_head
from estimator_lib.strict.export import EXPORT_CHECKS

ModeKeys = tf.estimator.ModeKeys
TPUEstimatorSpec = tf.compat.v1.estimator.tpu.TPUEstimatorSpec
NUM_ROWS = 40  # 3 eval steps of 16, the last one padded
# Global batch 16 over the 8-core target: 2 rows per replica.
JOB = JobConfig(
    tpu=TPUSettings(num_cores=8, iterations_per_loop=10),
    training=TrainingConfig(
        train_batch_size=16,
        eval_batch_size=16,
        predict_batch_size=16,
        train_steps=2,
        save_checkpoints_steps=10,
    ),
    model=ModelConfig(family="linear", l2=0.001),  # given: these graphs are built without estimator.train
)


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    """{task: (schema, TFRecord pattern)} with NUM_ROWS rows in 2 shards."""
    out = {}
    for task in ("binary", "multiclass", "regression"):
        schema = synthetic.make_schema(task)
        pattern, _ = synthetic.write_dataset(
            str(tmp_path_factory.mktemp(task)), synthetic.make_rows(NUM_ROWS, 7, task), schema
        )
        out[task] = (schema, pattern)
    return out


@pytest.fixture(scope="module")
def binary(data):
    return data["binary"]


def job_with(family: str = "linear", **tpu) -> JobConfig:
    model = dataclasses.replace(JOB.model, family=family)
    return dataclasses.replace(JOB, model=model, tpu=dataclasses.replace(JOB.tpu, **tpu))


def rejected(*args, **kwargs) -> str:
    """Runs check_model expecting a TPUStrictError; returns its violations (all `fails` findings), one per line."""
    with pytest.raises(strict.TPUStrictError) as excinfo:
        strict.check_model(*args, **kwargs)
    report = excinfo.value.report
    assert not report.passed and report.blocking
    assert all(f.severity == strict.FAILS for f in report.blocking)
    assert report.violations == tuple(str(f) for f in report.blocking)
    return "\n".join(report.violations)


def train_input(schema, pattern):
    return inputs.train_input_fn_builder(pattern, schema, seed=1, shuffle_buffer_size=64)


# -- plug-in model families, each with one TPU mistake (loaded as "<this module>:<function>") ------------------
def py_function_logits(features, ctx):
    logits = linear_logits(features, ctx)
    out = tf.py_function(lambda x: x, [logits], tf.float32)
    out.set_shape(logits.shape)  # a static shape, so only XLA can object
    return out


def boolean_mask_logits(features, ctx):
    logits = linear_logits(features, ctx)
    positive = tf.boolean_mask(features["f_x_1"], features["f_x_1"] > 0)  # [?]: as many rows as are positive
    return logits + tf.reduce_sum(positive)


def string_logits(features, ctx):
    logits = linear_logits(features, ctx)
    return tf.strings.to_number(tf.strings.as_string(logits))


def plugin(name: str) -> str:
    return f"{__name__}:{name}"


# -- a hand-written model_fn whose train, host_call and eval_metrics parts can each be swapped ------------------
def cross_shard_train_op(loss):
    optimizer = tf.compat.v1.tpu.CrossShardOptimizer(tf.compat.v1.train.GradientDescentOptimizer(0.1))
    return optimizer.minimize(loss, global_step=tf.compat.v1.train.get_or_create_global_step())


def plain_train_op(loss):
    optimizer = tf.compat.v1.train.GradientDescentOptimizer(0.1)
    return optimizer.minimize(loss, global_step=tf.compat.v1.train.get_or_create_global_step())


def outside_gradients_train_op(loss):
    variables = tf.compat.v1.trainable_variables()
    grads = tf.gradients(loss, variables)  # not scaled by 1/num_replicas as compute_gradients would
    optimizer = tf.compat.v1.tpu.CrossShardOptimizer(tf.compat.v1.train.GradientDescentOptimizer(0.1))
    return optimizer.apply_gradients(zip(grads, variables), global_step=tf.compat.v1.train.get_or_create_global_step())


def host_fn(loss):
    return [tf.reduce_mean(loss)]


def rank1_host_call(loss):
    return host_fn, [tf.reshape(loss, [1])]


def scalar_host_call(loss):
    return host_fn, [loss]


def metric_fn(labels, per_example_loss):
    return {"mean_loss": tf.compat.v1.metrics.mean(per_example_loss)}


def batch_major_eval_metrics(labels, logits, per_example_loss):
    return metric_fn, [labels, per_example_loss]


def not_batch_major_eval_metrics(labels, logits, per_example_loss):
    return metric_fn, [labels, tf.reshape(tf.reduce_mean(per_example_loss), [1])]


def closure_eval_metrics(labels, logits, per_example_loss):
    def metric_fn_with_closure(labels, per_example_loss):
        return {"mean_logit": tf.compat.v1.metrics.mean(logits)}  # `logits` lives in the TPU graph

    return metric_fn_with_closure, [labels, per_example_loss]


def model_fn_builder(
    schema, train_op=cross_shard_train_op, host_call=rank1_host_call, eval_metrics=batch_major_eval_metrics
):
    def model_fn(features, labels, mode, params, config):
        ctx = ModelContext(schema, JOB.model, mode, schema.label.num_logits)
        logits = linear_logits(features, ctx)
        head = create_head(logits, labels, schema)
        if mode == ModeKeys.PREDICT:
            return TPUEstimatorSpec(mode, predictions=head.predictions)
        loss = tf.reduce_mean(head.per_example_loss)
        if mode == ModeKeys.EVAL:
            return TPUEstimatorSpec(mode, loss=loss, eval_metrics=eval_metrics(labels, logits, head.per_example_loss))
        return TPUEstimatorSpec(mode, loss=loss, train_op=train_op(loss), host_call=host_call(loss))

    return model_fn


def passed_checks(schema, mode: str):
    """The checks the well-behaved `model_fn_builder(schema)` passes in one mode."""
    return strict.check_model(JOB, schema, model_fn_builder(schema), modes=(mode,)).checks


# -- the library's own models and pipelines ---------------------------------------------------------------------------
def check_library_model(job, schema, pattern) -> strict.StrictReport:
    """Checks the library's model for `job` in every mode, each with the library's input_fn over `pattern`."""
    return strict.check_model(
        job,
        schema,
        build_model_fn(schema, job),
        train_input_fn=train_input(schema, pattern),
        eval_input_fn=inputs.eval_input_fn_builder(pattern, schema),
        predict_input_fn=inputs.predict_input_fn_builder(pattern, schema),
    )


@pytest.mark.parametrize("task", ["binary", "multiclass", "regression"])
@pytest.mark.parametrize("family", ["linear", "dnn"])
def test_library_models_and_default_pipeline_pass(data, task, family):
    schema, pattern = data[task]
    job = dataclasses.replace(JOB, model=ModelConfig(family=family, dropout=0.1, l2=0.01))
    report = check_library_model(job, schema, pattern)
    for mode in ("train", "eval", "infer"):
        assert f"{mode}: xla" in report.checks and f"{mode}: static-shape (input)" in report.checks
    assert {"config", "train: cross-shard", "eval: finite-input", "eval: host-fn (eval_metrics)"} <= set(report.checks)


def test_multi_host_target_gets_its_share_of_the_files(binary):
    schema, pattern = binary
    job = job_with(num_cores=16)  # 2 hosts of 8 cores: each host reads 1 of the 2 shards
    report = check_library_model(job, schema, pattern)
    assert {"eval: finite-input", "infer: finite-input", "eval: xla", "infer: xla"} <= set(report.checks)
    assert {"train: static-shape (input)", "train: xla"} <= set(report.checks)


# -- rule: config -----------------------------------------------------------------------------------------------------
def test_batch_not_divisible_by_tpu_replicas_is_rejected_though_valid_on_cpu(binary):
    schema, _ = binary
    job = dataclasses.replace(JOB, training=dataclasses.replace(JOB.training, train_batch_size=12))
    assert not job.tpu.use_tpu  # accepted for the local CPU run
    message = rejected(job, schema, build_model_fn(schema, job))
    assert message == (
        "[config] training.train_batch_size=12 is not divisible by tpu.num_cores=8 (the TPU replicas): "
        "use a multiple of 8, e.g. 8"
    )
    assert strict.check_model(JOB, schema, build_model_fn(schema, JOB), modes=()).checks == ("config",)


def test_checkpoint_cadence_not_a_multiple_of_iterations_per_loop_is_rejected(binary):
    schema, _ = binary
    with pytest.raises(ValueError, match="save_checkpoints_steps=15 is not a multiple of tpu.iterations_per_loop=10"):
        JOB.with_overrides({"training.save_checkpoints_steps": 15})
    job, training = copy.copy(JOB), copy.copy(JOB.training)  # a config that slipped past validation
    object.__setattr__(training, "save_checkpoints_steps", 15)
    object.__setattr__(job, "training", training)
    message = rejected(job, schema, build_model_fn(schema, JOB), modes=())
    assert message.startswith(
        "[config] training.save_checkpoints_steps=15 is not a multiple of tpu.iterations_per_loop=10: checkpoints "
        "are only written between TPU loops; use a multiple of 10, e.g. 20"
    )


# -- rule: static shapes ----------------------------------------------------------------------------------------------
@pytest.mark.parametrize("mode", ["train", "eval", "infer"])
def test_dynamic_batch_dimension_in_input_is_rejected(binary, mode):
    schema, pattern = binary
    good = {
        "train": train_input(schema, pattern),
        "eval": inputs.eval_input_fn_builder(pattern, schema),
        "infer": inputs.predict_input_fn_builder(pattern, schema),
    }[mode]

    def dynamic_input_fn(params):  # no drop_remainder: the last batch may be short
        return good(params).unbatch().batch(params["batch_size"])

    name = {"train": "train_input_fn", "eval": "eval_input_fn", "infer": "predict_input_fn"}[mode]
    message = rejected(
        JOB, schema, build_model_fn(schema, JOB), **{name: dynamic_input_fn}, eval_steps=3, modes=(mode,)
    )
    assert (
        f"[static-shape] {mode} input: feature 'f_x_1' has shape (None,), expected static [2, ...]: the TPU compiles "
        "one fixed shape and each replica gets 2 rows (batch 16 / 8 replicas). Fix: batch with drop_remainder=True"
    ) in message
    strict.check_model(JOB, schema, build_model_fn(schema, JOB), **{name: good}, modes=(mode,))


def test_dynamic_shape_inside_the_model_is_rejected(binary):
    schema, _ = binary
    job = job_with(plugin("boolean_mask_logits"))
    message = rejected(job, schema, build_model_fn(schema, job), modes=("infer",))
    assert "[static-shape] infer model_fn estimator_lib.model.model_fn.build_model_fn.<locals>.model_fn: op " in message
    assert "boolean_mask" in message and "of dynamic shape (None,): XLA compiles static shapes only" in message
    strict.check_model(JOB, schema, build_model_fn(schema, JOB), modes=("infer",))


# -- rule: dtypes -----------------------------------------------------------------------------------------------------
def test_string_features_are_rejected_and_int64_ones_get_a_note(binary):
    schema, pattern = binary
    good = train_input(schema, pattern)

    def unconverted_input_fn(params):
        def add_raw(features, label):
            features = dict(features, f_colour=tf.cast(features["f_colour"], tf.int64))
            return dict(features, raw_colour=tf.strings.as_string(features["f_colour"])), label

        return good(params).map(add_raw)

    message = rejected(JOB, schema, build_model_fn(schema, JOB), train_input_fn=unconverted_input_fn, modes=("train",))
    assert message == (
        "[dtype] train input: feature 'raw_colour' is string, which cannot enter a TPU computation. Fix: convert it "
        "on the host in the input pipeline (a vocabulary lookup or hash to int32 ids, as "
        "estimator_lib.model.transform.categorical_ids does) so only numbers reach the TPU"
    )

    def int64_input_fn(params):
        return good(params).map(lambda f, y: (dict(f, f_colour=tf.cast(f["f_colour"], tf.int64)), y))

    model_fn = build_model_fn(schema, JOB)
    report = strict.check_model(JOB, schema, model_fn, train_input_fn=int64_input_fn, modes=("train",))
    (note,) = report.notes
    assert (note.name, note.severity) == ("dtype:f_colour", strict.NOTE)
    assert note.message.startswith(
        "train input: feature 'f_colour' is int64: a TPU emulates 64-bit integers (slowly) and a few ops refuse "
        "them. Advice: cast it to int32 in the input pipeline (tf.cast(x, tf.int32)"
    )
    assert strict.check_model(JOB, schema, model_fn, train_input_fn=good, modes=("train",)).findings == ()


def test_string_ops_inside_the_model_are_rejected(binary):
    schema, _ = binary
    job = job_with(plugin("string_logits"))  # no gradient either: shown in predict, where CPU runs it fine
    message = rejected(job, schema, build_model_fn(schema, job), modes=("infer",))
    assert (
        "[dtype] infer model_fn estimator_lib.model.model_fn.build_model_fn.<locals>.model_fn: "
        "op 'AsString' (AsString) makes string tensor 'AsString:0' inside the TPU computation. "
        "Fix: do string work on the host"
    ) in message
    assert "[xla] infer step of model_fn" in message and "XLA cannot compile op AsString" in message


# -- rule: eval/predict input must last the fixed steps ---------------------------------------------------------------
def test_eval_input_that_can_run_out_is_rejected(binary):
    schema, pattern = binary
    good = inputs.eval_input_fn_builder(pattern, schema)
    model_fn, steps = build_model_fn(schema, JOB), inputs.eval_steps(NUM_ROWS, 16)
    checks = dict(eval_steps=steps, modes=("eval",))

    message = rejected(JOB, schema, model_fn, eval_input_fn=lambda p: good(p).repeat(), **checks)
    assert (
        "[finite-input] eval input_fn " in message
        and " repeats forever: eval must read every row exactly once" in message
    )
    message = rejected(JOB, schema, model_fn, eval_input_fn=lambda p: good(p).filter(lambda f, y: True), **checks)
    assert "has unknown cardinality, so nothing proves it lasts the fixed eval steps" in message
    message = rejected(JOB, schema, model_fn, eval_input_fn=good, eval_steps=steps + 1, modes=("eval",))
    assert (
        "yields 24 batch(es) per host but eval needs 32 (4 step(s) x 8 replicas per host): it runs out before the "
        "fixed step count"
    ) in message
    assert "eval: finite-input" in strict.check_model(JOB, schema, model_fn, eval_input_fn=good, **checks).checks


def test_predict_input_of_unknown_length_is_rejected(binary):
    schema, pattern = binary
    good = inputs.predict_input_fn_builder(pattern, schema)
    model_fn = build_model_fn(schema, JOB)
    message = rejected(
        JOB, schema, model_fn, predict_input_fn=lambda p: good(p).filter(lambda f: True), modes=("infer",)
    )
    assert "[finite-input] infer input_fn " in message and "has unknown cardinality" in message
    assert (
        "infer: finite-input"
        in strict.check_model(JOB, schema, model_fn, predict_input_fn=good, modes=("infer",)).checks
    )


# -- rule: host_call / eval_metrics tensors ---------------------------------------------------------------------------
def test_scalar_host_call_tensor_is_rejected(binary):
    schema, _ = binary
    message = rejected(JOB, schema, model_fn_builder(schema, host_call=scalar_host_call), modes=("train",))
    assert message.startswith(
        "[outfeed] train host_call argument 'loss' (tensor 'Mean:0', shape ()) is a scalar: all tensors outfed from a "
        "TPU must keep a batch dimension (they are concatenated across replicas along axis 0). Fix: pass a rank >= 1 "
        "tensor, e.g. tf.reshape(x, [1])"
    )
    assert "train: outfeed (host_call)" in passed_checks(schema, "train")


def test_eval_metrics_tensor_not_batch_major_is_rejected(binary):
    schema, _ = binary
    message = rejected(
        JOB, schema, model_fn_builder(schema, eval_metrics=not_batch_major_eval_metrics), modes=("eval",)
    )
    assert message.startswith(
        "[outfeed] eval eval_metrics argument 'per_example_loss' (tensor 'Reshape:0', shape (1,)) is not batch-major: "
        "its first dimension must be the replica batch 2"
    )
    assert "eval: outfeed (eval_metrics)" in passed_checks(schema, "eval")


def test_metric_fn_closing_over_model_tensors_is_rejected(binary):
    schema, _ = binary
    message = rejected(JOB, schema, model_fn_builder(schema, eval_metrics=closure_eval_metrics), modes=("eval",))
    assert message == (
        "[host-fn] eval eval_metrics function closure_eval_metrics.<locals>.metric_fn_with_closure closes over "
        "model-graph tensor 'linear/AddN:0' (as 'logits'): it runs on the host CPU, outside the TPU computation, and "
        "cannot reach TPU tensors. Fix: add the tensor to eval_metrics[1] and take it as an argument of "
        "closure_eval_metrics.<locals>.metric_fn_with_closure"
    )


def test_metric_fn_reaching_model_tensors_indirectly_fails_on_fresh_tensors(binary):
    schema, _ = binary
    holder = {}

    class MetricFn:  # no closure to inspect: found by building it in a graph of its own
        def __call__(self, labels, per_example_loss):
            return {"mean_logit": tf.compat.v1.metrics.mean(holder["logits"])}

    def eval_metrics(labels, logits, per_example_loss):
        holder["logits"] = logits
        return MetricFn(), [labels, per_example_loss]

    message = rejected(JOB, schema, model_fn_builder(schema, eval_metrics=eval_metrics), modes=("eval",))
    assert "[host-fn] eval eval_metrics function MetricFn fails on the host when given fresh tensors" in message


# -- rule: CrossShardOptimizer ----------------------------------------------------------------------------------------
def test_training_without_cross_shard_optimizer_is_rejected(binary):
    schema, _ = binary
    message = rejected(JOB, schema, model_fn_builder(schema, train_op=plain_train_op), modes=("train",))
    assert (
        "[cross-shard] train model_fn test_strict.model_fn_builder.<locals>.model_fn: variable "
        "'linear/categorical_weights/f_colour' is updated by"
    ) in message.replace(f"{__name__}.", "test_strict.")
    assert "with a gradient not summed across TPU replicas (no CrossReplicaSum)" in message
    assert "wrap the optimizer in tf.compat.v1.tpu.CrossShardOptimizer" in message
    assert "train: cross-shard" in passed_checks(schema, "train")


def test_gradients_computed_outside_cross_shard_optimizer_differ_and_do_not_block(binary):
    schema, _ = binary
    report = strict.check_model(
        JOB, schema, model_fn_builder(schema, train_op=outside_gradients_train_op), modes=("train",)
    )
    (finding,) = report.findings
    assert report.passed and report.differs == (finding,) and report.violations == ()
    assert (finding.name, finding.severity) == ("cross-shard:outside_gradients_train_op", strict.DIFFERS)
    assert "CrossReplicaSum" not in finding.message  # the sum is there; the scaling is not
    assert "on 8 replicas the update applies the SUM of the shards' gradients, not their mean" in finding.message


# -- rule: XLA --------------------------------------------------------------------------------------------------------
def test_op_xla_cannot_compile_is_rejected_with_where_it_was_created(binary):
    schema, _ = binary
    job = job_with(plugin("py_function_logits"))
    message = rejected(job, schema, build_model_fn(schema, job), modes=("train", "infer"))
    assert (
        "[xla] train step of model_fn estimator_lib.model.model_fn.build_model_fn.<locals>.model_fn: "
        "XLA cannot compile op EagerPyFunc (node 'EagerPyFunc'), created at test_strict.py:"
    ) in message
    assert "(in py_function_logits); the TPU compiler would refuse it too." in message
    assert "[xla] infer step of model_fn" in message
    assert "[static-shape]" not in message and "[dtype]" not in message
    strict.check_model(JOB, schema, build_model_fn(schema, JOB), modes=("train", "infer"))


# -- accepting findings by name; the report and the error -------------------------------------------------------
def test_a_failure_accepted_by_name_does_not_block_and_stays_in_the_report(binary):
    schema, _ = binary
    job = job_with(plugin("py_function_logits"))
    model_fn = build_model_fn(schema, job)
    report = strict.check_model(job, schema, model_fn, modes=("train", "infer"), accept=["xla:EagerPy*"])
    assert report.passed and report.blocking == ()
    assert [(f.name, f.severity) for f in report.accepted] == [("xla:EagerPyFunc", strict.FAILS)] * 2
    assert "accepted by tpu.strict_accept (not blocking), 2:" in report.describe()
    message = rejected(job, schema, model_fn, modes=("infer",), accept=["xla:Other", "static-shape:*"])
    assert message.startswith("[xla] infer step of model_fn")


def test_the_error_lists_every_finding_grouped_by_rule_and_counted():
    found = (
        strict.Finding("static-shape", "a", strict.FAILS, "a is dynamic. Fix: a"),
        strict.Finding("cross-shard", "f", strict.DIFFERS, "f sums. Fix: f"),
        strict.Finding("static-shape", "b", strict.FAILS, "b is dynamic. Fix: b"),
        strict.Finding("xla", "c", strict.FAILS, "c fails. Fix: c"),
        strict.Finding("dtype", "d", strict.NOTE, "d is int64. Advice: d"),
    )
    report = strict.StrictReport.of(["config", "train: xla"], found, accept=["xla:*"])
    with pytest.raises(strict.TPUStrictError) as excinfo:
        report.raise_if_failed()
    assert str(excinfo.value).splitlines() == [
        "TPU-strict mode found 2 problem(s) a TPU would fail on:",
        "  [static-shape] 2:",
        "    1. a is dynamic. Fix: a (name: static-shape:a)",
        "    2. b is dynamic. Fix: b (name: static-shape:b)",
        "  accepted by tpu.strict_accept (not blocking), 1:",
        "    [xla] 1:",
        "      3. c fails. Fix: c (accepted by 'xla:*')",
        "  differs: runs on a TPU but computes something else than on the CPU (not blocking), 1:",
        "    [cross-shard] 1:",
        "      4. f sums. Fix: f (name: cross-shard:f)",
        "  notes, 1:",
        "    [dtype] 1:",
        "      5. d is int64. Advice: d (name: dtype:d)",
        "  A finding that is wrong for this model can be accepted by its name, tpu.strict_accept=['RULE:WHERE'] "
        "(shell wildcards, e.g. --set tpu.strict_accept=cross-shard:*); switch strict mode off (tpu.strict=false) "
        "only if you will never run this on a TPU",
    ]
    assert report.violations == ("[static-shape] a is dynamic. Fix: a", "[static-shape] b is dynamic. Fix: b")
    assert report.describe().splitlines()[:2] == [
        "TPU-strict mode: 2 check(s), 5 finding(s) (2 fails, 1 accepted, 1 differs, 1 notes)",
        "  fails (blocking), 2:",
    ]
    clean = strict.StrictReport.of(["config"], [])
    assert clean.passed and clean.describe() == (
        "TPU-strict mode: 1 check(s), 0 finding(s) (0 fails, 0 accepted, 0 differs, 0 notes)"
    )
    with pytest.raises(ValueError, match="Finding severity 'warning': expected one of"):
        strict.Finding("x", "y", "warning", "z")


def test_the_report_is_logged(binary, caplog):
    schema, _ = binary
    model_fn = model_fn_builder(schema, train_op=outside_gradients_train_op)
    with caplog.at_level("INFO", logger="estimator_lib.strict.checks"):
        strict.check_model(JOB, schema, model_fn, modes=("train",))
    (record,) = caplog.records
    assert record.levelname == "WARNING" and record.getMessage().startswith(
        "TPU-strict mode: 8 check(s), 1 finding(s) (0 fails, 0 accepted, 1 differs, 0 notes)\n  differs: runs on a TPU"
    )


# -- rule: export -----------------------------------------------------------------------------------------------------
def test_export_without_tpu_meta_graph_is_rejected(tmp_path):
    module = tf.Module()
    module.f = tf.function(lambda x: {"y": x * 2.0}, input_signature=[tf.TensorSpec([None], tf.float32)])
    tf.saved_model.save(module, str(tmp_path), signatures=module.f)
    with pytest.raises(strict.TPUStrictError, match=r"has no meta graph tagged 'serve,tpu' \(found \['serve'\]\)"):
        strict.check_export(str(tmp_path))


def test_tpu_meta_graph_without_tpu_partitioned_call_is_rejected(tmp_path):
    export_dir = str(tmp_path / "export")
    with tf.Graph().as_default() as graph, tf.compat.v1.Session(graph=graph) as session:
        x = tf.compat.v1.placeholder(tf.float32, [None], name="x")
        signature = tf.compat.v1.saved_model.predict_signature_def({"x": x}, {"y": x * 2.0})
        builder = tf.compat.v1.saved_model.Builder(export_dir)
        builder.add_meta_graph_and_variables(
            session, ["serve", "tpu"], signature_def_map={"serving_default": signature}
        )
        builder.save()
    with pytest.raises(strict.TPUStrictError) as excinfo:
        strict.check_export(export_dir)
    assert "the 'serve,tpu' meta graph of" in str(excinfo.value)
    assert "has no TPUPartitionedCall op (neither in its graph nor in its function library)" in str(excinfo.value)


@pytest.mark.slow
@pytest.mark.parametrize("api_version", [1, 2])
def test_library_export_has_tpu_partitioned_call_after_strict_training(binary, tmp_path, api_version):
    schema, pattern = binary
    job = dataclasses.replace(
        JOB,
        tpu=dataclasses.replace(JOB.tpu, strict=True),
        training=dataclasses.replace(JOB.training, train_steps=1),
    )
    model_dir = str(tmp_path / "model")
    estimator_lib.train(job, schema, pattern, model_dir)  # checked by strict mode before it trains
    est = estimator_lib.build_estimator(job, schema, model_dir, export_saved_model_api_version=api_version)
    export_dir = est.export_saved_model(str(tmp_path / "export"), serving.serving_input_receiver_fn_builder(schema))
    report = strict.check_export(export_dir.decode())
    assert report.checks == EXPORT_CHECKS


# -- the train/evaluate hook ------------------------------------------------------------------------------------------
def test_strict_train_rejects_before_training_and_can_be_switched_off(binary, tmp_path):
    schema, pattern = binary
    job = job_with(plugin("py_function_logits"), strict=True)
    with pytest.raises(
        strict.TPUStrictError, match=r"\[xla\] 3:\s+1\. train step .* XLA cannot compile op EagerPyFunc"
    ):
        estimator_lib.train(job, schema, pattern, str(tmp_path / "strict"))
    assert tf.train.latest_checkpoint(str(tmp_path / "strict")) is None  # failed before any TPU time is spent


@pytest.mark.slow
def test_strict_off_trains_and_evaluates_a_model_a_tpu_would_refuse(binary, tmp_path):
    schema, pattern = binary
    job = job_with(plugin("py_function_logits"), strict=False)
    job = dataclasses.replace(job, training=dataclasses.replace(job.training, train_steps=1))
    model_dir = str(tmp_path / "lenient")
    assert estimator_lib.train(job, schema, pattern, model_dir).global_step == 1
    strict_job = dataclasses.replace(job, tpu=dataclasses.replace(job.tpu, strict=True))
    with pytest.raises(strict.TPUStrictError, match=r"\[xla\] 1:\s+1\. eval step"):
        estimator_lib.evaluate(strict_job, schema, pattern, model_dir)
    assert tf.train.latest_checkpoint(model_dir).endswith("model.ckpt-1")  # the lenient run's checkpoint stays
