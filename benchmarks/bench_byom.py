"""A user's own model_fn trained through the library (`estimator_lib.model.user.train`, what the train stage
runs) against the same model_fn in a plain TPUEstimator, as its author would write it, on the same records.

    python benchmarks/bench_byom.py [--rounds N] [--steps-scale F] [--workdir DIR]

The plain run is the strongest version of the hand-written job: a `TPUEstimator(use_tpu=False)` with the same
RunConfig (seed, iterations_per_loop, checkpoint cadence, batch size, hyperparameters) and the user's own
input_fn (TFRecordDataset, seeded shuffle, repeat, batch with drop_remainder, parse after batching, parallel
map, prefetch). Each call runs in a fresh process and is timed inside it, from before the estimator is built to
the return of `train` (the whole call a user waits for; imports excluded, the same for both). The two are
interleaved (the order rotates by round); the table gives the median of the rounds with [min-max] and the
ratio ours / plain of the medians (time: lower is better; the target is at most 1.05).

Two pairs, like for like: the library's default is bitwise-repeatable training (`training.deterministic`:
seeds and TensorFlow's op determinism, whose deterministic kernels cost time), so it is compared with the plain
TPUEstimator given the same determinism (`plain+det`); `training.deterministic=false` is compared with the
plain TPUEstimator as most users write it.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MODELS = {
    "digits CNN": {
        "example": "image_cnn",
        "model_fn": "digits_cnn.model:model_fn",
        "label": "label",
        "hparams": {"filters": 16, "units": 64, "learning_rate": 0.003},
        "steps": 1500,
    },
    "BERT-style Transformer": {
        "example": "text_classifier",
        "model_fn": "token_transformer.model:model_fn",
        "label": "label_ids",
        "hparams": {
            "vocab_size": 50,
            "hidden_size": 64,
            "num_heads": 4,
            "max_seq_length": 32,
            "num_labels": 2,
            "learning_rate": 0.001,
        },
        "steps": 400,
    },
}
BATCH, ITERATIONS_PER_LOOP, SEED, SHUFFLE = 64, 100, 42, 10000


KINDS = ("plain", "plain+det", "ours", "ours-nodet")


def _child(kind: str, model: str, data_dir: str, model_dir: str, steps: int) -> None:
    """One timed call in this fresh process; prints {"seconds": ...}."""
    import tensorflow as tf

    from estimator_lib.config import JobConfig, TPUSettings, TrainingConfig
    from estimator_lib.config.feature_spec import FeatureSpec
    from estimator_lib.estimator import enable_determinism
    from estimator_lib.model.user import UserModel, load_function, train

    m = MODELS[model]
    code = os.path.join(ROOT, "examples", m["example"])
    files = os.path.join(data_dir, "train.tfrecord")
    spec = FeatureSpec.read(os.path.join(data_dir, "feature_spec.json"), label=m["label"])
    user_fn = load_function(m["model_fn"], "model_fn", code)
    started = time.perf_counter()
    if kind.startswith("ours"):
        job = JobConfig(
            tpu=TPUSettings(iterations_per_loop=ITERATIONS_PER_LOOP),
            training=TrainingConfig(
                train_batch_size=BATCH,
                train_steps=steps,
                seed=SEED,
                save_checkpoints_steps=steps,
                shuffle_buffer_size=SHUFFLE,
                deterministic=kind == "ours",
            ),
        )
        train(job, UserModel(m["model_fn"], spec, m["hparams"], code), files, model_dir)
    else:
        parse_spec = {
            f.name: tf.io.FixedLenFeature(list(f.shape), tf.float32 if f.dtype == "float32" else tf.int64)
            for f in spec.features
        }

        def parse(serialized):
            parsed = tf.io.parse_example(serialized, parse_spec)
            parsed = {k: tf.cast(v, tf.int32) if v.dtype == tf.int64 else v for k, v in parsed.items()}
            return parsed, parsed.pop(m["label"])

        def input_fn(params):
            dataset = tf.data.TFRecordDataset(files).shuffle(SHUFFLE, seed=SEED).repeat()
            dataset = dataset.batch(params["batch_size"], drop_remainder=True)
            return dataset.map(parse, num_parallel_calls=tf.data.AUTOTUNE).prefetch(tf.data.AUTOTUNE)

        if kind == "plain+det":
            enable_determinism(SEED)
        tpu = tf.compat.v1.estimator.tpu
        config = tpu.RunConfig(
            model_dir=model_dir,
            tf_random_seed=SEED,
            save_checkpoints_steps=steps,
            tpu_config=tpu.TPUConfig(iterations_per_loop=ITERATIONS_PER_LOOP),
        )
        estimator = tpu.TPUEstimator(
            model_fn=user_fn, config=config, use_tpu=False, train_batch_size=BATCH, params=dict(m["hparams"])
        )
        estimator.train(input_fn, max_steps=steps)
    print(json.dumps({"seconds": time.perf_counter() - started}))


def _run(kind: str, model: str, data_dir: str, steps: int) -> float:
    model_dir = tempfile.mkdtemp(prefix=f"bench-byom-{kind}-")
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2")
    out = subprocess.run(
        [sys.executable, __file__, "--child", kind, model, data_dir, model_dir, str(steps)],
        capture_output=True,
        text=True,
        env=env,
        check=True,
        cwd=ROOT,
    )
    return json.loads(out.stdout.strip().splitlines()[-1])["seconds"]


def _make_data(workdir: str) -> dict:
    dirs = {}
    for model, m in MODELS.items():
        directory = os.path.join(workdir, m["example"])
        if not os.path.exists(os.path.join(directory, "feature_spec.json")):
            script = os.path.join(ROOT, "examples", m["example"], "make_records.py")
            subprocess.run([sys.executable, script, directory], check=True, capture_output=True)
        dirs[model] = directory
    return dirs


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--steps-scale", type=float, default=1.0, help="multiplies each model's training steps")
    parser.add_argument("--workdir", default=None)
    parser.add_argument("--child", nargs=5, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        kind, model, data_dir, model_dir, steps = args.child
        _child(kind, model, data_dir, model_dir, int(steps))
        return
    workdir = args.workdir or tempfile.mkdtemp(prefix="bench-byom-")
    dirs = _make_data(workdir)
    started = time.time()
    print(
        "| model | steps x batch | plain+det (s) | ours, default (s) | ours / plain+det | plain (s) "
        "| ours, deterministic=false (s) | ours / plain |"
    )
    print("|---|---:|---:|---:|---:|---:|---:|---:|")
    for model, m in MODELS.items():
        steps = max(1, round(m["steps"] * args.steps_scale / ITERATIONS_PER_LOOP)) * ITERATIONS_PER_LOOP
        times = {kind: [] for kind in KINDS}
        for r in range(args.rounds):
            for kind in KINDS[r % 4 :] + KINDS[: r % 4]:
                times[kind].append(_run(kind, model, dirs[model], steps))
        med = {k: statistics.median(v) for k, v in times.items()}
        cell = {k: f"{med[k]:.2f} [{min(v):.2f}-{max(v):.2f}]" for k, v in times.items()}
        print(
            f"| {model} | {steps} x {BATCH} | {cell['plain+det']} | {cell['ours']} | "
            f"**{med['ours'] / med['plain+det']:.3f}** | {cell['plain']} | {cell['ours-nodet']} | "
            f"**{med['ours-nodet'] / med['plain']:.3f}** |"
        )
    load = os.getloadavg()
    print(
        f"\n{args.rounds} interleaved rounds, cores {os.cpu_count()}, {time.time() - started:.0f} s, "
        f"load average now {load[0]:.1f} / {load[1]:.1f} / {load[2]:.1f}"
    )


if __name__ == "__main__":
    main()
