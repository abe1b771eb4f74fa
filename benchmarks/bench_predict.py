"""Benchmark: batch prediction throughput against a naive path and a SavedModel ceiling, in one run.

    python benchmarks/bench_predict.py [--rows 200000] [--batch-size 1024] [--naive-rows 20000] [--rounds 3]

Paths (same model, same records, same batch size):
  batch_predict     estimator_lib.predict.batch_predict as built: TPUEstimator on CPU, padded batches,
                    whole-batch generator, keys unpacked from the predictions, sharded JSONL committed
                    atomically. Timed end to end (counting the rows, estimator start-up included), with
                    num_examples given (as a pipeline passes prepare's count), and that minus the fixed
                    start-up (the same round's 1-row run: graph, session, restore, commit).
  saved_model       estimator_lib.predict.predict_from_saved_model, the same three ways (start-up: loading
                    the SavedModel and tracing, again a 1-row run's time).
  naive             Estimator.predict one example at a time (yield_single_examples=True) with json.dumps and
                    a key lookup per row: what one writes without thinking about throughput.
  ceiling           a tight loop calling the exported CPU graph's `predict` signature on whole batches of
                    serialized Examples already in memory: no reading, no joining, no writing, no start-up.
  generator alone   batch_predict's estimator side only: the same input_fn and whole-batch generator, the
                    outputs dropped (read + parse + model; no formatting or writing), with its own start-up
                    row, to tell the estimator's cost from the formatting's.
  part alone        pieces of work every end-to-end path has and the ceiling has not, each timed alone:
                    reading + batching the records (no parsing), formatting + hashing the output rows (no
                    model), and counting each input file's records for the rows' origins (`record_origins`).
                    With the tiny model they show what bounds batch prediction on this machine.
Targets: batch_predict >= 0.8x the ceiling and >= 5x naive. The ceiling has no start-up, so the like-for-like
comparison is the "minus start-up" row; the end-to-end rows are printed next to it.

Every path runs once per round, in `--rounds` interleaved rounds (naive: once), each run right after a run of
the ceiling. Printed per path: the best round (ratio best to best), the median round, the "paired" ratio
(the median over rounds of this run's rate over the rate of the ceiling run just before it: a slow spell of
this shared machine hits both runs of a pair alike) and the process CPU time per row (all threads), which a
slow spell does not inflate, the cores it kept busy (CPU time / wall time) and the machine's CPU steal
during it (/proc/stat: time the hypervisor gave this VM's vCPUs to something else). A last line gives the bound
this machine sets: the ceiling's CPU per row plus the "part alone" ones, spread over every core.

Two model sizes, each trained briefly on the same synthetic data: the tiny (64, 32) DNN, where the ceiling
measures mostly Example parsing, and a (512, 256, 128) DNN with 32-wide embeddings, where the model dominates.
Both tables are printed at the end.
"""

from __future__ import annotations

import argparse
import dataclasses
import hashlib
import json
import os
import statistics
import sys
import tempfile
import time
from typing import Dict, List, Tuple

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests"))

import numpy as np  # noqa: E402
import synthetic  # noqa: E402  (tests/synthetic.py: tiny datasets drawn from a known rule)
import tensorflow as tf  # noqa: E402

from estimator_lib import estimator, export, predict  # noqa: E402
from estimator_lib.config import JobConfig, ModelConfig, TPUSettings, TrainingConfig  # noqa: E402
from estimator_lib.data import records  # noqa: E402
from estimator_lib.model import inputs  # noqa: E402
from estimator_lib.predict import jsonl as predict_jsonl  # noqa: E402
from estimator_lib.predict import shards as predict_shards  # noqa: E402
from estimator_lib.predict.origins import RecordOrigins, record_origins  # noqa: E402
from estimator_lib.schema import KEY_FEATURE  # noqa: E402


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


