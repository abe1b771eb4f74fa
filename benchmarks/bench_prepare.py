"""Benchmark: estimator_lib.data.prepare against a naive single-process baseline on synthetic CSV.

    python benchmarks/bench_prepare.py [--rows 100000 1000000] [--workdir DIR]

Synthetic data: 30 numeric columns, 3 categorical columns, a binary label. Every run (each size, each
implementation) is its own subprocess, so the peak resident memory reported is that run's alone. Times
cover the preparation call only: Python and TensorFlow are imported before the clock starts.

The baseline is a straightforward single-process preparation: load the whole CSV with csv.DictReader, infer
types, hash rows into splits, compute training statistics, encode every row with records.encode_example and
write two shards per split with tf.io.TFRecordWriter, all in one process. `benchmarks/bench_all.py` also runs
"pandas" (`run_pandas`): the script a user writes with pandas, `read_csv` and a `tf.train.Example` per row.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import resource
import subprocess
import sys
import tempfile
import time

NUMERIC, CATEGORICAL = 30, 3


def generate(path: str, rows: int, seed: int = 0, categorical: int = CATEGORICAL) -> None:
    """`rows` rows of NUMERIC normal floats, `categorical` (0 to 3) string columns and a yes/no label."""
    import numpy as np

    rng = np.random.RandomState(seed)
    cats = [np.array([f"c{j}_{v}" for v in range(k)]) for j, k in enumerate((5, 20, 100))][:categorical]
    header = [f"num_{i:02d}" for i in range(NUMERIC)] + [f"cat_{j}" for j in range(categorical)] + ["label"]
    with open(path + ".tmp", "w", encoding="utf-8") as f:
        f.write(",".join(header) + "\n")
        for start in range(0, rows, 50_000):
            n = min(50_000, rows - start)
            nums = rng.normal(size=(n, NUMERIC)).round(5)
            picks = [c[rng.randint(len(c), size=n)] for c in cats]
            label = np.where(nums[:, 0] + nums[:, 1] > 0, "yes", "no")
            text = [",".join(map(str, r)) for r in nums.tolist()]
            for i in range(n):
                f.write(",".join([text[i], *(p[i] for p in picks), label[i]]) + "\n")
    os.replace(path + ".tmp", path)


# -- the two implementations (each run in its own subprocess) ----------------------------------------------
def run_prepare(path: str, out: str) -> int:
    from estimator_lib.data.prepare import PrepareConfig, prepare

    result = prepare(PrepareConfig(data=(path,), label="label"), out)
    return sum(result.counts.values())


def run_naive(path: str, out: str) -> int:
    import csv

    import tensorflow as tf

    from estimator_lib.data import records
    from estimator_lib.schema import (
        CATEGORICAL as CAT,
    )
    from estimator_lib.schema import (
        NUMERIC as NUM,
    )
    from estimator_lib.schema import (
        FeatureSpec,
        LabelSpec,
        Schema,
        safe_key,
    )

    with open(path, newline="", encoding="utf-8") as f:
        rows = list(csv.DictReader(f))
    names = [c for c in rows[0] if c != "label"]
    kinds = {c: NUM if all(_is_number(r[c]) for r in rows) else CAT for c in names}
    splits = [
        "eval" if int(hashlib.sha256(json.dumps(r).encode()).hexdigest()[:8], 16) / 2**32 < 0.2 else "train"
        for r in rows
    ]
    typed = [{c: float(r[c]) if kinds[c] == NUM else r[c] for c in names} | {"label": r["label"]} for r in rows]
    train = [t for t, s in zip(typed, splits) if s == "train"]
    features = []
    for c in names:
        if kinds[c] == NUM:
            values = [t[c] for t in train]
            mean = sum(values) / len(values)
            std = (sum((v - mean) ** 2 for v in values) / len(values)) ** 0.5
            features.append(FeatureSpec(c, safe_key(c), NUM, mean=mean, std=std, min=min(values), max=max(values)))
        else:
            vocab = sorted({t[c] for t in train})
            features.append(FeatureSpec(c, safe_key(c), CAT, value_type="string", vocabulary=vocab))
    schema = Schema(
        tuple(features),
        LabelSpec("label", "classification", classes=tuple(sorted({t["label"] for t in train}))),
    )
    os.makedirs(out, exist_ok=True)
    writers = {s: [tf.io.TFRecordWriter(f"{out}/{s}-{i}.tfrecord") for i in range(2)] for s in ("train", "eval")}
    for i, (t, s) in enumerate(zip(typed, splits)):
        writers[s][i % 2].write(records.encode_example(t, schema, key=str(i)).SerializeToString())
    for ws in writers.values():
        for w in ws:
            w.close()
    with open(f"{out}/schema.json", "w") as f:
        f.write(schema.to_json())
    return len(rows)


def run_pandas(path: str, out: str) -> int:
    """What a user writes with pandas: read the CSV, split by a hash of the row, one `tf.train.Example` per row
    (the numeric columns as one float vector, each other column as bytes, the label as its class index), two
    shards per split."""
    import pandas as pd
    import tensorflow as tf

    frame = pd.read_csv(path)
    label = frame.pop("label")
    classes = sorted(label.unique())
    label_ids = label.map({c: i for i, c in enumerate(classes)}).to_numpy()
    numbers = frame.select_dtypes("number")
    texts = frame.drop(columns=numbers.columns).astype(str)
    eval_rows = pd.util.hash_pandas_object(frame, index=False).to_numpy() % 5 == 0
    os.makedirs(out, exist_ok=True)
    writers = {s: [tf.io.TFRecordWriter(f"{out}/{s}-{i}.tfrecord") for i in range(2)] for s in (False, True)}
    train = tf.train
    for i, (values, words) in enumerate(zip(numbers.to_numpy().tolist(), texts.itertuples(index=False))):
        feature = {"numeric": train.Feature(float_list=train.FloatList(value=values))}
        for column, word in zip(texts.columns, words):
            feature[column] = train.Feature(bytes_list=train.BytesList(value=[word.encode()]))
        feature["label"] = train.Feature(int64_list=train.Int64List(value=[label_ids[i]]))
        example = train.Example(features=train.Features(feature=feature))
        writers[bool(eval_rows[i])][i % 2].write(example.SerializeToString())
    for ws in writers.values():
        for w in ws:
            w.close()
    return len(frame)


def _is_number(text: str) -> bool:
    try:
        float(text)
        return True
    except ValueError:
        return False


IMPLEMENTATIONS = {"prepare": run_prepare, "naive": run_naive, "pandas": run_pandas}


def child(impl: str, path: str, out: str) -> None:
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    import tensorflow  # noqa: F401  (imported before the clock starts: start-up is not preparation)

    import estimator_lib.data.prepare  # noqa: F401

    if impl == "pandas":
        import pandas  # noqa: F401
    fn = IMPLEMENTATIONS[impl]
    start = time.perf_counter()
    rows = fn(path, out)
    seconds = time.perf_counter() - start
    main_kb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    worker_kb = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    print(json.dumps({"rows": rows, "seconds": seconds, "main_mb": main_kb / 1024, "worker_mb": worker_kb / 1024}))


# -- driver -------------------------------------------------------------------------------------------------
def measure(impl: str, path: str, workdir: str, script: str = __file__) -> dict:
    """Runs `script --child impl path out` in a fresh process; returns the JSON line it prints last."""
    out = tempfile.mkdtemp(prefix=f"{impl}-", dir=workdir)
    cmd = [sys.executable, script, "--child", impl, path, os.path.join(out, "out")]
    env = dict(os.environ, PYTHONPATH=os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    done = subprocess.run(cmd, check=True, capture_output=True, text=True, env=env)
    subprocess.run(["rm", "-rf", out], check=True)
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, nargs="+", default=[100_000, 1_000_000])
    parser.add_argument("--workdir", default=os.path.join(tempfile.gettempdir(), "bench_prepare"))
    parser.add_argument("--child", nargs=3, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(*args.child)
        return
    os.makedirs(args.workdir, exist_ok=True)
    print(f"{'rows':>9} {'impl':>8} {'seconds':>8} {'rows/s':>9} {'main MB':>8} {'worker MB':>9} {'speedup':>8}")
    results = {}
    for n in args.rows:
        path = os.path.join(args.workdir, f"synthetic-{n}.csv")
        if not os.path.exists(path):
            generate(path, n)
        naive, fast = measure("naive", path, args.workdir), measure("prepare", path, args.workdir)
        results[n] = fast
        for name, r in (("naive", naive), ("prepare", fast)):
            speedup = (naive["seconds"] / r["seconds"]) if name == "prepare" else 1.0
            print(
                f"{n:>9} {name:>8} {r['seconds']:>8.1f} {r['rows'] / r['seconds']:>9.0f} {r['main_mb']:>8.0f} "
                f"{r['worker_mb']:>9.0f} {speedup:>7.2f}x",
                flush=True,
            )
    if len(results) >= 2:
        small, large = min(results), max(results)
        for key in ("main_mb", "worker_mb"):
            print(f"peak {key} {large} rows / {small} rows: {results[large][key] / results[small][key]:.2f}")


if __name__ == "__main__":
    main()
