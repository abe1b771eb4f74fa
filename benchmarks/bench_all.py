"""Every speed benchmark in one table: each row is our path beside what a user writes by hand for the same job,
both measured in this invocation, interleaved, over several rounds.

    python benchmarks/bench_all.py [--quick] [--rounds N] [--workdir DIR]

Rows (a "x" ratio is our speed over the alternative's, per round: above 1 we are faster; for a time, the
alternative's time over ours). Where a row has several alternatives, it is compared with the fastest (by
median), named in the table. The default runs every row but `training`:
  baselines       training against its strongest baselines (`bench_baselines.py`): `estimator.train_prepared`,
                  default (op determinism) and `training.deterministic=false`, against every variant a user
                  writes: Keras `fit` with steps_per_execution 1/32/100 over a streaming and over a parsed-once
                  cached tf.data pipeline, a hand-written tf.function loop, the plain TPUEstimator with our
                  model_fn, Keras on NumPy arrays (the old table's two columns are keras-stream-1 and
                  keras-numpy). Each call in a fresh process; 100k rows x 30 floats, 3,000 steps of batch 256,
                  Adam, a (64, 32) and a (512, 256, 128) DNN (--quick: 1,000 steps, the tiny model). Two rows
                  each: the whole call (seconds, what a user waits for) and the steady state (steps/s after the
                  first execution). Every variant's medians are printed above the table.
  FLOP/s          the (512, 256, 128) model's training FLOP/s (6 x batch x weights per step) at our steady rate,
                  beside the machine's fp32 matmul peak (a 2048^2 matmul chained in a tf.function, best of three).
  prediction      `predict.batch_predict` (end to end, JSON Lines written, `num_examples` given) against the
                  loop one writes by hand: load the SavedModel, TFRecordDataset -> batch -> prefetch -> a
                  `tf.function` calling the `predict` signature on serialized Examples -> `.numpy()`, writing
                  nothing. Two models (tiny, large) on two datasets (mixed: `tests/synthetic` rows with a
                  categorical column; floats: the 30-float training data).
  preparation     `prepare` against pandas `read_csv` + a `tf.train.Example` per row (`bench_prepare.run_pandas`),
                  each run in its own process, TensorFlow imported before the clock starts; at 100k rows also
                  against TFDV 1.15.1's `generate_statistics_from_csv` on the same CSV (statistics alone, in its
                  own virtualenv, installed under --tfdv-cache on first use; --no-tfdv leaves it out).
  run-local       `python -m pipelines run-local` on the embedded data (a new output folder each time) against
                  the same compiled pipeline run by the KFP local runner with every stage executed inside one
                  warm process (the in-process sum of its stages).
  byom            a user's model_fn (`examples/`: a digits CNN, a BERT-style Transformer) through our train,
                  evaluate and predict calls against the same model_fn in a plain TPUEstimator
                  (`bench_byom.py`), each call in a fresh process; the target is at most 1.05x its time.
  cost growth     training and preparation with rows (and steps) doubled or x10: time and peak memory ratios.
  training        (only when named) the older in-process rows: `estimator.train`'s steady rate against Keras
                  `fit` at its defaults on streaming tf.data and on NumPy arrays.

Every process-level time is wall time on a shared machine: the load average is printed with the table.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import inspect
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from typing import Dict, List, Optional, Sequence

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
sys.path.insert(0, HERE)
sys.path.insert(0, REPO)

import bench_baselines  # noqa: E402  (training against its strongest baselines, fresh processes)
import bench_predict  # noqa: E402  (write_records, timed, machine load)
import bench_prepare  # noqa: E402  (generate, measure: one process per preparation)

BATCH = 256
MODELS = {"tiny (64, 32)": (64, 32), "large (512, 256, 128)": (512, 256, 128)}


@dataclasses.dataclass
class Row:
    """One line of the table: per round, our rate and the alternative's (higher is faster)."""

    name: str
    unit: str
    ours: List[float]
    alt: List[float]
    alt_name: str
    target: Optional[float] = None
    seconds: bool = False  # the values are times (lower is faster): the ratio is the alternative's over ours

    def ratios(self) -> List[float]:
        if self.seconds:
            return [a / o for o, a in zip(self.ours, self.alt)]
        return [o / a for o, a in zip(self.ours, self.alt)]


