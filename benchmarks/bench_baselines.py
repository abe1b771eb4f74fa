"""Training against its strongest baselines: every variant in a fresh process, interleaved, median of rounds.

    python benchmarks/bench_baselines.py [--rounds N] [--steps S] [--rows R] [--models tiny large]
                                         [--kinds KIND ...] [--workdir DIR]
    python benchmarks/bench_baselines.py --profile [--steps S] [--models tiny]   # where the whole call goes

The data: R rows (default 100,000) of 30 normal floats and a yes/no label (`bench_prepare.generate`), prepared
once by `prepare` (no validation split, 1% eval) before any timing. The job: S steps (default 3,000) of batch
256, Adam with the library's cosine decay, L2 on every kernel, inputs standardised with the schema's statistics,
a DNN (64, 32) ("tiny") or (512, 256, 128) ("large"). Every variant trains that same model.

The variants (KINDS):
  ours                  `estimator.train_prepared` (what the train stage calls), the default JobConfig
                        (`training.deterministic=true`: op determinism, whose kernels cost time).
  ours-nodet            the same with `training.deterministic=false`.
  tpuestimator          a plain `TPUEstimator(use_tpu=False)` with our model_fn (`model_fn.build_model_fn`), the
                        same RunConfig seed and checkpoint cadence, one step per `session.run`, and the input_fn
                        a user writes (TFRecordDataset, shuffle, repeat, batch, parse after batching, prefetch).
  keras-stream-N        Keras `fit` with `steps_per_execution=N` (N in 1, 32, 100) over a streaming tf.data
                        pipeline: read, shuffle 10k rows, batch, parse, prefetch, every epoch.
                        keras-stream-1 is the old table's "Keras fit, tf.data" column.
  keras-cached-N        the same over a parsed-once pipeline: read, batch, parse, `.cache()`, then each epoch
                        shuffles the cached batches (64 at a time; rows stay in their batch) and prefetches.
  tf-loop               a hand-written loop: the cached pipeline, a `tf.function` running 100 steps per call
                        (`tf.range` over the iterator, GradientTape, Adam).
  keras-numpy           Keras `fit` on the rows as in-memory NumPy arrays (the old table's second column).

Timing: each variant runs in its own process. "call" is the wall time of the whole training call a user waits
for, from before the model/estimator/dataset is built to the return of `fit`/`train` (TensorFlow imported and
the preparation's manifest read before the clock; process start-up and imports are reported apart, as
"process"). "steady" is steps/s after the first `session.run`/`fit` execution/loop call (a session hook: the
same hook on ours and on the plain TPUEstimator; a Keras callback; the loop's own clock). The kinds rotate
their order each round. The table names, per model, the fastest variant (by median call time, and by median
steady rate) and the ratio ours over it, per round, median [min-max]; above 1 we are faster.

`--profile` runs ours and the strongest Keras path (keras-cached-100) once each, in fresh processes, with
timestamps around their phases (`Timeline`: wrapped library entry points, session hooks, Keras callbacks)
and a steady-state split (the input pipeline alone, the step without and with the optimizer, in a
`tf.function` on one in-memory batch).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from typing import Callable, Dict, List, Sequence

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
sys.path.insert(0, HERE)
sys.path.insert(0, REPO)

import bench_prepare  # noqa: E402  (generate)

BATCH = 256
MODELS = {"tiny": (64, 32), "large": (512, 256, 128)}
SPE = (1, 32, 100)
KINDS = (
    ("ours", "ours-nodet", "tpuestimator")
    + tuple(f"keras-stream-{n}" for n in SPE)
    + tuple(f"keras-cached-{n}" for n in SPE)
    + ("tf-loop", "keras-numpy")
)
OURS = ("ours", "ours-nodet")
LOOP_STEPS = 100  # steps per tf.function call of the hand-written loop
CACHED_SHUFFLE_BATCHES = 64


# -- the shared model and data ---------------------------------------------------------------------------
def make_data(root: str, rows: int) -> str:
    """Generates and prepares the CSV once; returns the preparation's directory."""
    from estimator_lib.config import PrepareConfig
    from estimator_lib.data.prepare import prepare

    prepared = os.path.join(root, f"prepared-{rows}")
    if not os.path.exists(prepared):
        csv = os.path.join(root, f"floats-{rows}.csv")
        bench_prepare.generate(csv, rows, categorical=0)
        prepare(PrepareConfig(data=(csv,), label="label", eval_fraction=0.01, valid_fraction=0.0), prepared)
    return prepared


