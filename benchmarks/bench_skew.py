"""Benchmark: the skew check's share of batch prediction's wall time (#48: at most 10% at 200,000 rows), in one run.

    python benchmarks/bench_skew.py [--rows 200000] [--rounds 7] [--batch-size 1024] [--workdir DIR] [--quick]

Data: `--rows` penguins-like rows (the shipped Palmer Penguins table drawn with replacement, each measurement
moved by a little noise, its missing values kept), prepared once by `estimator_lib.data.prepare` (train, valid
and eval splits); the default (64, 32) DNN trained briefly on the train split. Batch prediction scores every
prepared record (the three splits' TFRecords, exactly `--rows` rows) through `predict.sources.score`, what the
batch-predict stage calls, batch `--batch-size`; its skew check compares them with the train split's profile.

Rows (same model, same records):
  A  batch prediction, predict.skew=off: the baseline (what a user who turns the check off gets).
  B  batch prediction, predict.skew=warn (the default): the scoring's own input pipeline passes each row's
     binned columns through the model (`predict.tally`), the host counts them as it writes the predictions, the
     check is judged before the commit, and skew.json is written.
  Bb batch prediction, predict.skew=block: the rows read, counted and judged before the same scoring.
  C  the skew check in a read of its own: `SkewCheck(prepared.profile(), ...).start(...).result()`
     (`Bins.tally` + compare), what Bb runs before the model; with its two parts timed alone below it.
  D  a floor for C: the records read and parsed alone (tf.data, every feature, 8192 at a time, no statistics),
     what any pass over the rows of its own costs.
  A1 A on one record: batch prediction's start-up (graph, session, restore, commit); A - A1 is A's steady state.
After one untimed call of each row, each round runs every row once, A and B back to back, the order reversed
every other round. Printed: per row the median seconds over rounds, its ratio to A's median and the median CPU
seconds of the process; then the check's overhead: (B - A) / A paired round by round (the median; a slow spell of
this shared machine hits both runs of a round alike), C / A, both against A's steady state, D / A, and the same
ratios in CPU time; the 10% target is held to the whole call's wall time ((B - A) / A: what the default check adds
to batch prediction).
"""

from __future__ import annotations

import argparse
import csv
import glob
import os
import shutil
import statistics
import sys
import tempfile
import time
from typing import Callable, Dict, List, Tuple

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests"))

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402
from penguin_rows import penguin_rows  # noqa: E402  (tests/penguin_rows.py: the shipped table's rows)

from estimator_lib import estimator, storage  # noqa: E402
from estimator_lib.config import JobConfig, ModelConfig, PrepareConfig, TPUSettings, TrainingConfig  # noqa: E402
from estimator_lib.config.skew import BLOCK, DEFAULT_SKEW, OFF, SkewConfig  # noqa: E402
from estimator_lib.data import prepare, records  # noqa: E402
from estimator_lib.model.inputs import resolve_files  # noqa: E402
from estimator_lib.predict import skew  # noqa: E402
from estimator_lib.predict.sources import score  # noqa: E402
from estimator_lib.predict.tally import Bins  # noqa: E402
from estimator_lib.schema import NUMERIC  # noqa: E402

TARGET = 0.10  # the check may cost at most this share of batch prediction's wall time (#48)
# The noise each measurement is moved by (about a tenth of its spread), rounded as the table writes it.
NOISE = {"bill_length_mm": (0.5, 1), "bill_depth_mm": (0.2, 1), "flipper_length_mm": (2.0, 0), "body_mass_g": (50.0, 0)}
LABEL = "species"
PARSE_BATCH = 8192  # records parsed at a time by the floor (D), as the profile does


def write_penguins(path: str, rows: int, seed: int = 0) -> str:
    """`rows` penguins-like rows as a CSV: the shipped table drawn with replacement, each present measurement
    moved by `NOISE` (missing values stay "NA")."""
    table = penguin_rows()
    rng = np.random.default_rng(seed)
    with open(path, "w", newline="", encoding="utf-8") as f:
        writer = csv.DictWriter(f, fieldnames=list(table[0]))
        writer.writeheader()
        for i in rng.integers(0, len(table), rows):
            row = dict(table[i])
            for column, (sd, digits) in NOISE.items():
                if row[column] != "NA":
                    row[column] = f"{float(row[column]) + rng.normal(0, sd):.{digits}f}"
            writer.writerow(row)
    return path