def machine_ticks() -> Tuple[int, int]:
    """(steal, total) CPU ticks of the whole machine so far, from /proc/stat; (0, 0) where there is none.
    Steal is time the hypervisor ran something else while this VM had work to run."""
    try:
        with open("/proc/stat", encoding="utf-8") as f:
            fields = [int(x) for x in f.readline().split()[1:]]
    except (OSError, ValueError):
        return 0, 0
    return (fields[7] if len(fields) > 7 else 0), sum(fields[:8])


def timed(fn) -> Tuple[int, float, float, float]:
    """(fn's result, wall seconds, CPU seconds of this process: every thread, user + system, and the share
    of the machine's CPU time stolen by the hypervisor meanwhile)."""
    steal, total = machine_ticks()
    cpu, start = time.process_time(), time.perf_counter()
    result = fn()
    seconds, cpu = time.perf_counter() - start, time.process_time() - cpu
    steal_after, total_after = machine_ticks()
    stolen = (steal_after - steal) / (total_after - total) if total_after > total else 0.0
    return result, seconds, cpu, stolen


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


def bench_model(name: str, model: ModelConfig, args, root: str, schema, data: str, naive_data: str, one_row: str):
    """Trains `model` briefly, exports it and times every path on the same records; returns table rows.

    The paths run in `args.rounds` interleaved rounds (each path once per round), so a slow spell of this
    shared machine hits every path alike; the table reports each path's best and median round.
    """
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
    sm_args = dict(batch_size=args.batch_size)
    signature_loop = Ceiling(exported.export_dir, data, args.batch_size)

    def batch_predict(pattern, tag, **kwargs):
        return predict.batch_predict(job, schema, model_dir, pattern, out(tag), **kwargs).count

    def saved_model(pattern, tag, **kwargs):
        return predict.predict_from_saved_model(
            exported.export_dir, schema, pattern, out(tag), **sm_args, **kwargs
        ).count

    known = dict(num_examples=args.rows)
    paths = {
        "batch_predict (end to end, counts rows)": lambda: batch_predict(data, "o1"),
        "batch_predict (num_examples given)": lambda: batch_predict(data, "o2", **known),
        "batch_predict start-up (1-row run)": lambda: batch_predict(one_row, "o3"),
        "predict_from_saved_model (end to end)": lambda: saved_model(data, "o4"),
        "predict_from_saved_model (num_examples)": lambda: saved_model(data, "o5", **known),
        "predict_from_saved_model start-up (1-row run)": lambda: saved_model(one_row, "o6"),
        "part: estimator generator alone (num_examples)": lambda: generator_only(
            job, schema, model_dir, data, args.rows
        ),
        "part: estimator generator alone start-up (1-row run)": lambda: generator_only(
            job, schema, model_dir, one_row, 1
        ),
        "part alone: read + batch the records": lambda: read_only(data, args.batch_size),
        "part alone: format + sha256 the output rows": Formatting(schema, args.rows, args.batch_size).run,
        "part alone: count each file's records (origins)": lambda: record_origins(inputs.resolve_files(data)).count,
    }
    ceiling = "ceiling: SavedModel signature loop"
    # Every run is paired with a ceiling run just before it: a slow spell of the machine (CPU steal on this
    # shared VM reaches 25%) then hits both, and their ratio survives it.
    times: Dict[str, List[Run]] = {ceiling: [], **{k: [] for k in paths}}
    for _ in range(args.rounds):
        for path, fn in paths.items():
            times[path].append(paired(fn, signature_loop, times[ceiling]))
    naive = "naive Estimator.predict, 1 example/step"
    times[naive] = [
        paired(
            lambda: naive_predict(job, schema, model_dir, naive_data, out("naive.jsonl")),
            signature_loop,
            times[ceiling],
        )
    ]
    signature_loop.close()
    for path, runs in times.items():
        expected = 1 if "1-row" in path else args.naive_rows if path.startswith("naive") else args.rows
        assert all(run.rows == expected for run in runs), (path, runs)
    return derive_rows(times, args.rows)