def job_for(hidden: Sequence[int], steps: int, deterministic: bool = True):
    from estimator_lib.config import JobConfig, ModelConfig, TrainingConfig

    training = TrainingConfig(
        train_batch_size=BATCH, train_steps=steps, save_checkpoints_steps=10_000, deterministic=deterministic
    )
    return JobConfig(model=ModelConfig(family="dnn", hidden_units=tuple(hidden)), training=training)


class Data:
    """The prepared split as the baselines read it: its files, the parse of a batch into (x [B, 30], y [B])."""

    def __init__(self, prepared_dir: str):
        from estimator_lib.data.prepare import load_prepared
        from estimator_lib.model import inputs, transform

        self.prepared = load_prepared(prepared_dir)
        self.schema = self.prepared.schema
        self.files = inputs.resolve_files(self.prepared.files("train"))
        self.count = self.prepared.counts["train"]
        self.spec = transform.parse_spec(self.schema)
        self.keys = [f.key for f in self.schema.features]

    def parse(self, serialized):
        import tensorflow as tf

        parsed = tf.io.parse_example(serialized, self.spec)
        return tf.stack([parsed[k] for k in self.keys], axis=1), tf.cast(parsed["label"], tf.float32)

    def streaming(self):
        import tensorflow as tf

        dataset = tf.data.TFRecordDataset(self.files, num_parallel_reads=tf.data.AUTOTUNE).shuffle(10_000).repeat()
        dataset = dataset.batch(BATCH, drop_remainder=True).map(self.parse, tf.data.AUTOTUNE)
        return dataset.prefetch(tf.data.AUTOTUNE)

    def cached(self):
        import tensorflow as tf

        dataset = tf.data.TFRecordDataset(self.files, num_parallel_reads=tf.data.AUTOTUNE)
        dataset = dataset.batch(BATCH, drop_remainder=True).map(self.parse, tf.data.AUTOTUNE).cache()
        return dataset.shuffle(CACHED_SHUFFLE_BATCHES).repeat().prefetch(tf.data.AUTOTUNE)

    def arrays(self):
        import tensorflow as tf

        whole = next(iter(tf.data.TFRecordDataset(self.files).batch(self.count).map(self.parse)))
        return whole[0].numpy(), whole[1].numpy()


def keras_model(data: Data, hidden: Sequence[int], steps: int, steps_per_execution: int = 1):
    """The job's model in Keras: standardised inputs, ReLU layers, L2 on every kernel (`ModelConfig.l2`), Adam
    with the library's cosine decay over the steps; compiled unless steps_per_execution is 0 (the loop's)."""
    import tensorflow as tf

    job = job_for(hidden, steps)
    numeric = {f.key: f for f in data.schema.numeric}
    mean = [numeric[k].mean for k in data.keys]
    variance = [numeric[k].std ** 2 for k in data.keys]
    l2 = tf.keras.regularizers.L2(job.model.l2)
    layers = [tf.keras.Input((len(data.keys),)), tf.keras.layers.Normalization(mean=mean, variance=variance)]
    layers += [tf.keras.layers.Dense(h, "relu", kernel_regularizer=l2) for h in hidden]
    model = tf.keras.Sequential(layers + [tf.keras.layers.Dense(1, kernel_regularizer=l2)])
    optimizer = job.training.optimizer
    if (optimizer.name, optimizer.schedule) != ("adam", "cosine_decay"):
        raise ValueError(f"the Keras baselines write Adam with a cosine decay; update them for {optimizer}")
    adam = tf.keras.optimizers.Adam(tf.keras.optimizers.schedules.CosineDecay(optimizer.learning_rate, steps))
    loss = tf.keras.losses.BinaryCrossentropy(from_logits=True)
    if steps_per_execution:
        model.compile(adam, loss, steps_per_execution=steps_per_execution)
    return model, adam, loss