def setup(root: str, rows: int, train_steps: int, batch_size: int) -> Tuple[JobConfig, prepare.PrepareResult, str]:
    """(job, the prepared `rows` rows, the model directory), prepared and trained once per `root`."""
    job = JobConfig(
        tpu=TPUSettings(iterations_per_loop=train_steps),
        training=TrainingConfig(
            train_batch_size=64,
            predict_batch_size=batch_size,
            train_steps=train_steps,
            save_checkpoints_steps=train_steps,
        ),
        model=ModelConfig(family="dnn", hidden_units=(64, 32)),
    )
    data = os.path.join(root, f"penguins-{rows}.csv")
    if not os.path.exists(data):
        write_penguins(data + ".tmp", rows)
        os.replace(data + ".tmp", data)
    output = os.path.join(root, "prepared")
    if storage.is_committed(output):
        prepared = prepare.load_prepared(output)
    else:
        prepared = prepare.prepare(PrepareConfig(data=(data,), label=LABEL), output)
    model_dir = os.path.join(root, "model")
    if not glob.glob(os.path.join(model_dir, "checkpoint")):
        estimator.train_prepared(job, prepared, model_dir)
    return job, prepared, model_dir


def one_record(prepared: prepare.PrepareResult, root: str) -> str:
    """A TFRecord file holding the train split's first record (batch prediction's start-up run)."""
    path = os.path.join(root, "one", "part-00000.tfrecord")
    os.makedirs(os.path.dirname(path), exist_ok=True)
    first = next(iter(records.read_tfrecords(resolve_files(prepared.files("train")))))
    records.write_tfrecord(path, [tf.train.Example.FromString(first)])
    return path


def timed(fn: Callable[[], object]) -> Tuple[float, float]:
    """(wall seconds, CPU seconds of this process: every thread, user + system) of `fn()`."""
    cpu, start = time.process_time(), time.perf_counter()
    fn()
    return time.perf_counter() - start, time.process_time() - cpu


class Rows:
    """The timed calls, each a fresh output directory (removed after the timing)."""

    def __init__(self, job: JobConfig, prepared: prepare.PrepareResult, model_dir: str, root: str, one: str):
        self.job, self.prepared, self.model_dir, self.root, self.one = job, prepared, model_dir, root, one
        self.data = os.path.join(prepared.output_dir, "*", "part-*.tfrecord")  # every split: all the rows
        self.files = resolve_files(self.data)
        self.rows = sum(prepared.counts.values())

    def predict(self, data: str, config: SkewConfig, expected: int) -> Callable[[], int]:
        def run() -> int:
            out = tempfile.mkdtemp(prefix="predictions-", dir=self.root)
            try:
                count = score(self.job, self.prepared, self.model_dir, data, out, config).count
                has_report = skew.read_report(out) is not None
            finally:
                shutil.rmtree(out, ignore_errors=True)
            if count != expected or has_report != (config.skew != OFF):
                raise AssertionError(f"scored {count} rows (expected {expected}), skew.json written: {has_report}")
            return count

        return run

    def check(self) -> skew.SkewReport:
        check = skew.SkewCheck(self.prepared.profile(), DEFAULT_SKEW)
        return check.start(self.files, self.prepared.schema, self.rows).result()

    def tally(self) -> Dict[str, object]:
        bins = Bins.of(self.prepared.profile(), self.prepared.schema)
        return bins.scored(bins.tally(self.files))

    def read_parse(self) -> int:
        """The records read and parsed as the profile parses them (a missing value: NaN or ""), nothing else."""
        spec = {
            f.key: tf.io.FixedLenFeature([], tf.float32, float("nan"))
            if f.kind == NUMERIC
            else tf.io.FixedLenFeature([], tf.string, "")
            for f in self.prepared.schema.features
        }
        dataset = tf.data.TFRecordDataset(self.files).batch(PARSE_BATCH)
        batches = dataset.map(lambda s: tf.io.parse_example(s, spec)).as_numpy_iterator()
        return sum(len(next(iter(batch.values()))) for batch in batches)

    def paths(self) -> Dict[str, Callable[[], object]]:
        """{row: its call}, A and B first (each round runs them back to back)."""
        training, scored = self.prepared.profile(), self.tally()
        return {
            A: self.predict(self.data, SkewConfig(skew=OFF), self.rows),
            B: self.predict(self.data, DEFAULT_SKEW, self.rows),
            BB: self.predict(self.data, SkewConfig(skew=BLOCK), self.rows),
            C: self.check,
            "   C part: tally": self.tally,
            "   C part: compare": lambda: skew.compare(training, scored, DEFAULT_SKEW),
            D: self.read_parse,
            A1: self.predict(self.one, SkewConfig(skew=OFF), 1),
        }


A = "A  batch prediction, predict.skew=off"
B = "B  batch prediction, predict.skew=warn"
BB = "Bb batch prediction, predict.skew=block"
C = "C  skew check alone (tally + compare)"
D = "D  floor: read + parse the records alone"
A1 = "A1 start-up: A on 1 record"


