"""Where the time of one whole training call goes, for ours and for the strongest Keras path, measured.

    python benchmarks/bench_baselines.py --profile [--steps S] [--models tiny large] [--rows R]

Each path runs once per model in a fresh process (TensorFlow and the library imported before the clock), with
`Timeline` timestamps around its phases: library and TensorFlow entry points wrapped in this process (the
library itself is unchanged), session hooks and Keras callbacks. Then, outside the timed call, the
steady-state split, in a third process (without op determinism): the input pipelines alone (steps/s), and one
in-memory batch through a `tf.function` of 100 steps per call, gradients only and with Adam applied (the
optimizer's share).

Ours (`estimator.train_prepared`): building the input_fn (record checks, counts), the estimator, the input
graph (`input_fn`), the model graph (`model_fn`), the scaffold (saver, init ops), the session (`tf.Session`,
restore or init), the checkpoint hook's start (graph.pbtxt, meta graph, the step-0 save), every checkpoint
save, the first `session.run` (its first execution, the cache fill), the steady loop (its `session.run`s
through the hooks, the raw `Session.run`s inside them, the Python between them), and the close (hooks' end,
the last checkpoint).

Keras (`fit`, steps_per_execution=100, the parsed-once cached pipeline): the model built and compiled, the
dataset built, `fit`'s set-up (data adapter, train function) up to its first execution, the first execution
(tracing and the first cache reads), the executions of the first epoch (filling the cache), the rest, and
the end of `fit`.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from typing import Dict, List, Sequence, Tuple

import bench_baselines as base

PROFILE_SPE = 100
SPLIT = "steady-state split"


class Timeline:
    """Spans (name, start, end) of wrapped callables, offsets from `t0`; aggregated per name."""

    def __init__(self):
        self.t0 = time.perf_counter()
        self.spans: List[Tuple[str, float, float]] = []
        self.marks: List[Tuple[str, float]] = []

    def wrap(self, owner, attr: str, name: str) -> None:
        original = getattr(owner, attr)
        spans = self.spans

        def timed(*args, **kwargs):
            start = time.perf_counter()
            try:
                return original(*args, **kwargs)
            finally:
                spans.append((name, start, time.perf_counter()))

        setattr(owner, attr, timed)

    def mark(self, name: str) -> None:
        self.marks.append((name, time.perf_counter()))

    def summary(self) -> Dict[str, Dict[str, float]]:
        """{name: {"first_at": offset of the first start, "first": its seconds, "count": n, "total": seconds}}."""
        out: Dict[str, Dict[str, float]] = {}
        for name, start, end in self.spans:
            entry = out.setdefault(name, {"first_at": start - self.t0, "first": end - start, "count": 0, "total": 0})
            entry["count"] += 1
            entry["total"] += end - start
        return out

    def total_between(self, name: str, start: float, end: float) -> float:
        return sum(e - s for n, s, e in self.spans if n == name and s >= start and e <= end)


def instrument_estimator(timeline: Timeline) -> None:
    """Wraps the entry points of our path and of TF's estimator machinery that the phases map to."""
    import tensorflow as tf
    from tensorflow.python.client import session as session_lib
    from tensorflow.python.training import basic_session_run_hooks, monitored_session, session_manager
    from tensorflow_estimator.python.estimator import estimator as estimator_base

    from estimator_lib import estimator
    from estimator_lib.model import inputs

    targets = [
        (inputs, "check_records", "input_fn builder: record checks"),
        (inputs, "_file_counts", "input_fn builder: per-file counts"),
        (estimator, "build_estimator", "build TPUEstimator"),
        (tf.compat.v1.estimator.tpu.TPUEstimator, "train", "TPUEstimator.train (whole)"),
        (inputs, "cached_training_batches", "graph: input_fn's cached batches (read, parse)"),
        (tf.compat.v1.estimator.tpu.TPUEstimator, "_call_input_fn", "graph: input_fn (TPUEstimator's)"),
        (tf.compat.v1.estimator.tpu.TPUEstimator, "_call_model_fn", "graph: model_fn (TPUEstimator's)"),
        (estimator_base.Estimator, "_call_model_fn", "graph: model_fn (Estimator's, inside)"),
        (monitored_session.Scaffold, "finalize", "graph: scaffold finalize (saver, init ops)"),
        (monitored_session._MonitoredSession, "__init__", "session: MonitoredSession created (all below)"),
        (session_lib.Session, "__init__", "session: tf.Session created"),
        (session_manager.SessionManager, "prepare_session", "session: restore or init variables"),
        (session_manager.SessionManager, "_restore_checkpoint", "session: checkpoint restore"),
        (basic_session_run_hooks.CheckpointSaverHook, "after_create_session", "checkpoint hook start (all below)"),
        (basic_session_run_hooks.training_util, "write_graph", "checkpoint hook: graph.pbtxt"),
        (tf.compat.v1.train.Saver, "save", "checkpoint save"),
        (monitored_session._MonitoredSession, "run", "loop: session.run through hooks"),
        (session_lib.BaseSession, "run", "loop: raw Session.run (hooks' own included)"),
        (monitored_session._MonitoredSession, "close", "close (hooks end, last checkpoint)"),
    ]
    for owner, attr, name in targets:
        timeline.wrap(owner, attr, name)