@dataclasses.dataclass(frozen=True)
class Sizes:
    rounds: int
    train_rows: int
    short_steps: int  # training steps of the large model
    long_steps: int  # of the tiny one (and of the cost-growth runs)
    predict_rows: int
    prepare_rows: Sequence[int]
    prepare_rounds_large: int
    run_local_rounds: int
    byom_rounds: int
    byom_steps_scale: float


FULL = Sizes(3, 200_000, 400, 1500, 200_000, (100_000, 1_000_000), 1, 4, 5, 1.0)
QUICK = Sizes(2, 50_000, 300, 1000, 50_000, (100_000,), 1, 1, 1, 0.25)


# -- training ----------------------------------------------------------------------------------------------
class Training:
    """Our `estimator.train` and the two Keras scripts, on the same prepared records."""

    def __init__(self, root: str, rows: int):
        import tensorflow as tf

        from estimator_lib.data.prepare import PrepareConfig, prepare
        from estimator_lib.model import inputs, transform

        csv = os.path.join(root, f"floats-{rows}.csv")
        bench_prepare.generate(csv, rows, categorical=0)
        self.prepared = prepare(
            PrepareConfig(data=(csv,), label="label", eval_fraction=0.01, valid_fraction=0.0), os.path.join(root, "p")
        )
        self.root = root
        self.files = inputs.resolve_files(self.prepared.files("train"))
        self.count = self.prepared.counts["train"]
        schema = self.prepared.schema
        self.spec = transform.parse_spec(schema)
        self.keys = [f.key for f in schema.features]
        whole = next(iter(tf.data.TFRecordDataset(self.files).batch(self.count).map(self._parse)))
        self.x, self.y = whole[0].numpy(), whole[1].numpy()

    def _parse(self, serialized):
        import tensorflow as tf

        parsed = tf.io.parse_example(serialized, self.spec)
        x = tf.stack([parsed[k] for k in self.keys], axis=1)
        return x, tf.cast(parsed["label"], tf.float32)

    def job(self, hidden: Sequence[int], steps: int):
        from estimator_lib.config import JobConfig, ModelConfig, TrainingConfig

        training = TrainingConfig(train_batch_size=BATCH, train_steps=steps, save_checkpoints_steps=10_000)
        return JobConfig(model=ModelConfig(family="dnn", hidden_units=tuple(hidden)), training=training)

    def ours(self, hidden: Sequence[int], steps: int) -> tuple:
        """(steady steps/s, start-up seconds) of what `estimator.train` runs without a validation split: its
        input_fn and estimator, with a hook that times the steps after the first `session.run`."""
        from estimator_lib import estimator
        from estimator_lib.model import inputs

        job = self.job(hidden, steps)
        model_dir = tempfile.mkdtemp(prefix="ours-", dir=self.root)
        start = time.perf_counter()
        seed, buffer = job.training.seed, job.training.shuffle_buffer_size
        if "num_examples" in inspect.signature(inputs.train_input_fn_builder).parameters:
            input_fn = inputs.train_input_fn_builder(
                self.files, self.prepared.schema, seed, buffer, model_dir, self.count
            )
        else:  # the library before the in-memory cache
            input_fn = inputs.train_input_fn_builder(self.files, self.prepared.schema, seed, buffer, model_dir)
        if "target_step" in inspect.signature(estimator.build_estimator).parameters:
            est = estimator.build_estimator(job, self.prepared.schema, model_dir, target_step=steps)
        else:
            est = estimator.build_estimator(job, self.prepared.schema, model_dir)
        rate = step_rate()
        est.train(input_fn, max_steps=steps, hooks=[rate])
        seconds = time.perf_counter() - start
        shutil.rmtree(model_dir)
        return rate.rate(), seconds - steps / rate.rate()

    def _keras_model(self, hidden: Sequence[int], steps: int):
        """The model `job` describes, written in Keras: inputs standardised with the schema's statistics, ReLU
        layers, L2 on every kernel (`ModelConfig.l2`), Adam with the learning rate's cosine decay over the steps."""
        import tensorflow as tf

        job = self.job(hidden, steps)
        numeric = {f.key: f for f in self.prepared.schema.numeric}
        mean = [numeric[k].mean for k in self.keys]
        variance = [numeric[k].std ** 2 for k in self.keys]
        l2 = tf.keras.regularizers.L2(job.model.l2)
        dense = lambda units, activation=None: tf.keras.layers.Dense(units, activation, kernel_regularizer=l2)
        layers = [tf.keras.Input((len(self.keys),)), tf.keras.layers.Normalization(mean=mean, variance=variance)]
        model = tf.keras.Sequential(layers + [dense(h, "relu") for h in hidden] + [dense(1)])
        optimizer = job.training.optimizer
        if (optimizer.name, optimizer.schedule) != ("adam", "cosine_decay"):
            raise ValueError(f"the Keras scripts write Adam with a cosine decay; update them for {optimizer}")
        schedule = tf.keras.optimizers.schedules.CosineDecay(optimizer.learning_rate, steps)
        model.compile(tf.keras.optimizers.Adam(schedule), tf.keras.losses.BinaryCrossentropy(from_logits=True))
        return model

    def keras_tfdata(self, hidden: Sequence[int], steps: int) -> tuple:
        import tensorflow as tf

        dataset = tf.data.TFRecordDataset(self.files, num_parallel_reads=tf.data.AUTOTUNE).shuffle(10_000).repeat()
        dataset = dataset.batch(BATCH, drop_remainder=True).map(self._parse, tf.data.AUTOTUNE)
        rate = batch_rate()
        self._keras_model(hidden, steps).fit(
            dataset.prefetch(tf.data.AUTOTUNE), steps_per_epoch=steps, epochs=1, verbose=0, callbacks=[rate]
        )
        return rate.rate(), 0.0

    def keras_numpy(self, hidden: Sequence[int], steps: int) -> tuple:
        n = steps * BATCH
        rate = batch_rate()
        self._keras_model(hidden, steps).fit(
            self.x[:n], self.y[:n], batch_size=BATCH, epochs=1, shuffle=True, verbose=0, callbacks=[rate]
        )
        return rate.rate(), 0.0