def measure(paths: Dict[str, Callable[[], object]], rounds: int) -> Dict[str, List[Tuple[float, float]]]:
    """{row: [(wall s, CPU s) per round]}: every row once per round, the order reversed every other round (so
    A and B run back to back, each first half the time), after one untimed call of each (a first call traces)."""
    for call in paths.values():
        call()
    times: Dict[str, List[Tuple[float, float]]] = {name: [] for name in paths}
    for r in range(rounds):
        for name in list(paths) if r % 2 == 0 else reversed(list(paths)):
            times[name].append(timed(paths[name]))
        print(f"round {r + 1}/{rounds}: " + ", ".join(f"{n.split()[0]} {times[n][-1][0]:.2f} s" for n in (A, B, C)))
    return times


def overheads(walls: Dict[str, List[float]], cpus: Dict[str, List[float]]) -> List[Tuple[str, float, bool]]:
    """(figure, its median over rounds, whether the target applies): each round's runs compared with each other;
    CPU time as well as wall time (a slow spell of the machine lengthens the wall time, not the CPU time)."""

    def median(figure: Callable[..., float], *names: str, seconds: Dict[str, List[float]] = walls) -> float:
        return statistics.median(figure(*runs) for runs in zip(*(seconds[n] for n in names)))

    return [
        ("(B - A) / A, paired per round", median(lambda a, b: (b - a) / a, A, B), True),
        ("(Bb - A) / A, paired per round", median(lambda a, b: (b - a) / a, A, BB), False),
        ("C / A, paired per round", median(lambda a, c: c / a, A, C), False),
        ("(B - A) / (A - A1), steady state", median(lambda a, b, a1: (b - a) / (a - a1), A, B, A1), False),
        ("C / (A - A1), steady state", median(lambda a, c, a1: c / (a - a1), A, C, A1), False),
        ("D / A: any pass before scoring", median(lambda a, d: d / a, A, D), False),
        ("(B - A) / A in CPU time", median(lambda a, b: (b - a) / a, A, B, seconds=cpus), False),
        ("C / A in CPU time", median(lambda a, c: c / a, A, C, seconds=cpus), False),
        ("D / A in CPU time", median(lambda a, d: d / a, A, D, seconds=cpus), False),
    ]


def print_table(
    times: Dict[str, List[Tuple[float, float]]], args: argparse.Namespace, rows: int, report: skew.SkewReport
) -> None:
    walls = {name: [s for s, _ in runs] for name, runs in times.items()}
    cpus = {name: [c for _, c in runs] for name, runs in times.items()}
    median_a = statistics.median(walls[A])
    load = " ".join(f"{x:.1f}" for x in os.getloadavg())
    print(
        f"\nrows={rows} batch_size={args.batch_size} rounds={args.rounds} cores={os.cpu_count()} load average: {load}"
    )
    print(f"skew check of the scored rows: {report.summary()}")
    print(f"| {'row':<42} | {'median s':>8} | {'x A':>5} | {'CPU s':>6} |")
    print(f"|{'-' * 44}|{'-' * 9}:|{'-' * 6}:|{'-' * 7}:|")
    for name in times:
        wall, cpu = statistics.median(walls[name]), statistics.median(cpus[name])
        print(f"| {name:<42} | {wall:>8.3f} | {wall / median_a:>5.2f} | {cpu:>6.2f} |")
    print(f"\nthe check's overhead (target: at most {TARGET:.0%} of batch prediction's wall time)")
    for label, value, judged in overheads(walls, cpus):
        verdict = f"{'within' if value <= TARGET else 'ABOVE'} the {TARGET:.0%} target" if judged else "(for reference)"
        print(f"  {label:<36} {value:>7.1%}  {verdict}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=int, default=200_000, help="penguins-like rows prepared and scored")
    parser.add_argument("--rounds", type=int, default=7, help="interleaved rounds of every row (median)")
    parser.add_argument("--batch-size", type=int, default=1024, help="predict_batch_size")
    parser.add_argument("--train-steps", type=int, default=100)
    parser.add_argument("--workdir", default=None, help="kept between runs: the prepared rows and the model")
    parser.add_argument("--quick", action="store_true", help="a smoke run: 5,000 rows, 1 round, 10 train steps")
    args = parser.parse_args()
    tf.get_logger().setLevel("ERROR")  # the estimator's deprecation warnings, every run
    if args.quick:
        args.rows, args.rounds, args.train_steps = 5_000, 1, 10
    root = args.workdir or tempfile.mkdtemp(prefix="bench-skew-")
    os.makedirs(root, exist_ok=True)
    job, prepared, model_dir = setup(root, args.rows, args.train_steps, args.batch_size)
    rows = Rows(job, prepared, model_dir, root, one_record(prepared, root))
    if rows.rows != args.rows:
        raise AssertionError(f"prepared {rows.rows} rows, not {args.rows}")
    report = rows.check()
    times = measure(rows.paths(), args.rounds)
    print_table(times, args, rows.rows, report)


if __name__ == "__main__":
    main()