def profile_ours(data, hidden, steps: int, model_dir: str) -> dict:
    from estimator_lib import estimator

    timeline = Timeline()
    instrument_estimator(timeline)
    start = time.perf_counter()
    estimator.train_prepared(base.job_for(hidden, steps), data.prepared, model_dir)
    end = time.perf_counter()
    runs = [(s, e) for n, s, e in timeline.spans if n == "loop: session.run through hooks"]
    loop_start, loop_end = runs[1][0] if len(runs) > 1 else runs[0][1], runs[-1][1]
    through_hooks = sum(e - s for s, e in runs[1:])
    raw = timeline.total_between("loop: raw Session.run (hooks' own included)", loop_start, loop_end)
    return {
        "call": end - start,
        "phases": timeline.summary(),
        "first session.run": runs[0][1] - runs[0][0],
        "steady loop (after the first run)": {
            "wall": loop_end - loop_start,
            "session.runs": len(runs) - 1,
            "raw Session.run": raw,
            "hooks' Python (through hooks - raw)": through_hooks - raw,
            "Python between runs": loop_end - loop_start - through_hooks,
        },
    }


def profile_keras(data, hidden, steps: int) -> dict:
    import tensorflow as tf

    timeline = Timeline()
    timeline.wrap(tf.keras.Model, "make_train_function", "fit: make_train_function")
    ends: List[float] = []
    callback = tf.keras.callbacks.LambdaCallback(
        on_train_begin=lambda logs: timeline.mark("fit: on_train_begin"),
        on_train_batch_end=lambda batch, logs: ends.append(time.perf_counter()),
    )
    start = time.perf_counter()
    model, _, _ = base.keras_model(data, hidden, steps, PROFILE_SPE)
    built = time.perf_counter()
    dataset = data.cached()
    made = time.perf_counter()
    model.fit(dataset, steps_per_epoch=steps, epochs=1, verbose=0, callbacks=[callback])
    end = time.perf_counter()
    began = dict(timeline.marks)["fit: on_train_begin"]
    fill = max(2, -(-(data.count // base.BATCH) // PROFILE_SPE))  # executions reading the cache's first pass
    return {
        "call": end - start,
        "model built and compiled": built - start,
        "dataset built": made - built,
        "fit set-up (to on_train_begin)": began - made,
        "phases": timeline.summary(),
        "first execution (tracing, first cache reads)": ends[0] - began,
        f"executions 2-{fill} (filling the cache)": ends[fill - 1] - ends[0] if len(ends) >= fill else None,
        "the remaining executions": ends[-1] - ends[min(fill, len(ends)) - 1],
        "end of fit": end - ends[-1],
    }


def steady_split(data, hidden, steps: int) -> dict:
    """Steady-state shares: our input pipeline and the cached one alone (batches/s), and one batch through 100
    steps per tf.function call, gradients only and with Adam applied (steps/s)."""
    import tensorflow as tf

    from estimator_lib.model import inputs

    out = {}
    per_run = inputs.steps_per_run(100, base.BATCH, data.schema)
    ours = inputs.train_input_fn_builder(data.files, data.schema, 42, 10_000, num_examples=data.count)
    params = {"batch_size": base.BATCH, inputs.STEPS_PER_RUN: per_run}
    pipelines = (  # (name, dataset, batches per element, elements read before the clock: the cache filled)
        ("input: ours, steps/s", ours(params), per_run, 1),
        ("input: the cached Keras one, steps/s", data.cached(), 1, data.count // base.BATCH),
    )
    for name, dataset, batches, warm in pipelines:
        iterator = iter(dataset)
        for _ in range(warm):
            next(iterator)
        elements = max(1, steps // batches)
        start = time.perf_counter()
        for _ in range(elements):
            next(iterator)
        out[name] = elements * batches / (time.perf_counter() - start)
    model, adam, loss_fn = base.keras_model(data, hidden, steps, 0)
    x, y = next(iter(data.cached()))
    for apply in (False, True):

        @tf.function
        def run(n, apply=apply):
            for _ in tf.range(n):
                with tf.GradientTape() as tape:
                    loss = loss_fn(y[:, None], model(x, training=True)) + tf.add_n(model.losses)
                grads = tape.gradient(loss, model.trainable_variables)
                if apply:
                    adam.apply_gradients(zip(grads, model.trainable_variables))
                else:
                    loss += tf.add_n([tf.reduce_sum(g) for g in grads]) * 1e-30  # used: not pruned
            return loss

        run(tf.constant(base.LOOP_STEPS)).numpy()
        start = time.perf_counter()
        for _ in range(max(1, steps // base.LOOP_STEPS)):
            run(tf.constant(base.LOOP_STEPS)).numpy()
        name = "compute: forward+backward+Adam (steps/s)" if apply else "compute: forward+backward (steps/s)"
        out[name] = max(1, steps // base.LOOP_STEPS) * base.LOOP_STEPS / (time.perf_counter() - start)
    return out


def child_profile(prepared_dir: str, model: str, steps: int) -> None:
    import tensorflow as tf

    tf.get_logger().setLevel("ERROR")
    from estimator_lib import estimator  # noqa: F401  (imported before the clock)

    data = base.Data(prepared_dir)
    hidden = base.MODELS[model]
    model_dir = tempfile.mkdtemp(prefix="profile-", dir=os.path.dirname(prepared_dir))
    path = os.environ["BENCH_PROFILE_PATH"]
    if path == "ours":
        result = profile_ours(data, hidden, steps, model_dir)
    elif path == SPLIT:
        result = steady_split(data, hidden, steps)
    else:
        result = profile_keras(data, hidden, steps)
    print(json.dumps(result))


def main_profile(prepared_dir: str, models: Sequence[str], steps: int) -> None:
    for model in models:
        for path in ("ours", f"keras-cached-{PROFILE_SPE}", SPLIT):
            cmd = [sys.executable, __file__, prepared_dir, model, str(steps)]
            env = dict(base._env(), BENCH_PROFILE_PATH=path)
            done = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=base.REPO)
            if done.returncode:
                raise RuntimeError(f"profile {path} {model} failed:\n{done.stderr[-3000:]}")
            print(f"\n## {path}, {model} {base.MODELS[model]}, {steps} steps")
            print_profile(json.loads(done.stdout.strip().splitlines()[-1]))
    load = os.getloadavg()
    print(f"\nload average now {load[0]:.1f} / {load[1]:.1f} / {load[2]:.1f}")


def print_profile(result: dict, indent: str = "") -> None:
    for key, value in result.items():
        if key == "phases":
            print(f"{indent}{'phase':<52} {'first at':>9} {'first (s)':>9} {'count':>6} {'total (s)':>9}")
            for name, p in sorted(value.items(), key=lambda item: item[1]["first_at"]):
                print(
                    f"{indent}{name:<52} {p['first_at']:>9.3f} {p['first']:>9.3f} {p['count']:>6d} {p['total']:>9.3f}"
                )
        elif isinstance(value, dict):
            print(f"{indent}{key}:")
            print_profile(value, indent + "  ")
        else:
            print(f"{indent}{key}: {value:.3f}" if isinstance(value, float) else f"{indent}{key}: {value}")


if __name__ == "__main__":
    child_profile(sys.argv[1], sys.argv[2], int(sys.argv[3]))