def step_rate():
    """A session hook: global steps per second after the first `session.run` (start-up and warm-up excluded)."""
    import tensorflow as tf

    class StepRate(tf.compat.v1.train.SessionRunHook):
        def begin(self):
            self.step, self.first, self.last, self.steps = tf.compat.v1.train.get_global_step(), None, None, 0

        def after_run(self, run_context, run_values):
            if self.first is None:
                self.first = (run_context.session.run(self.step), time.perf_counter())
            self.last = time.perf_counter()

        def end(self, session):
            self.steps = session.run(self.step) - self.first[0]

        def rate(self) -> float:
            return self.steps / (self.last - self.first[1])

    return StepRate()


def batch_rate():
    """A Keras callback: batches per second after the first batch."""
    import tensorflow as tf

    class BatchRate(tf.keras.callbacks.Callback):
        def __init__(self):
            super().__init__()
            self.times: List[float] = []

        def on_train_batch_end(self, batch, logs=None):
            self.times.append(time.perf_counter())

        def rate(self) -> float:
            return (len(self.times) - 1) / (self.times[-1] - self.times[0])

    return BatchRate()


def bench_training(training: Training, sizes: Sizes, notes: List[str]) -> List[Row]:
    rows, startups = [], []
    for name, hidden in MODELS.items():
        rates: Dict[str, List[float]] = {"ours": [], "tfdata": [], "numpy": []}
        runners = {"ours": training.ours, "tfdata": training.keras_tfdata, "numpy": training.keras_numpy}
        for r in range(sizes.rounds):
            order = list(runners)[r % 3 :] + list(runners)[: r % 3]  # rotate who goes first
            for key in order:
                steps = sizes.long_steps if len(hidden) == 2 else sizes.short_steps
                rate, startup = runners[key](hidden, steps)
                rates[key].append(rate)
                if key == "ours":
                    startups.append(startup)
        rows.append(Row(f"training {name}", "steps/s", rates["ours"], rates["tfdata"], "Keras fit, tf.data", 1.2))
        rows.append(Row(f"training {name}", "steps/s", rates["ours"], rates["numpy"], "Keras fit, NumPy", 1.0))
    notes.append(f"training start-up inside estimator.train (median): {statistics.median(startups):.2f} s")
    return rows


