"""A user's own model_fn trained through the pipeline's train stage (`estimator_lib.engine.user.stages.train` on
a preparation of the records, what the stage's component calls) against the same model_fn in a plain
TPUEstimator, as its author would write it, on the same records.

    python benchmarks/bench_byom.py [--rounds N] [--steps-scale F] [--strict] [--only EXAMPLE ...] [--workdir DIR]

The records are prepared once, before any timing (`model.user.prepare.prepare_records` with the pipeline's
defaults: the train split is a byte copy of train.tfrecord in two shards); the stage's call starts from the
published preparation (`prepare.load_records`, inside the clock) as the component does.

The plain run is the strongest version of the hand-written job: a `TPUEstimator(use_tpu=False)` with the same
RunConfig (seed, iterations_per_loop, checkpoint cadence, batch size, hyperparameters) and the user's own
input_fn (TFRecordDataset, seeded shuffle, repeat, batch with drop_remainder, parse after batching, parallel
map, prefetch). Each call runs in a fresh process and is timed inside it, from before the estimator is built to
the return of `train` (the whole call a user waits for; imports excluded, the same for both). The kinds are
interleaved (the order rotates by round); the table gives the median of the rounds with [min-max] and the
ratio ours / plain of the medians (time: lower is better; the target is at most 1.05). The steady state is
read from the run's own `global_step/sec` events (one per step, both kinds): the steps after the first
`iterations_per_loop` divided by their wall time.

Two pairs, like for like: the library's default is bitwise-repeatable training (`training.deterministic`:
seeds and TensorFlow's op determinism, whose deterministic kernels cost time), so it is compared with the plain
TPUEstimator given the same determinism (`plain+det`); `training.deterministic=false` is compared with the
plain TPUEstimator as most users write it. `--strict` adds the stage as a local run configures it
(`tpu.strict=true`, run-local's default: the model_fn built and compiled for the TPU in every mode before
training, a check the plain estimator has no counterpart for), reported against plain+det.
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
STRICT = "ours+strict"
PREPARED = "prepared"
TRAIN, EVALUATE, PREDICT = "train", "evaluate", "predict"
SCORED = "train"  # the split evaluated and predicted: the larger one


def _prepare(model: str, data_dir: str) -> None:
    """Publishes the preparation of `data_dir`'s records the stage reads (once, before any timing)."""
    from estimator_lib.config import PrepareConfig
    from estimator_lib.model.user.prepare import prepare_records

    config = PrepareConfig(
        data=(os.path.join(data_dir, "train.tfrecord"),),
        eval_data=(os.path.join(data_dir, "eval.tfrecord"),),
        feature_spec=os.path.join(data_dir, "feature_spec.json"),
        label=MODELS[model]["label"],
    )
    prepare_records(config, os.path.join(data_dir, PREPARED))


def _stage_job(kind: str, model: str, steps: int):
    from estimator_lib.config import JobConfig, ModelConfig, TPUSettings, TrainingConfig

    m = MODELS[model]
    return JobConfig(
        tpu=TPUSettings(iterations_per_loop=ITERATIONS_PER_LOOP, strict=kind == STRICT),
        training=TrainingConfig(
            train_batch_size=BATCH,
            train_steps=steps,
            seed=SEED,
            save_checkpoints_steps=steps,
            shuffle_buffer_size=SHUFFLE,
            deterministic=kind != "ours-nodet",
        ),
        model=ModelConfig(
            model_fn=m["model_fn"], code=os.path.join(ROOT, "examples", m["example"]), hparams=m["hparams"]
        ),
    )