@dataclasses.dataclass(frozen=True)
class Run:
    rows: int
    seconds: float
    cpu_seconds: float
    ceiling_seconds: float  # the paired ceiling run's (its own, for a ceiling run)
    steal: float = 0.0  # share of the machine's CPU time the hypervisor took during the run


def paired(fn, signature_loop: "Ceiling", ceiling_runs: List[Run]) -> Run:
    """Runs the ceiling, then `fn`; records the ceiling run too and returns `fn`'s run paired with it."""
    n, seconds, cpu, steal = timed(signature_loop.run)
    ceiling_runs.append(Run(n, seconds, cpu, seconds, steal))
    rows, fn_seconds, fn_cpu, fn_steal = timed(fn)
    return Run(rows, fn_seconds, fn_cpu, seconds, fn_steal)


def derive_rows(times: Dict[str, List[Run]], rows: int):
    """Table rows (path, rows, runs), adding the start-up-free rates."""
    table = []
    for path, runs in times.items():
        if "start-up" in path:
            continue
        table.append((path, runs[0].rows, runs))
        startup_path = path.split(" (")[0] + " start-up (1-row run)"
        if "num_examples" in path and startup_path in times:
            # Round by round: this round's run minus this round's 1-row run (graph, session, restore, commit).
            startups = times[startup_path]
            steady = [
                Run(rows, r.seconds - r0.seconds, r.cpu_seconds - r0.cpu_seconds, r.ceiling_seconds, r.steal)
                for r, r0 in zip(runs, startups)
            ]
            table.append((path.replace(")", ", minus start-up)"), rows, steady))
            median_startup = statistics.median(r.seconds for r in startups)
            table.append((f"  (start-up: 1-row run, median {median_startup:.2f}s)", None, None))
    return table


def generator_only(job, schema, model_dir, pattern, num_examples: int) -> int:
    """batch_predict's estimator side alone: the same input_fn, predict keys and whole-batch generator,
    consumed to the end with the outputs dropped (no key unpacking, formatting or writing)."""
    from estimator_lib.schema import PADDING_FEATURE

    est = estimator.build_estimator(job, schema, model_dir)
    input_fn = inputs.predict_input_fn_builder(pattern, schema, num_examples)
    batches = est.predict(input_fn, predict_keys=predict.fetched_keys(schema), yield_single_examples=False)
    return sum(int((batch[PADDING_FEATURE] == 0.0).sum()) for batch in batches)


def read_only(pattern: str, batch_size: int) -> int:
    """What every path pays before parsing: the records read and batched, as the predict input does."""
    dataset = tf.data.TFRecordDataset(inputs.resolve_files(pattern)).batch(batch_size)
    return sum(int(batch.shape[0]) for batch in dataset.with_options(inputs.fixed_pipeline_options()))


class Formatting:
    """What every path pays after the model: rows formatted as batch_predict does (`shards.FORMAT_ROWS` at a
    time) and hashed."""

    def __init__(self, schema, rows: int, batch_size: int):
        rng = np.random.default_rng(0)
        origins = RecordOrigins(["bench.tfrecord"], [rows])
        self.formatter = predict_jsonl.RowFormatter(schema, (), origins)
        self.keys = np.array([f"row-{i}".encode() for i in range(rows)], dtype="S64")
        self.probabilities = rng.dirichlet(np.ones(schema.label.num_logits), rows).astype(np.float32)
        self.class_ids = self.probabilities.argmax(axis=1).astype(np.int32)
        self.batch_size = batch_size

    def run(self) -> int:
        digest, piece = hashlib.sha256(), predict_shards.FORMAT_ROWS
        for start in range(0, len(self.keys), piece):
            end = start + piece
            host = {KEY_FEATURE: self.keys[start:end]}
            outputs = {"probabilities": self.probabilities[start:end], "class_ids": self.class_ids[start:end]}
            digest.update(self.formatter.format(host, outputs, start))
        return len(self.keys)