def matmul_peak() -> float:
    """fp32 FLOP/s of a 2048^2 matmul chained 8 times in a tf.function, best of three."""
    import tensorflow as tf

    n, reps = 2048, 8
    a = tf.random.normal((n, n))

    @tf.function
    def chain(x):
        for _ in range(reps):
            x = tf.matmul(x, a) * 1e-3
        return x

    chain(a).numpy()
    best = min(bench_predict.timed(lambda: chain(a).numpy())[1] for _ in range(3))
    return 2 * n**3 * reps / best


def flops_row(steps_per_second: List[float], n_inputs: int, peak: float) -> Row:
    """The large model's training FLOP/s (6 x batch x weights per step) at our steady rates, beside the peak."""
    hidden = MODELS["large (512, 256, 128)"]
    sizes = [n_inputs, *hidden, 1]
    per_step = 6 * BATCH * sum(a * b for a, b in zip(sizes, sizes[1:]))
    ours = [rate * per_step / 1e9 for rate in steps_per_second]
    return Row("training FLOP/s, large", "GFLOP/s", ours, [peak / 1e9] * len(ours), "matmul peak")


# -- prediction --------------------------------------------------------------------------------------------
class HandLoop:
    """The prediction loop a user writes: SavedModel signature in a tf.function over a TFRecordDataset."""

    def __init__(self, export_dir: str, files: List[str], batch_size: int):
        self.export_dir, self.files, self.batch_size = export_dir, files, batch_size

    def run(self) -> int:
        import tensorflow as tf

        loaded = tf.saved_model.load(self.export_dir, tags=["serve"])
        signature = loaded.signatures["predict"]
        predict = tf.function(lambda examples: signature(examples=examples))
        count = 0
        dataset = tf.data.TFRecordDataset(self.files).batch(self.batch_size).prefetch(tf.data.AUTOTUNE)
        for batch in dataset:
            count += len(predict(batch)["probabilities"].numpy())
        return count


def _trained_export(root: str, job, schema, train_pattern: str, one_row: str) -> tuple:
    from estimator_lib import estimator, export

    model_dir = os.path.join(root, "model")
    estimator.train(job, schema, train_pattern, model_dir)
    exported = export.export_model(job, schema, model_dir, os.path.join(root, "export"), verify_rows=one_row)
    return model_dir, exported.export_dir


def bench_prediction(training: Training, root: str, sizes: Sizes) -> List[Row]:
    import synthetic

    from estimator_lib import predict
    from estimator_lib.config import JobConfig, ModelConfig, TrainingConfig
    from estimator_lib.model import inputs

    mixed_schema = synthetic.make_schema("multiclass")
    datasets = {
        "mixed": (
            mixed_schema,
            bench_predict.write_records(os.path.join(root, "mixed"), sizes.predict_rows, mixed_schema),
        ),
        "floats": (training.prepared.schema, training.prepared.files("train")),
    }
    mixed_train, _ = synthetic.write_dataset(
        os.path.join(root, "mixed-train"), synthetic.make_rows(512, 3, "multiclass"), mixed_schema
    )
    cases = []
    for data_name, (schema, pattern) in datasets.items():
        files = inputs.resolve_files(pattern)
        count = inputs.count_records(files)
        one_row = files[0]
        for model_name, hidden in MODELS.items():
            embedding = 32 if len(hidden) > 2 else 8
            training_config = TrainingConfig(train_batch_size=64, predict_batch_size=1024, train_steps=40)
            job = JobConfig(
                model=ModelConfig(family="dnn", hidden_units=hidden, embedding_dim=embedding), training=training_config
            )
            case_root = os.path.join(root, f"predict-{data_name}-{len(hidden)}")
            train_pattern = mixed_train if data_name == "mixed" else pattern
            model_dir, export_dir = _trained_export(case_root, job, schema, train_pattern, one_row)
            out = os.path.join(case_root, "out")

            def ours(job=job, schema=schema, model_dir=model_dir, pattern=pattern, out=out, count=count):
                return predict.batch_predict(job, schema, model_dir, pattern, out, num_examples=count).count

            cases.append((f"prediction {model_name}, {data_name}", count, ours, HandLoop(export_dir, files, 1024).run))
    rows = []
    for name, count, ours, hand in cases:
        rates: Dict[str, List[float]] = {"ours": [], "hand": []}
        for r in range(sizes.rounds):
            for key, fn in (("hand", hand), ("ours", ours)) if r % 2 == 0 else (("ours", ours), ("hand", hand)):
                n, seconds, _, _ = bench_predict.timed(fn)
                assert n == count, (name, key, n, count)
                rates[key].append(count / seconds)
        rows.append(Row(name, "rows/s", rates["ours"], rates["hand"], "hand-written SavedModel loop", 1.2))
    return rows