# -- the variants (each in its own process) ----------------------------------------------------------------
def step_rate_hook():
    """A session hook: global steps per second after the first `session.run` (start-up and warm-up excluded)."""
    import tensorflow as tf

    class StepRate(tf.compat.v1.train.SessionRunHook):
        def begin(self):
            self.step, self.first, self.last = tf.compat.v1.train.get_global_step(), None, None
            self.steps = 0

        def after_run(self, run_context, run_values):
            if self.first is None:
                self.first = (run_context.session.run(self.step), time.perf_counter())
            self.last = time.perf_counter()

        def end(self, session):
            self.steps = session.run(self.step) - self.first[0]

        def rate(self) -> float:
            return self.steps / (self.last - self.first[1]) if self.last > self.first[1] else float("nan")

    return StepRate()


def _with_hook(hook) -> None:
    """Adds `hook` to every `TPUEstimator.train` call of this process (ours builds its estimator inside)."""
    import tensorflow as tf

    cls = tf.compat.v1.estimator.tpu.TPUEstimator
    train = cls.train

    def train_with_hook(self, input_fn, hooks=None, **kwargs):
        return train(self, input_fn, hooks=list(hooks or []) + [hook], **kwargs)

    cls.train = train_with_hook


def run_ours(data: Data, hidden, steps: int, model_dir: str, deterministic: bool = True) -> float:
    from estimator_lib import estimator

    hook = step_rate_hook()
    _with_hook(hook)
    estimator.train_prepared(job_for(hidden, steps, deterministic), data.prepared, model_dir)
    return hook.rate()


def run_tpuestimator(data: Data, hidden, steps: int, model_dir: str) -> float:
    import tensorflow as tf

    from estimator_lib.model import transform
    from estimator_lib.model.model_fn import build_model_fn

    job = job_for(hidden, steps)
    tpu = tf.compat.v1.estimator.tpu

    def input_fn(params):
        dataset = tf.data.TFRecordDataset(data.files, num_parallel_reads=tf.data.AUTOTUNE).shuffle(10_000).repeat()
        dataset = dataset.batch(params["batch_size"], drop_remainder=True)
        dataset = dataset.map(lambda s: transform.parse_batch(s, data.schema), tf.data.AUTOTUNE)
        return dataset.prefetch(tf.data.AUTOTUNE)

    config = tpu.RunConfig(
        model_dir=model_dir,
        tf_random_seed=job.training.seed,
        save_checkpoints_steps=job.training.save_checkpoints_steps,
        tpu_config=tpu.TPUConfig(iterations_per_loop=job.tpu.iterations_per_loop),
    )
    estimator = tpu.TPUEstimator(
        model_fn=build_model_fn(data.schema, job), config=config, use_tpu=False, train_batch_size=BATCH
    )
    hook = step_rate_hook()
    estimator.train(input_fn, max_steps=steps, hooks=[hook])
    return hook.rate()


def execution_rate(steps_per_execution: int):
    """A Keras callback: steps per second after the first execution (`steps_per_execution` steps per call)."""
    import tensorflow as tf

    class ExecutionRate(tf.keras.callbacks.Callback):
        def __init__(self):
            super().__init__()
            self.times: List[float] = []

        def on_train_batch_end(self, batch, logs=None):
            self.times.append(time.perf_counter())

        def rate(self) -> float:
            return (len(self.times) - 1) * steps_per_execution / (self.times[-1] - self.times[0])

    return ExecutionRate()


def run_keras(data: Data, hidden, steps: int, pipeline: str, steps_per_execution: int) -> float:
    model, _, _ = keras_model(data, hidden, steps, steps_per_execution)
    dataset = data.cached() if pipeline == "cached" else data.streaming()
    rate = execution_rate(steps_per_execution)
    model.fit(dataset, steps_per_epoch=steps, epochs=1, verbose=0, callbacks=[rate])
    return rate.rate()