def _steady_steps_per_second(model_dir: str) -> float:
    """Steps per second after the first loop (the first half of a shorter run), from the run's `global_step/sec`
    events (one per step)."""
    import glob

    import tensorflow as tf

    times = {}
    for path in glob.glob(os.path.join(model_dir, "events.out.tfevents.*")):
        for event in tf.compat.v1.train.summary_iterator(path):
            if any(v.tag == "global_step/sec" for v in event.summary.value):
                times[event.step] = event.wall_time
    last = max(times)
    first = min(s for s in times if s >= min(ITERATIONS_PER_LOOP, last // 2))
    return (last - first) / (times[last] - times[first])


def _parse_fn(spec, label: str, with_label: bool = True):
    """The user's parse of a batch of serialized records: every spec feature, int64 as int32, (features, label)."""
    import tensorflow as tf

    parse_spec = {
        f.name: tf.io.FixedLenFeature(list(f.shape), tf.float32 if f.dtype == "float32" else tf.int64)
        for f in spec.features
        if with_label or f.name != label
    }

    def parse(serialized):
        parsed = tf.io.parse_example(serialized, parse_spec)
        parsed = {k: tf.cast(v, tf.int32) if v.dtype == tf.int64 else v for k, v in parsed.items()}
        return (parsed, parsed.pop(label)) if with_label else parsed

    return parse


def _plain_estimator(kind: str, model: str, model_dir: str, steps: int, user_fn):
    """The TPUEstimator a user writes for their model_fn (with op determinism for plain+det)."""
    import tensorflow as tf

    from estimator_lib.estimator import enable_determinism

    if kind == "plain+det":
        enable_determinism(SEED)
    tpu = tf.compat.v1.estimator.tpu
    config = tpu.RunConfig(
        model_dir=model_dir,
        tf_random_seed=SEED,
        save_checkpoints_steps=steps,
        tpu_config=tpu.TPUConfig(iterations_per_loop=ITERATIONS_PER_LOOP),
    )
    return tpu.TPUEstimator(
        model_fn=user_fn,
        config=config,
        use_tpu=False,
        train_batch_size=BATCH,
        eval_batch_size=BATCH,
        predict_batch_size=BATCH,
        params=dict(MODELS[model]["hparams"]),
    )


def _plain_call(stage: str, kind: str, model: str, files: str, model_dir: str, steps: int, user_fn, spec) -> None:
    """The plain TPUEstimator's call for `stage`: train (the user's input_fn: seeded shuffle, repeat, batch with
    drop_remainder, parse, prefetch), evaluate every record, or predict every record into JSON Lines."""
    import tensorflow as tf

    label = MODELS[model]["label"]
    estimator = _plain_estimator(kind, model, model_dir, steps, user_fn)

    def input_fn(params, train=stage == TRAIN, with_label=stage != PREDICT):
        dataset = tf.data.TFRecordDataset(files)
        if train:
            dataset = dataset.shuffle(SHUFFLE, seed=SEED).repeat()
        dataset = dataset.batch(params["batch_size"], drop_remainder=train)
        parse = _parse_fn(spec, label, with_label)
        return dataset.map(parse, num_parallel_calls=tf.data.AUTOTUNE).prefetch(tf.data.AUTOTUNE)

    if stage == TRAIN:
        estimator.train(input_fn, max_steps=steps)
    elif stage == EVALUATE:
        estimator.evaluate(input_fn)
    else:
        with open(os.path.join(model_dir, "predictions.jsonl"), "w", encoding="utf-8") as out:
            for index, row in enumerate(estimator.predict(input_fn, yield_single_examples=True)):
                out.write(json.dumps({"index": index, **{k: v.tolist() for k, v in row.items()}}) + "\n")


def _ours_call(stage: str, kind: str, model: str, data_dir: str, model_dir: str, steps: int) -> None:
    """Our call for `stage`: the train stage's `stages.train`; the evaluation's metric pass over every record
    (`run.evaluate`, what `stages.evaluate` runs before its verdict and feature importance); `stages.predict`."""
    from estimator_lib.engine.user import run, stages
    from estimator_lib.model.user import prepare

    job = _stage_job(kind, model, steps)
    prepared = prepare.load_records(os.path.join(data_dir, PREPARED))
    if stage == TRAIN:
        stages.train(job, prepared, model_dir)
    elif stage == EVALUATE:
        user = stages.user_model(job, prepared)
        run.evaluate(job, user, prepared.files(SCORED), model_dir, num_examples=prepared.counts[SCORED])
    else:
        stages.predict(job, prepared, model_dir, SCORED, tempfile.mkdtemp(prefix="predict-", dir=model_dir))


def _child(kind: str, model: str, data_dir: str, model_dir: str, steps: int) -> None:
    """One timed call in this fresh process; prints {"seconds": ..., "steps_per_second": ...} (training) or
    {"seconds": ...}. `kind` is "<variant>" (training) or "<stage>:<variant>" (evaluate, predict: `model_dir`
    then holds the trained model, and they read the prepared train split, the larger one)."""
    from estimator_lib.config.feature_spec import FeatureSpec
    from estimator_lib.model.user import load_function

    stage, _, variant = kind.rpartition(":")
    stage = stage or TRAIN
    m = MODELS[model]
    code = os.path.join(ROOT, "examples", m["example"])
    spec = FeatureSpec.read(os.path.join(data_dir, "feature_spec.json"), label=m["label"])
    user_fn = load_function(m["model_fn"], "model_fn", code)
    files = os.path.join(data_dir, "train.tfrecord")
    started = time.perf_counter()
    if variant.startswith("ours"):
        _ours_call(stage, variant, model, data_dir, model_dir, steps)
    else:
        _plain_call(stage, variant, model, files, model_dir, steps, user_fn, spec)
    seconds = time.perf_counter() - started
    if stage != TRAIN:
        print(json.dumps({"seconds": seconds}))
        return
    print(json.dumps({"seconds": seconds, "steps_per_second": _steady_steps_per_second(model_dir)}))


def _run(kind: str, model: str, data_dir: str, steps: int, trained: str = "", keep: str = "") -> dict:
    """One child call in a fresh process: in a new model directory, a copy of `trained` (made before the call),
    or `keep` (left in place)."""
    model_dir = keep or tempfile.mkdtemp(prefix=f"bench-byom-{kind.replace(':', '-')}-")
    if trained:
        shutil.copytree(trained, model_dir, dirs_exist_ok=True)
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2")
    out = subprocess.run(
        [sys.executable, __file__, "--child", kind, model, data_dir, model_dir, str(steps)],
        capture_output=True,
        text=True,
        env=env,
        cwd=ROOT,
    )
    if out.returncode:
        raise RuntimeError(f"{kind} {model} failed:\n{out.stderr[-3000:]}")
    if not keep:
        shutil.rmtree(model_dir, ignore_errors=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def training_steps(model: str, scale: float = 1.0) -> int:
    """The model's training steps times `scale`, in whole loops of `ITERATIONS_PER_LOOP`."""
    return max(1, round(MODELS[model]["steps"] * scale / ITERATIONS_PER_LOOP)) * ITERATIONS_PER_LOOP


def make_data(workdir: str) -> dict:
    dirs = {}
    for model, m in MODELS.items():
        directory = os.path.join(workdir, m["example"])
        if not os.path.exists(os.path.join(directory, "feature_spec.json")):
            script = os.path.join(ROOT, "examples", m["example"], "make_records.py")
            subprocess.run([sys.executable, script, directory], check=True, capture_output=True)
        if not os.path.exists(os.path.join(directory, PREPARED)):
            command = [sys.executable, __file__, "--prepare", model, directory]
            subprocess.run(command, check=True, capture_output=True, cwd=ROOT)
        dirs[model] = directory
    return dirs


def _cell(values: list, digits: int = 2) -> str:
    return f"{statistics.median(values):.{digits}f} [{min(values):.{digits}f}-{max(values):.{digits}f}]"


def interleaved(model: str, data_dir: str, steps: int, kinds: tuple, rounds: int, trained: str = "") -> dict:
    """{kind: [child results]}, the kinds interleaved, the order rotating by round."""
    results = {kind: [] for kind in kinds}
    for r in range(rounds):
        shift = r % len(kinds)
        for kind in kinds[shift:] + kinds[:shift]:
            results[kind].append(_run(kind, model, data_dir, steps, trained=trained))
    return results


def trained_model(model: str, data_dir: str, steps: int) -> str:
    """The model the evaluation and prediction calls start from: trained once by the stage, kept."""
    model_dir = os.path.join(data_dir, f"trained-{steps}")
    if not os.path.exists(os.path.join(model_dir, "checkpoint")):
        _run("ours", model, data_dir, steps, keep=model_dir)
    return model_dir


def _stage_table(results: dict) -> None:
    """Evaluation and prediction: seconds of the whole call and the ratios ours / plain of the medians."""
    print(
        "\n| model | stage | plain+det (s) | ours, default (s) | ours / plain+det | plain (s) "
        "| ours, deterministic=false (s) | ours / plain |"
    )
    print("|---|---|---:|---:|---:|---:|---:|---:|")
    for (model, stage), by_kind in results.items():
        t = {k.rpartition(":")[2]: [r["seconds"] for r in v] for k, v in by_kind.items()}
        med = {k: statistics.median(v) for k, v in t.items()}
        print(
            f"| {model} | {stage} | {_cell(t['plain+det'])} | {_cell(t['ours'])} | "
            f"**{med['ours'] / med['plain+det']:.3f}** | {_cell(t['plain'])} | {_cell(t['ours-nodet'])} | "
            f"**{med['ours-nodet'] / med['plain']:.3f}** |"
        )


def _tables(results: dict, steps: dict, strict: bool) -> None:
    """The whole-call table (seconds, ratios of medians) and the steady-state table (steps/s after the first loop;
    the ratio is of time per step, ours / plain)."""
    extra = (" | ours, tpu.strict=true (s) | strict / plain+det", "|---:|---:") if strict else ("", "")
    print(
        "| model | steps x batch | plain+det (s) | ours, default (s) | ours / plain+det | plain (s) "
        f"| ours, deterministic=false (s) | ours / plain{extra[0]} |"
    )
    print(f"|---|---:|---:|---:|---:|---:|---:|---:{extra[1]}|")
    for model, by_kind in results.items():
        t = {k: [r["seconds"] for r in v] for k, v in by_kind.items()}
        med = {k: statistics.median(v) for k, v in t.items()}
        row = (
            f"| {model} | {steps[model]} x {BATCH} | {_cell(t['plain+det'])} | {_cell(t['ours'])} | "
            f"**{med['ours'] / med['plain+det']:.3f}** | {_cell(t['plain'])} | {_cell(t['ours-nodet'])} | "
            f"**{med['ours-nodet'] / med['plain']:.3f}** |"
        )
        if strict:
            row += f" {_cell(t[STRICT])} | {med[STRICT] / med['plain+det']:.3f} |"
        print(row)
    print(
        "\n| model | plain+det (steps/s) | ours, default (steps/s) | time per step, ours / plain+det "
        "| plain (steps/s) | ours, deterministic=false (steps/s) | time per step, ours / plain |"
    )
    print("|---|---:|---:|---:|---:|---:|---:|")
    for model, by_kind in results.items():
        rate = {k: [r["steps_per_second"] for r in v] for k, v in by_kind.items()}
        med = {k: statistics.median(v) for k, v in rate.items()}
        print(
            f"| {model} | {_cell(rate['plain+det'], 0)} | {_cell(rate['ours'], 0)} | "
            f"{med['plain+det'] / med['ours']:.3f} | {_cell(rate['plain'], 0)} | {_cell(rate['ours-nodet'], 0)} | "
            f"{med['plain'] / med['ours-nodet']:.3f} |"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--steps-scale", type=float, default=1.0, help="multiplies each model's training steps")
    parser.add_argument("--strict", action="store_true", help="also time the stage with tpu.strict=true")
    examples = [m["example"] for m in MODELS.values()]
    parser.add_argument("--only", nargs="+", choices=examples, default=examples, help="the models to time")
    stages = (TRAIN, EVALUATE, PREDICT)
    parser.add_argument("--stages", nargs="+", choices=stages, default=list(stages), help="the calls to time")
    parser.add_argument("--workdir", default=None)
    parser.add_argument("--child", nargs=5, help=argparse.SUPPRESS)
    parser.add_argument("--prepare", nargs=2, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        kind, model, data_dir, model_dir, steps = args.child
        _child(kind, model, data_dir, model_dir, int(steps))
        return
    if args.prepare:
        _prepare(*args.prepare)
        return
    workdir = args.workdir or tempfile.mkdtemp(prefix="bench-byom-")
    dirs = make_data(workdir)
    started = time.time()
    kinds = KINDS + ((STRICT,) if args.strict else ())
    steps, results, scored = {}, {}, {}
    for model in (k for k, v in MODELS.items() if v["example"] in args.only):
        steps[model] = training_steps(model, args.steps_scale)
        if TRAIN in args.stages:
            results[model] = interleaved(model, dirs[model], steps[model], kinds, args.rounds)
        for stage in (s for s in args.stages if s != TRAIN):
            trained = trained_model(model, dirs[model], steps[model])
            stage_kinds = tuple(f"{stage}:{k}" for k in KINDS)
            scored[model, stage] = interleaved(model, dirs[model], steps[model], stage_kinds, args.rounds, trained)
    if results:
        _tables(results, steps, args.strict)
    if scored:
        _stage_table(scored)
    load = os.getloadavg()
    print(
        f"\n{args.rounds} interleaved rounds, cores {os.cpu_count()}, {time.time() - started:.0f} s, "
        f"load average now {load[0]:.1f} / {load[1]:.1f} / {load[2]:.1f}"
    )


if __name__ == "__main__":
    main()