# -- preparation -------------------------------------------------------------------------------------------
def bench_preparation(root: str, sizes: Sizes, notes: List[str], tfdv_python: Optional[str] = None) -> List[Row]:
    """`prepare` against the pandas script at each size; at the smallest, also against TFDV's statistics
    (`tfdv.generate_statistics_from_csv` in its own virtualenv, `tfdv_python`) when given: the three
    interleaved, the order rotating by round."""
    rows, results = [], {}
    for n in sizes.prepare_rows:
        path = os.path.join(root, f"prepare-{n}.csv")
        bench_prepare.generate(path, n)
        rounds = sizes.rounds if n <= 100_000 else sizes.prepare_rounds_large
        impls = ["pandas", "prepare"] + ([bench_prepare.TFDV] if tfdv_python and n == min(sizes.prepare_rows) else [])
        runs: Dict[str, List[dict]] = {impl: [] for impl in impls}
        for r in range(rounds):
            for impl in impls[r % len(impls) :] + impls[: r % len(impls)]:
                python = tfdv_python if impl == bench_prepare.TFDV else sys.executable
                runs[impl].append(bench_prepare.measure(impl, path, root, python=python))
        results[n] = runs
        rate = lambda impl, runs=runs: [x["rows"] / x["seconds"] for x in runs[impl]]
        rows.append(Row(f"preparation {n:,} rows", "rows/s", rate("prepare"), rate("pandas"), "pandas + Example", 4.0))
        if bench_prepare.TFDV in runs:
            seconds = lambda impl, runs=runs: [x["seconds"] for x in runs[impl]]
            rows.append(
                Row(
                    f"preparation {n:,} rows (whole)",
                    "s",
                    seconds("prepare"),
                    seconds(bench_prepare.TFDV),
                    "TFDV 1.15 statistics alone",
                    1.0,
                    seconds=True,
                )
            )
        memory = statistics.median(x["main_mb"] for x in runs["prepare"])
        pandas_memory = statistics.median(x["main_mb"] for x in runs["pandas"])
        notes.append(f"preparation {n:,} rows: peak RSS prepare {memory:.0f} MB, pandas script {pandas_memory:.0f} MB")
        os.remove(path)
    if len(results) > 1:
        small, large = min(results), max(results)
        secs = lambda n: statistics.median(x["seconds"] for x in results[n]["prepare"])
        mem = lambda n: statistics.median(x["main_mb"] for x in results[n]["prepare"])
        notes.append(
            f"cost growth, preparation, rows x{large // small}: time x{secs(large) / secs(small):.2f}, "
            f"peak memory x{mem(large) / mem(small):.2f}"
        )
    return rows


# -- run-local ---------------------------------------------------------------------------------------------
def run_local_once(root: str) -> float:
    output = tempfile.mkdtemp(prefix="run-local-", dir=root)
    start = time.perf_counter()
    subprocess.run(
        [sys.executable, "-m", "pipelines", "run-local", "--output", output],
        check=True,
        cwd=REPO,
        capture_output=True,
        env=_env(),
    )
    seconds = time.perf_counter() - start
    shutil.rmtree(output)
    return seconds


def in_process_once(root: str) -> float:
    output = tempfile.mkdtemp(prefix="in-process-", dir=root)
    done = subprocess.run(
        [sys.executable, __file__, "--child-in-process", output],
        check=True,
        cwd=REPO,
        capture_output=True,
        text=True,
        env=_env(),
    )
    shutil.rmtree(output)
    return json.loads(done.stdout.strip().splitlines()[-1])["seconds"]


def _env() -> Dict[str, str]:
    return dict(os.environ, PYTHONPATH=os.pathsep.join([REPO, os.environ.get("PYTHONPATH", "")]))