def run_keras_numpy(data: Data, hidden, steps: int) -> float:
    x, y = data.arrays()
    n = steps * BATCH
    if n > len(x):  # one epoch of `steps` batches, as the old table ran it: repeat the rows to fill it
        reps = -(-n // len(x))
        x, y = x.repeat(reps, axis=0)[:n], y.repeat(reps, axis=0)[:n]
    model, _, _ = keras_model(data, hidden, steps, 1)
    rate = execution_rate(1)
    model.fit(x[:n], y[:n], batch_size=BATCH, epochs=1, shuffle=True, verbose=0, callbacks=[rate])
    return rate.rate()


def train_loop(model, adam, loss_fn, dataset, calls: int):
    """The hand-written loop: a tf.function running LOOP_STEPS steps per call; returns the call end times."""
    import tensorflow as tf

    iterator = iter(dataset)

    @tf.function
    def run(n):
        for _ in tf.range(n):
            x, y = next(iterator)
            with tf.GradientTape() as tape:
                loss = loss_fn(y[:, None], model(x, training=True)) + tf.add_n(model.losses)
            adam.apply_gradients(zip(tape.gradient(loss, model.trainable_variables), model.trainable_variables))
        return loss

    times = []
    for _ in range(calls):
        run(tf.constant(LOOP_STEPS)).numpy()
        times.append(time.perf_counter())
    return times


def run_tf_loop(data: Data, hidden, steps: int) -> float:
    model, adam, loss = keras_model(data, hidden, steps, 0)
    times = train_loop(model, adam, loss, data.cached(), steps // LOOP_STEPS)
    return (len(times) - 1) * LOOP_STEPS / (times[-1] - times[0])


def child(kind: str, prepared_dir: str, model: str, steps: int) -> None:
    """One timed call in this fresh process; prints {"call": s, "steady": steps/s}."""
    import tensorflow as tf

    tf.get_logger().setLevel("ERROR")
    from estimator_lib import estimator  # noqa: F401  (imported before the clock, like TensorFlow)

    data = Data(prepared_dir)
    hidden = MODELS[model]
    model_dir = tempfile.mkdtemp(prefix=f"{kind}-", dir=os.path.dirname(prepared_dir))
    runners: Dict[str, Callable[[], float]] = {
        "ours": lambda: run_ours(data, hidden, steps, model_dir),
        "ours-nodet": lambda: run_ours(data, hidden, steps, model_dir, deterministic=False),
        "tpuestimator": lambda: run_tpuestimator(data, hidden, steps, model_dir),
        "tf-loop": lambda: run_tf_loop(data, hidden, steps),
        "keras-numpy": lambda: run_keras_numpy(data, hidden, steps),
    }
    for n in SPE:
        for pipeline in ("stream", "cached"):
            runners[f"keras-{pipeline}-{n}"] = lambda p=pipeline, n=n: run_keras(data, hidden, steps, p, n)
    started = time.perf_counter()
    steady = runners[kind]()
    call = time.perf_counter() - started
    shutil.rmtree(model_dir, ignore_errors=True)
    print(json.dumps({"call": call, "steady": steady}))


# -- the driver --------------------------------------------------------------------------------------------
def _env() -> Dict[str, str]:
    return dict(os.environ, PYTHONPATH=os.pathsep.join([REPO, os.environ.get("PYTHONPATH", "")]))


def measure(kind: str, prepared_dir: str, model: str, steps: int) -> dict:
    """Runs one variant in a fresh process; adds "process": the process's wall time outside the call."""
    started = time.perf_counter()
    cmd = [sys.executable, __file__, "--child", kind, prepared_dir, model, str(steps)]
    done = subprocess.run(cmd, capture_output=True, text=True, env=_env(), cwd=REPO)
    if done.returncode:
        raise RuntimeError(f"{kind} ({model}, {steps} steps) failed:\n{done.stderr[-3000:]}")
    result = json.loads(done.stdout.strip().splitlines()[-1])
    result["process"] = time.perf_counter() - started - result["call"]
    return result


def rounds(prepared_dir: str, model: str, steps: int, kinds: Sequence[str], count: int) -> Dict[str, List[dict]]:
    """{kind: [one result per round]}, the kinds interleaved, the order rotating by round."""
    results: Dict[str, List[dict]] = {kind: [] for kind in kinds}
    for r in range(count):
        shift = r % len(kinds)
        for kind in list(kinds[shift:]) + list(kinds[:shift]):
            results[kind].append(measure(kind, prepared_dir, model, steps))
            print(f"  {model} {kind}: {json.dumps(results[kind][-1])}", file=sys.stderr, flush=True)
    return results


def _cell(values: Sequence[float], digits: int = 2) -> str:
    return f"{statistics.median(values):.{digits}f} [{min(values):.{digits}f}-{max(values):.{digits}f}]"


def summarise(model: str, results: Dict[str, List[dict]]) -> List[str]:
    """Markdown lines: per kind the call seconds, steady steps/s and process overhead; then, for each of ours,
    the fastest baseline by call time and by steady rate and the ratio per round (baseline / ours for time, ours
    / baseline for rate: above 1 we are faster)."""
    lines = [
        f"\n{model} {MODELS[model]}: call (s), steady (steps/s), process start-up + imports (s), median [min-max]",
        "| variant | call (s) | steady (steps/s) | process (s) |",
        "|---|---:|---:|---:|",
    ]
    for kind, runs in results.items():
        calls, steady, process = ([r[f] for r in runs] for f in ("call", "steady", "process"))
        lines.append(f"| {kind} | {_cell(calls)} | {_cell(steady, 0)} | {_cell(process)} |")
    baselines = [k for k in results if k not in OURS]
    if not baselines:
        return lines
    med = lambda kind, field: statistics.median(r[field] for r in results[kind])  # noqa: E731
    by_call = min(baselines, key=lambda k: med(k, "call"))
    by_steady = max(baselines, key=lambda k: med(k, "steady"))
    for ours in (k for k in OURS if k in results):
        call_ratio = [b["call"] / o["call"] for o, b in zip(results[ours], results[by_call])]
        rate_ratio = [o["steady"] / b["steady"] for o, b in zip(results[ours], results[by_steady])]
        lines.append(
            f"- {ours}: whole call vs the fastest baseline ({by_call}): {_cell(call_ratio)}x; "
            f"steady state vs the fastest ({by_steady}): {_cell(rate_ratio)}x"
        )
    return lines


def table_lines(root: str, rows: int, steps: int, models: Sequence[str], kinds: Sequence[str], count: int) -> List[str]:
    """The whole comparison (data prepared under `root` once), as the lines of its tables."""
    prepared_dir = make_data(root, rows)
    started = time.time()
    lines = []
    for model in models:
        lines += summarise(model, rounds(prepared_dir, model, steps, kinds, count))
    load = os.getloadavg()
    lines.append(
        f"\n{count} interleaved rounds, {steps} steps of batch {BATCH}, {rows:,} rows, "
        f"cores {os.cpu_count()}, {time.time() - started:.0f} s, "
        f"load average now {load[0]:.1f} / {load[1]:.1f} / {load[2]:.1f}"
    )
    return lines


def main_table(args) -> None:
    root = args.workdir or tempfile.mkdtemp(prefix="bench-baselines-")
    os.makedirs(root, exist_ok=True)
    print("\n".join(table_lines(root, args.rows, args.steps, args.models, args.kinds, args.rounds)))
    if not args.workdir:
        shutil.rmtree(root, ignore_errors=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--steps", type=int, default=3000, help="a multiple of 100 (the loop's steps per call)")
    parser.add_argument("--rows", type=int, default=100_000)
    parser.add_argument("--models", nargs="+", choices=list(MODELS), default=list(MODELS))
    parser.add_argument("--kinds", nargs="+", choices=KINDS, default=list(KINDS))
    parser.add_argument("--profile", action="store_true", help="where the whole call goes (bench_profile.py)")
    parser.add_argument("--workdir", default=None)
    parser.add_argument("--child", nargs=4, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.steps % LOOP_STEPS or args.steps % max(SPE):
        parser.error(f"--steps={args.steps}: use a multiple of {LOOP_STEPS}")
    if args.child:
        kind, prepared_dir, model, steps = args.child
        return child(kind, prepared_dir, model, int(steps))
    if args.profile:
        import bench_profile

        root = args.workdir or tempfile.mkdtemp(prefix="bench-profile-")
        os.makedirs(root, exist_ok=True)
        return bench_profile.main_profile(make_data(root, args.rows), args.models, args.steps)
    main_table(args)


if __name__ == "__main__":
    main()
