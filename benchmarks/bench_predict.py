"""Benchmark: batch prediction throughput against a naive path and a SavedModel ceiling, in one run.

    python benchmarks/bench_predict.py [--rows 200000] [--batch-size 1024] [--naive-rows 20000]

Paths (same model, same records, same batch size):
  batch_predict     estimator_lib.predict.batch_predict as built: TPUEstimator on CPU, padded batches,
                    whole-batch generator, host key join, sharded JSONL committed atomically. Timed end to end
                    (counting the rows, estimator start-up included), with num_examples given (as a pipeline
                    passes prepare's count), and that minus the fixed start-up (a 1-row run's time).
  saved_model       estimator_lib.predict.predict_from_saved_model, the same three ways (start-up: loading
                    the SavedModel and tracing, again a 1-row run's time).
  naive             Estimator.predict one example at a time (yield_single_examples=True) with json.dumps and
                    a key lookup per row: what one writes without thinking about throughput.
  ceiling           a tight loop calling the exported CPU graph's `predict` signature on whole batches of
                    serialized Examples already in memory: no reading, no joining, no writing.
Targets: batch_predict >= 0.8x the ceiling and >= 5x naive.

Two model sizes, each trained briefly on the same synthetic data: the tiny (64, 32) DNN, where the ceiling
measures mostly Example parsing, and a (512, 256, 128) DNN with 32-wide embeddings, where the model dominates.
Both tables are printed at the end.
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
    keys = [records.decode_example(r, schema)["__key__"] for r in records.read_tfrecords(inputs.resolve_files(pattern))]
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


MODELS = {
    "tiny DNN (64, 32), embedding 8": ModelConfig(family="dnn", hidden_units=(64, 32)),
    "DNN (512, 256, 128), embedding 32": ModelConfig(family="dnn", hidden_units=(512, 256, 128), embedding_dim=32),
}


def bench_model(name: str, model: ModelConfig, args, root: str, schema, data: str, naive_data: str, one_row: str):
    """Trains `model` briefly, exports it and times every path on the same records; returns table rows."""
    root = os.path.join(root, name.split(" (")[0].replace(" ", "-") + "-" + "-".join(map(str, model.hidden_units)))
    job = JobConfig(
        tpu=TPUSettings(iterations_per_loop=20),
        training=TrainingConfig(
            train_batch_size=64, predict_batch_size=args.batch_size, train_steps=40, save_checkpoints_steps=40
        ),
        model=model,
    )
    train, _ = synthetic.write_dataset(os.path.join(root, "train"), synthetic.make_rows(512, 3, "multiclass"), schema)
    model_dir = os.path.join(root, "model")
    estimator.train(job, schema, train, model_dir)
    exported = export.export_model(job, schema, model_dir, os.path.join(root, "export"), verify_rows=one_row)
    out = lambda tag: os.path.join(root, tag)  # noqa: E731

    _, startup = timed(lambda: predict.batch_predict(job, schema, model_dir, one_row, out("o1")))
    result, t_batch = timed(lambda: predict.batch_predict(job, schema, model_dir, data, out("o2")))
    assert result.count == args.rows
    known, t_known = timed(
        lambda: predict.batch_predict(job, schema, model_dir, data, out("o3"), num_examples=args.rows)
    )
    assert known.count == args.rows
    sm_args = dict(batch_size=args.batch_size)
    _, sm_startup = timed(
        lambda: predict.predict_from_saved_model(exported.export_dir, schema, one_row, out("o4"), **sm_args)
    )
    sm, t_sm = timed(lambda: predict.predict_from_saved_model(exported.export_dir, schema, data, out("o5"), **sm_args))
    assert sm.count == args.rows
    sm_known, t_sm_known = timed(
        lambda: predict.predict_from_saved_model(
            exported.export_dir, schema, data, out("o6"), num_examples=args.rows, **sm_args
        )
    )
    assert sm_known.count == args.rows
    n_naive, t_naive = timed(lambda: naive_predict(job, schema, model_dir, naive_data, out("naive.jsonl")))
    n_ceiling = ceiling(exported.export_dir, data, args.batch_size)
    t_ceiling = ceiling.seconds  # type: ignore[attr-defined]
    print(f"{name}: batch_predict start-up {startup:.2f}s, SavedModel start-up {sm_startup:.2f}s (1-row runs)")
    return [
        ("batch_predict (end to end, counts rows)", args.rows, t_batch),
        ("batch_predict (num_examples given)", args.rows, t_known),
        ("batch_predict (num_examples, minus start-up)", args.rows, t_known - startup),
        ("predict_from_saved_model (end to end)", args.rows, t_sm),
        ("predict_from_saved_model (num_examples)", args.rows, t_sm_known),
        ("predict_from_saved_model (num_ex., - start-up)", args.rows, t_sm_known - sm_startup),
        ("naive Estimator.predict, 1 example/step", n_naive, t_naive),
        ("ceiling: SavedModel signature loop", n_ceiling, t_ceiling),
    ]


def print_table(name: str, rows, args) -> None:
    rate_naive = rows[-2][1] / rows[-2][2]
    rate_ceiling = rows[-1][1] / rows[-1][2]
    print(f"\n{name}: rows={args.rows} batch_size={args.batch_size} cores={os.cpu_count()}")
    print(f"{'path':<48} {'rows':>8} {'seconds':>8} {'examples/s':>11} {'x ceiling':>9} {'x naive':>8}")
    for path, n, seconds in rows:
        rate = n / seconds
        ratios = f"{rate / rate_ceiling:>9.2f} {rate / rate_naive:>8.1f}"
        print(f"{path:<48} {n:>8} {seconds:>8.2f} {rate:>11.0f} {ratios}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=int, default=200_000)
    parser.add_argument("--batch-size", type=int, default=1024)
    parser.add_argument("--naive-rows", type=int, default=20_000, help="rows for the (slow) naive path")
    parser.add_argument("--workdir", default=None)
    parser.add_argument("--models", default="all", choices=["all", "tiny", "large"], help="model sizes to run")
    args = parser.parse_args()
    root = args.workdir or tempfile.mkdtemp(prefix="bench-predict-")

    schema = synthetic.make_schema("multiclass")
    data = write_records(os.path.join(root, "data"), args.rows, schema)
    naive_data = write_records(os.path.join(root, "naive"), args.naive_rows, schema)
    one_row = write_records(os.path.join(root, "one"), 1, schema, shards=1)
    chosen = list(MODELS.items())
    chosen = chosen[:1] if args.models == "tiny" else chosen[1:] if args.models == "large" else chosen
    tables = [(name, bench_model(name, model, args, root, schema, data, naive_data, one_row)) for name, model in chosen]
    for name, rows in tables:
        print_table(name, rows, args)


if __name__ == "__main__":
    main()