def child_in_process(output: str) -> None:
    """The compiled pipeline through the KFP local runner, every stage executed in this (warm) process."""
    from kfp import local as kfp_local
    from kfp.dsl import executor as kfp_executor
    from kfp.local import subprocess_task_handler

    import components
    from estimator_lib import estimator  # noqa: F401  (warm: TensorFlow and the library imported)
    from estimator_lib.config import JobConfig, RunConfig
    from pipelines import local
    from pipelines.image import LOCAL_IMAGE
    from pipelines.pipeline import build_pipeline

    def in_process(full_command: List[str]) -> int:
        executor_input = json.loads(full_command[full_command.index("--executor_input") + 1])
        function = getattr(components, full_command[full_command.index("--function_to_execute") + 1])
        with contextlib.redirect_stdout(sys.stderr):
            kfp_executor.Executor(executor_input=executor_input, function_to_execute=function).execute()
        return 0

    subprocess_task_handler.run_local_subprocess = in_process
    settings = RunConfig(
        publish_root=os.path.join(output, "published"), job=JobConfig().with_overrides(local.local_job_defaults())
    )
    kfp_local.init(
        runner=kfp_local.SubprocessRunner(use_venv=False),
        pipeline_root=os.path.join(output, "root"),
        raise_on_error=True,
    )
    start = time.perf_counter()
    with contextlib.redirect_stdout(sys.stderr):
        build_pipeline(LOCAL_IMAGE)(**settings.arguments())
    print(json.dumps({"seconds": time.perf_counter() - start}))


def bench_run_local(root: str, sizes: Sizes) -> List[Row]:
    local_runs, warm = [], []
    for r in range(sizes.run_local_rounds):
        for which in ("local", "warm") if r % 2 == 0 else ("warm", "local"):
            (local_runs if which == "local" else warm).append(
                run_local_once(root) if which == "local" else in_process_once(root)
            )
    return [
        Row(
            "run-local, embedded data",
            "runs/min",
            [60 / s for s in local_runs],
            [60 / s for s in warm],
            "stages in one warm process",
            1 / 1.5,
        )
    ]


# -- cost growth -------------------------------------------------------------------------------------------
def child_train(prepared_dir: str, steps: int) -> None:
    from estimator_lib import estimator
    from estimator_lib.config import JobConfig, ModelConfig, TrainingConfig
    from estimator_lib.data.prepare import load_prepared

    prepared = load_prepared(prepared_dir)
    training = TrainingConfig(train_batch_size=BATCH, train_steps=steps, save_checkpoints_steps=10_000)
    job = JobConfig(model=ModelConfig(family="dnn", hidden_units=(64, 32)), training=training)
    model_dir = tempfile.mkdtemp(prefix="growth-", dir=prepared_dir)
    start = time.perf_counter()
    estimator.train(
        job, prepared.schema, prepared.files("train"), model_dir, num_train_examples=prepared.counts["train"]
    )
    seconds = time.perf_counter() - start
    shutil.rmtree(model_dir)
    print(json.dumps({"seconds": seconds, "mb": bench_prepare.peak_rss_mb()}))


def bench_growth(training: Training, root: str, sizes: Sizes, notes: List[str]) -> None:
    from estimator_lib.data.prepare import PrepareConfig, prepare

    half = sizes.train_rows // 2
    csv = os.path.join(root, f"floats-{half}.csv")
    bench_prepare.generate(csv, half, categorical=0)
    small_dir = os.path.join(root, "p-half")
    prepare(PrepareConfig(data=(csv,), label="label", eval_fraction=0.01, valid_fraction=0.0), small_dir)
    cases = {"small": (small_dir, sizes.long_steps), "double": (os.path.join(root, "p"), 2 * sizes.long_steps)}
    runs: Dict[str, List[dict]] = {k: [] for k in cases}
    for r in range(sizes.rounds):
        for key in list(cases) if r % 2 == 0 else list(cases)[::-1]:
            directory, steps = cases[key]
            cmd = [sys.executable, __file__, "--child-train", directory, str(steps)]
            done = subprocess.run(cmd, check=True, capture_output=True, text=True, env=_env())
            runs[key].append(json.loads(done.stdout.strip().splitlines()[-1]))
    med = lambda k, f: statistics.median(x[f] for x in runs[k])
    notes.append(
        f"cost growth, training, rows and steps x2 ({half:,} rows/{sizes.long_steps} steps -> double): time "
        f"x{med('double', 'seconds') / med('small', 'seconds'):.2f} ({med('small', 'seconds'):.1f} -> "
        f"{med('double', 'seconds'):.1f} s, start-up included), "
        f"peak memory x{med('double', 'mb') / med('small', 'mb'):.2f}"
    )