class Ceiling:
    """Whole batches of serialized Examples in memory through the `predict` signature, nothing else."""

    def __init__(self, export_dir: str, pattern: str, batch_size: int):
        self.model = export.load_serving_model(export_dir)
        serialized = list(records.read_tfrecords(inputs.resolve_files(pattern)))
        self.count = len(serialized)
        self.batches = [tf.constant(serialized[i : i + batch_size]) for i in range(0, len(serialized), batch_size)]
        self.model.signature(examples=self.batches[0])  # warm-up (the first call traces)

    def run(self) -> int:
        for batch in self.batches:
            self.model.signature(examples=batch)["probabilities"].numpy()
        return self.count

    def close(self) -> None:
        self.model.close()


MODELS = {
    "tiny DNN (64, 32), embedding 8": ModelConfig(family="dnn", hidden_units=(64, 32)),
    "DNN (512, 256, 128), embedding 32": ModelConfig(family="dnn", hidden_units=(512, 256, 128), embedding_dim=32),
}


def print_table(name: str, table, args) -> None:
    ceiling = next(runs for path, _, runs in table if path.startswith("ceiling"))
    naive = next(runs for path, _, runs in table if path.startswith("naive"))
    best_ceiling = args.rows / min(r.seconds for r in ceiling)
    best_naive = args.naive_rows / min(r.seconds for r in naive)
    print(f"\n{name}: rows={args.rows} batch_size={args.batch_size} cores={os.cpu_count()} rounds={args.rounds}")
    print("best: the fastest round; paired: the median over rounds of (this run / the ceiling run just before it)")
    print(
        f"{'path':<50} {'rows':>8} {'best s':>7} {'best ex/s':>10} {'x ceiling':>9} {'x naive':>8}"
        f" {'median ex/s':>11} {'paired x ceil':>13} {'cpu us/row':>10} {'cores busy':>10} {'steal %':>7}"
    )
    for path, n, runs in table:
        if runs is None:
            print(path)
            continue
        best = min(r.seconds for r in runs)
        rate_best, rate_median = n / best, n / statistics.median(r.seconds for r in runs)
        paired_ratio = statistics.median((n / r.seconds) / (args.rows / r.ceiling_seconds) for r in runs)
        cpu = statistics.median(r.cpu_seconds for r in runs) / n * 1e6
        cores = statistics.median(r.cpu_seconds / r.seconds for r in runs)
        steal = statistics.median(r.steal for r in runs) * 100
        print(
            f"{path:<50} {n:>8} {best:>7.2f} {rate_best:>10.0f} {rate_best / best_ceiling:>9.2f}"
            f" {rate_best / best_naive:>8.1f} {rate_median:>11.0f} {paired_ratio:>13.2f} {cpu:>10.2f}"
            f" {cores:>10.2f} {steal:>7.1f}"
        )
    print_bound(table, args.rows, best_ceiling)


def print_bound(table, rows: int, best_ceiling: float) -> None:
    """What this machine allows: batch prediction does the ceiling's work plus the parts timed alone, so
    even with every core busy it cannot go faster than cores / (the sum of their CPU time per row)."""

    def cpu_per_row(prefix: str) -> float:
        runs = next(runs for path, _, runs in table if path.startswith(prefix))
        return statistics.median(r.cpu_seconds for r in runs) / rows * 1e6

    parts = ("ceiling", "part alone: read", "part alone: format", "part alone: count")
    floor = sum(cpu_per_row(prefix) for prefix in parts)
    cores = os.cpu_count() or 1
    bound = cores / floor * 1e6
    print(
        f"bound: ceiling + read + format + count = {floor:.2f} us of CPU per row; with all {cores} cores busy at most"
        f" {bound:.0f} ex/s = {bound / best_ceiling:.2f}x the best ceiling round"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=int, default=200_000)
    parser.add_argument("--batch-size", type=int, default=1024)
    parser.add_argument("--naive-rows", type=int, default=20_000, help="rows for the (slow) naive path")
    parser.add_argument("--rounds", type=int, default=3, help="interleaved rounds of every path (best and median)")
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
