"""Benchmark: the skew check's share of a user model_fn's batch prediction wall time (#48), in one run.

    python benchmarks/bench_user_skew.py [--rows 200000] [--rounds 7] [--workdir DIR] [--quick]

Data: `--rows` records of tests/skew_cases.py's user spec (a float and an int scalar, a text category, a 300-400
byte blob, a var_len and a zero-padded int sequence, a float tensor, a key, a label), drawn from one distribution;
20,000 more prepared by `model.user.prepare` (whose train split is profiled) and a logistic regression model_fn on
two of the scalars trained briefly on them. Batch prediction scores the `--rows` records through
`engine.user.stages.predict`, what the batch-predict stage calls, batch 1024.

Rows (same model, same records):
  A  batch prediction, predict.skew=off: the baseline.
  B  batch prediction, predict.skew=warn (the default): the records counted over the profile's bins in a read of
     their own, in a thread beside the scoring, judged before the commit; skew.json written.
  Bb batch prediction, predict.skew=block: the records read, counted and judged before the same scoring.
  C  the check alone: `SkewCheck(profile, ...).start(...).result()`, what Bb runs before the model.
After one untimed call of each row, each round runs every row once, the order reversed every other round.
Printed: per row the median seconds over rounds and its ratio to A's median; then (B - A) / A paired round by
round (the median), the figure held to the 10% target.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from typing import Callable, Dict, List

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests"))

from skew_cases import USER_MODEL, USER_SPEC, USER_SPEC_JSON, user_records  # noqa: E402

from estimator_lib.config import JobConfig, ModelConfig, PrepareConfig, TPUSettings, TrainingConfig  # noqa: E402
from estimator_lib.config.skew import BLOCK, OFF, SkewConfig  # noqa: E402
from estimator_lib.engine.user import stages  # noqa: E402
from estimator_lib.model.user.prepare import prepare_records  # noqa: E402
from estimator_lib.predict import skew  # noqa: E402

TARGET = 0.10
TRAIN_RECORDS = 20_000


def _setup(work: str, rows: int):
    code = os.path.join(work, "code")
    os.makedirs(code, exist_ok=True)
    with open(os.path.join(code, "tabular_model.py"), "w", encoding="utf-8") as f:
        f.write(USER_MODEL)
    with open(os.path.join(work, "spec.json"), "w", encoding="utf-8") as f:
        json.dump(USER_SPEC_JSON, f)
    data = user_records(os.path.join(work, "train.tfrecord"), TRAIN_RECORDS, seed=0)
    scored = os.path.join(work, f"scored-{rows}.tfrecord")
    if not os.path.exists(scored):
        user_records(scored + ".part", rows, seed=1)
        os.replace(scored + ".part", scored)
    config = PrepareConfig(data=(data,), label="label", key_column="id", feature_spec=os.path.join(work, "spec.json"))
    prepared = prepare_records(config, os.path.join(work, "prepared"))
    job = JobConfig(
        model=ModelConfig(model_fn="tabular_model:model_fn", code=code),
        tpu=TPUSettings(use_tpu=False, iterations_per_loop=50),
        training=TrainingConfig(train_batch_size=64, predict_batch_size=1024, train_steps=100),
    )
    model_dir = os.path.join(work, "model")
    if not os.path.exists(model_dir):
        stages.train(job, prepared, model_dir)
    return job, prepared, model_dir, scored


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=200_000)
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--workdir", default="")
    parser.add_argument("--quick", action="store_true", help="5,000 rows, 1 round (a smoke run)")
    args = parser.parse_args()
    rows, rounds = (5_000, 1) if args.quick else (args.rows, args.rounds)
    work = args.workdir or tempfile.mkdtemp(prefix="bench-user-skew-")
    os.makedirs(work, exist_ok=True)
    job, prepared, model_dir, scored = _setup(work, rows)
    outputs = os.path.join(work, "out")

    def predicting(mode: str) -> Callable[[], None]:
        def call() -> None:
            shutil.rmtree(outputs, ignore_errors=True)
            stages.predict(job, prepared, model_dir, scored, outputs, SkewConfig(skew=mode))

        return call

    def alone() -> None:
        check = skew.SkewCheck(prepared.profile(), SkewConfig(skew=BLOCK))
        check.start([scored], USER_SPEC, rows).result()

    calls: Dict[str, Callable[[], None]] = {
        "A  batch prediction, predict.skew=off": predicting(OFF),
        "B  batch prediction, predict.skew=warn": predicting("warn"),
        "Bb batch prediction, predict.skew=block": predicting(BLOCK),
        "C  skew check alone (read, tally, compare)": alone,
    }
    for call in calls.values():
        call()  # untimed: graphs built, files cached
    times: Dict[str, List[float]] = {name: [] for name in calls}
    for r in range(rounds):
        order = list(calls) if r % 2 == 0 else list(reversed(calls))
        for name in order:
            start = time.perf_counter()
            calls[name]()
            times[name].append(time.perf_counter() - start)
    a_name, b_name = list(calls)[:2]
    base = statistics.median(times[a_name])
    print(f"\nuser model_fn batch prediction of {rows} records, {rounds} rounds (median seconds)\n")
    print("| row | seconds | / A |")
    print("|---|---:|---:|")
    for name, values in times.items():
        print(f"| {name} | {statistics.median(values):.3f} | {statistics.median(values) / base:.2f} |")
    paired = statistics.median((b - a) / a for a, b in zip(times[a_name], times[b_name]))
    verdict = "meets" if paired <= TARGET else "misses"
    print(f"\n(B - A) / A, paired by round, median: {paired:.1%} ({verdict} the {TARGET:.0%} target)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