# -- training against its strongest baselines, and [byom] --------------------------------------------------
def bench_baselines_rows(root: str, quick: bool, sizes: Sizes, details: List[str]) -> List[Row]:
    """Training, ours (default, and deterministic=false) against the fastest of every baseline variant
    (`bench_baselines.KINDS`, each in a fresh process): the whole call by its median, the steady state by its
    median rate; the per-variant tables go to `details`. Then the large model's FLOP/s at our steady rate."""
    steps, models = (1000, ["tiny"]) if quick else (3000, list(bench_baselines.MODELS))
    prepared_dir = bench_baselines.make_data(root, 100_000)
    rows: List[Row] = []
    for model in models:
        results = bench_baselines.rounds(prepared_dir, model, steps, bench_baselines.KINDS, sizes.rounds)
        details += bench_baselines.summarise(model, results)
        values = lambda kind, field, results=results: [r[field] for r in results[kind]]  # noqa: E731
        others = [k for k in results if k not in bench_baselines.OURS]
        by_call = min(others, key=lambda k: statistics.median(values(k, "call")))
        by_steady = max(others, key=lambda k: statistics.median(values(k, "steady")))
        name = f"training {model} {bench_baselines.MODELS[model]}"
        for ours, label in (("ours", "default"), ("ours-nodet", "deterministic=false")):
            call, steady = values(ours, "call"), values(ours, "steady")
            rows.append(Row(f"{name}, {label}, call", "s", call, values(by_call, "call"), by_call, 1.2, seconds=True))
            rows.append(Row(f"{name}, {label}, steady", "steps/s", steady, values(by_steady, "steady"), by_steady, 1.2))
        if model == "large":
            n_inputs = len(bench_baselines.Data(prepared_dir).keys)
            rows.append(flops_row(values("ours", "steady"), n_inputs, matmul_peak()))
    details.append(f"\n{sizes.rounds} interleaved rounds, {steps} steps of batch {BATCH}, 100,000 rows")
    return rows


def bench_byom_rows(root: str, sizes: Sizes) -> List[Row]:
    """[byom]: a user's model_fn through our stages against the same model_fn in a plain TPUEstimator
    (`bench_byom.py`): train, evaluate and predict, each call in a fresh process, interleaved; the default
    (deterministic) against the plain estimator with op determinism, deterministic=false against the plain one.
    The target: at most 1.05x the plain call's time (x >= 0.95)."""
    import bench_byom

    dirs = bench_byom.make_data(os.path.join(root, "byom"))
    rows: List[Row] = []
    for model in bench_byom.MODELS:
        steps = bench_byom.training_steps(model, sizes.byom_steps_scale)
        trains = bench_byom.interleaved(model, dirs[model], steps, bench_byom.KINDS, sizes.byom_rounds)
        results = {bench_byom.TRAIN: trains}
        trained = bench_byom.trained_model(model, dirs[model], steps)
        for stage in (bench_byom.EVALUATE, bench_byom.PREDICT):
            kinds = tuple(f"{stage}:{k}" for k in bench_byom.KINDS)
            by_kind = bench_byom.interleaved(model, dirs[model], steps, kinds, sizes.byom_rounds, trained)
            results[stage] = {k.rpartition(":")[2]: v for k, v in by_kind.items()}
        for stage, by_kind in results.items():
            seconds = lambda kind, by_kind=by_kind: [r["seconds"] for r in by_kind[kind]]  # noqa: E731
            for ours, plain in (("ours", "plain+det"), ("ours-nodet", "plain")):
                name = f"[byom] {model}, {stage}, {ours}"
                alt = f"plain TPUEstimator{', op determinism' if plain == 'plain+det' else ''}"
                rows.append(Row(name, "s", seconds(ours), seconds(plain), alt, 1 / 1.05, seconds=True))
    return rows


# -- the table ---------------------------------------------------------------------------------------------
def _fmt(value: float) -> str:
    return f"{value:,.0f}" if value >= 100 else f"{value:.2f}" if value < 10 else f"{value:.1f}"


