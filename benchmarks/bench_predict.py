"""Benchmark: batch prediction throughput against a naive path and a SavedModel ceiling, in one run.

    python benchmarks/bench_predict.py [--rows 200000] [--batch-size 1024] [--naive-rows 20000]

Paths (same model, same records, same batch size):
  batch_predict     estimator_lib.predict.batch_predict as built: TPUEstimator on CPU, padded batches,
                    whole-batch generator, host key join, sharded JSONL committed atomically. Timed end to end
                    (estimator start-up included) and without the fixed start-up (a 1-row run's time).
  saved_model       estimator_lib.predict.predict_from_saved_model, end to end.
  naive             Estimator.predict one example at a time (yield_single_examples=True) with json.dumps and
                    a key lookup per row: what one writes without thinking about throughput.
  ceiling           a tight loop calling the exported CPU graph's `predict` signature on whole batches of
                    serialized Examples already in memory: no reading, no joining, no writing.
Targets: batch_predict >= 0.8x the ceiling and >= 5x naive.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests"))

import synthetic  # noqa: E402  (tests/synthetic.py: tiny datasets drawn from a known rule)
import tensorflow as tf  # noqa: E402

from estimator_lib import estimator, export, inputs, predict, records  # noqa: E402
from estimator_lib.config import JobConfig, ModelConfig, TPUSettings, TrainingConfig  # noqa: E402


def write_records(directory: str, n: int, schema, shards: int = 4) -> str:
    """n rows (64 distinct feature rows, unique keys) in `shards` files; returns the file pattern."""
    base = synthetic.make_rows(64, seed=7, task="multiclass")
    os.makedirs(directory, exist_ok=True)
    writers = [tf.io.TFRecordWriter(os.path.join(directory, f"part-{s:05d}.tfrecord")) for s in range(shards)]
    for i in range(n):
        example = records.encode_example(base[i % 64], schema, key=f"row-{i}", with_label=False)
        writers[i % shards].write(example.SerializeToString())
    for w in writers:
        w.close()
    return os.path.join(directory, "part-*.tfrecord")


def timed(fn):
    start = time.perf_counter()
    result = fn()
    return result, time.perf_counter() - start


def naive_predict(job, schema, model_dir, pattern, out_path) -> int:
    """One example at a time: the estimator's default generator, json.dumps per row."""
    est = estimator.build_estimator(job, schema, model_dir)
    input_fn = inputs.predict_input_fn_builder(pattern, schema)
    keys = [
        records.decode_example(r, schema)["__key__"]
        for r in records.read_tfrecords(inputs.resolve_files(pattern))
    ]
    count = 0
    with open(out_path, "w") as f:
        for p in est.predict(input_fn):
            if p["is_padding"] == 1.0:
                continue
            row = {
                "key": keys[int(p["example_index"])],
                "class": schema.label.classes[int(p["class_ids"])],
                "class_id": int(p["class_ids"]),
                "probabilities": {c: float(v) for c, v in zip(schema.label.classes, p["probabilities"])},
            }
            f.write(json.dumps(row) + "\n")
            count += 1
    return count


def ceiling(export_dir: str, pattern: str, batch_size: int) -> int:
    """Whole batches of serialized Examples in memory through the `predict` signature, nothing else."""
    model = export.load_serving_model(export_dir)
    serialized = list(records.read_tfrecords(inputs.resolve_files(pattern)))
    batches = [tf.constant(serialized[i : i + batch_size]) for i in range(0, len(serialized), batch_size)]
    model.signature(examples=batches[0])  # warm-up (first call traces)
    start = time.perf_counter()
    for batch in batches:
        outputs = model.signature(examples=batch)
        outputs["probabilities"].numpy()
    ceiling.seconds = time.perf_counter() - start  # type: ignore[attr-defined]
    model.close()
    return len(serialized)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--rows", type=int, default=200_000)
    parser.add_argument("--batch-size", type=int, default=1024)
    parser.add_argument("--naive-rows", type=int, default=20_000, help="rows for the (slow) naive path")
    parser.add_argument("--workdir", default=None)
    args = parser.parse_args()
    root = args.workdir or tempfile.mkdtemp(prefix="bench-predict-")

    schema = synthetic.make_schema("multiclass")
    job = JobConfig(
        tpu=TPUSettings(iterations_per_loop=20),
        training=TrainingConfig(
            train_batch_size=64, predict_batch_size=args.batch_size, train_steps=40, save_checkpoints_steps=40
        ),
        model=ModelConfig(family="dnn", hidden_units=(64, 32)),
    )
    train, _ = synthetic.write_dataset(
        os.path.join(root, "train"), synthetic.make_rows(512, 3, "multiclass"), schema
    )
    model_dir = os.path.join(root, "model")
    estimator.train(job, schema, train, model_dir)
    data = write_records(os.path.join(root, "data"), args.rows, schema)
    naive_data = write_records(os.path.join(root, "naive"), args.naive_rows, schema)
    one_row = write_records(os.path.join(root, "one"), 1, schema, shards=1)
    exported = export.export_model(job, schema, model_dir, os.path.join(root, "export"), verify_rows=one_row)

    _, startup = timed(
        lambda: predict.batch_predict(job, schema, model_dir, one_row, os.path.join(root, "o1"))
    )
    result, t_batch = timed(
        lambda: predict.batch_predict(job, schema, model_dir, data, os.path.join(root, "o2"))
    )
    assert result.count == args.rows
    sm, t_sm = timed(
        lambda: predict.predict_from_saved_model(
            exported.export_dir, schema, data, os.path.join(root, "o3"), batch_size=args.batch_size
        )
    )
    assert sm.count == args.rows
    n_naive, t_naive = timed(
        lambda: naive_predict(job, schema, model_dir, naive_data, os.path.join(root, "naive.jsonl"))
    )
    n_ceiling = ceiling(exported.export_dir, data, args.batch_size)
    t_ceiling = ceiling.seconds  # type: ignore[attr-defined]

    rate_ceiling = n_ceiling / t_ceiling
    rate_naive = n_naive / t_naive
    rows = [
        ("batch_predict (end to end)", args.rows, t_batch),
        ("batch_predict (minus 1-row start-up)", args.rows, t_batch - startup),
        ("predict_from_saved_model", args.rows, t_sm),
        ("naive Estimator.predict, 1 example/step", n_naive, t_naive),
        ("ceiling: SavedModel signature loop", n_ceiling, t_ceiling),
    ]
    print(f"\nrows={args.rows} batch_size={args.batch_size} cores={os.cpu_count()} start-up={startup:.2f}s")
    print(f"{'path':<42} {'rows':>8} {'seconds':>8} {'examples/s':>11} {'x ceiling':>9} {'x naive':>8}")
    for name, n, seconds in rows:
        rate = n / seconds
        print(
            f"{name:<42} {n:>8} {seconds:>8.2f} {rate:>11.0f} {rate / rate_ceiling:>9.2f} {rate / rate_naive:>8.1f}"
        )


if __name__ == "__main__":
    main()