def print_table(rows: List[Row], notes: List[str], sizes: Sizes, started: float) -> None:
    """The table, in Markdown: per row our median, the alternative (the fastest variant where there are
    several) and its median, the ratio per round (median [min-max]; above 1 we are faster), the target."""
    columns = ("row", "ours (median)", "alternative (the fastest variant)", "its median", "x (median [range])")
    print("\n| " + " | ".join(columns + ("target", "met")) + " |")
    print("|---|---:|---|---:|---:|---:|---|")
    for row in rows:
        ratios = row.ratios()
        ratio = f"{statistics.median(ratios):.2f} [{min(ratios):.2f}-{max(ratios):.2f}]"
        target = f">= {row.target:.2f}" if row.target else ""
        met = "" if not row.target else "yes" if statistics.median(ratios) >= row.target else "no"
        ours = f"{_fmt(statistics.median(row.ours))} {row.unit}"
        alt = f"{_fmt(statistics.median(row.alt))} {row.unit}"
        print(f"| {row.name} | {ours} | {row.alt_name} | {alt} | {ratio} | {target} | {met} |")
    for note in notes:
        print(f"- {note}")
    load = os.getloadavg()
    print(
        f"- rounds {sizes.rounds} ([byom] {sizes.byom_rounds}), cores {os.cpu_count()}, "
        f"load average now {load[0]:.1f} / {load[1]:.1f} / {load[2]:.1f}, "
        f"wall time {(time.perf_counter() - started) / 60:.1f} min"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="smaller data, fewer rounds, no 1M-row preparation")
    parser.add_argument("--rounds", type=int, help="interleaved rounds per row (default 3, --quick 2)")
    parser.add_argument(
        "--only",
        nargs="+",
        choices=["baselines", "prediction", "preparation", "run-local", "byom", "growth", "training"],
        help="the rows to run (default: all but training, the older in-process Keras rows)",
    )
    parser.add_argument("--no-tfdv", action="store_true", help="leave TFDV out of the preparation rows")
    parser.add_argument("--tfdv-cache", default=os.path.join(tempfile.gettempdir(), "bench_prepare_cache"))
    parser.add_argument("--workdir", default=None)
    parser.add_argument("--child-in-process", help=argparse.SUPPRESS)
    parser.add_argument("--child-train", nargs=2, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child_in_process:
        return child_in_process(args.child_in_process)
    if args.child_train:
        return child_train(args.child_train[0], int(args.child_train[1]))
    import tensorflow as tf

    tf.get_logger().setLevel("ERROR")
    sizes = QUICK if args.quick else FULL
    if args.rounds:
        sizes = dataclasses.replace(sizes, rounds=args.rounds)
    only = set(args.only or ["baselines", "prediction", "preparation", "run-local", "byom", "growth"])
    started = time.perf_counter()
    root = args.workdir or tempfile.mkdtemp(prefix="bench-all-")
    os.makedirs(root, exist_ok=True)
    rows: List[Row] = []
    notes: List[str] = []
    training = Training(root, sizes.train_rows) if only & {"training", "prediction", "growth"} else None
    if "training" in only:
        training_rows = bench_training(training, sizes, notes)
        rows += training_rows
        large = next(r for r in training_rows if "512" in r.name and "NumPy" in r.alt_name)
        rows.append(flops_row(large.ours, len(training.keys), matmul_peak()))
    if "prediction" in only:
        rows += bench_prediction(training, root, sizes)
    details: List[str] = []
    if "baselines" in only:
        rows = bench_baselines_rows(root, args.quick, sizes, details) + rows
    if "preparation" in only:
        tfdv = None
        if not (args.quick or args.no_tfdv):
            tfdv, why = bench_prepare.tfdv_python(args.tfdv_cache, 1800.0)
            if tfdv is None:
                notes.append(f"TFDV 1.15.1 not measured: it does not install beside TensorFlow 2.15 here: {why}")
        rows += bench_preparation(root, sizes, notes, tfdv)
    if "run-local" in only:
        rows += bench_run_local(root, sizes)
    if "byom" in only:
        rows += bench_byom_rows(root, sizes)
    if "growth" in only:
        bench_growth(training, root, sizes, notes)
    if details:
        print("\n".join(["\nTraining, every variant (`bench_baselines.py`):"] + details))
    if rows or notes:
        print_table(rows, notes, sizes, started)
    if not args.workdir:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
