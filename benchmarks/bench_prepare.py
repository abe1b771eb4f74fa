"""Benchmark: estimator_lib.data.prepare against a naive single-process baseline on synthetic CSV.

    python benchmarks/bench_prepare.py [--rows 100000 1000000] [--workdir DIR]

Synthetic data: 30 numeric columns, 3 categorical columns, a binary label. Every run (each size, each
implementation) is its own subprocess, so the peak resident memory reported is that run's alone. Times
cover the preparation call only: Python and TensorFlow are imported before the clock starts.

The baseline is a straightforward single-process preparation: load the whole CSV with csv.DictReader, infer
types, hash rows into splits, compute training statistics, encode every row with records.encode_example and
write two shards per split with tf.io.TFRecordWriter, all in one process. `benchmarks/bench_all.py` also runs
"pandas" (`run_pandas`): the script a user writes with pandas, `read_csv` and a `tf.train.Example` per row.

    python benchmarks/bench_prepare.py --tfdv [--rows 100000] [--rounds 3] [--tfdv-cache DIR]

compares with TFDV's statistics, the preparation's real peer: `tfdv.generate_statistics_from_csv` (TFDV
1.15.1, Beam's DirectRunner, its defaults) on the same CSV, against our whole preparation and its statistics
pass (pass 1: `prepare._profile`, timed by a wrapper in the child; the numeric statistics are completed in pass
2, so the whole preparation is the like-for-like figure). TFDV runs in its own virtualenv, created under
`--tfdv-cache` by the benchmark (`python -m venv`, then `pip install tensorflow-data-validation==1.15.1
tensorflow==2.15.1 apache-beam[gcp]==2.53.0` from the package index, once). The benchmark first asks pip's
resolver (`pip install --dry-run`, at most `--resolve-timeout` seconds); when it does not resolve, it prints why
(the resolver's last lines) and stops. Each run is a fresh process, timed inside it after its imports; the two
are interleaved over rounds.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from typing import Dict, List, Optional, Tuple

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


def peak_rss_mb() -> float:
    """This process's peak resident memory since it started its program (/proc's VmHWM). `ru_maxrss` is not
    that: Linux carries it over fork and exec, so a child of a large benchmark process reports the parent's."""
    with open("/proc/self/status", encoding="ascii") as status:
        line = next(x for x in status if x.startswith("VmHWM:"))
    return int(line.split()[1]) / 1024


def child(impl: str, path: str, out: str) -> None:
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    if impl == TFDV:  # in TFDV's own virtualenv: nothing of ours imported
        return child_tfdv(path)
    import tensorflow  # noqa: F401  (imported before the clock starts: start-up is not preparation)

    import estimator_lib.data.prepare

    if impl == "pandas":
        import pandas  # noqa: F401
    pass1 = _time_first_call(estimator_lib.data.prepare, "_profile")
    fn = IMPLEMENTATIONS[impl]
    start = time.perf_counter()
    rows = fn(path, out)
    seconds = time.perf_counter() - start
    worker_kb = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    result = {"rows": rows, "seconds": seconds, "main_mb": peak_rss_mb(), "worker_mb": worker_kb / 1024}
    print(json.dumps({**result, "pass1": pass1[0] if pass1 else None}))


def _time_first_call(owner, attr: str) -> List[float]:
    """Wraps `owner.attr`; the returned list receives the seconds of its first call."""
    original, seconds = getattr(owner, attr), []

    def timed(*args, **kwargs):
        start = time.perf_counter()
        try:
            return original(*args, **kwargs)
        finally:
            seconds.append(time.perf_counter() - start)

    setattr(owner, attr, timed)
    return seconds


def child_tfdv(path: str) -> None:
    """`tfdv.generate_statistics_from_csv` on `path`, timed after the import; prints the JSON line."""
    import tensorflow_data_validation as tfdv

    start = time.perf_counter()
    stats = tfdv.generate_statistics_from_csv(path)
    seconds = time.perf_counter() - start
    rows = int(stats.datasets[0].num_examples)
    print(json.dumps({"rows": rows, "seconds": seconds, "main_mb": peak_rss_mb()}))


# -- TFDV in its own virtualenv ------------------------------------------------------------------------------
TFDV = "tfdv"
# Beam pinned to 2.53 (TFX 1.15's): unpinned, pip's resolver backtracked through the google-cloud-* releases of
# newer Beams for over 20 minutes without an answer (2026-11-26); with it, it resolves in about 5.
TFDV_REQUIREMENTS = ("tensorflow-data-validation==1.15.1", "tensorflow==2.15.1", "apache-beam[gcp]==2.53.0")


def tfdv_python(cache: str, resolve_timeout: float) -> Tuple[Optional[str], str]:
    """(the TFDV virtualenv's python, "") once it is installed under `cache`; (None, why) when pip's resolver
    finds no set of versions beside TF 2.15 on this Python (its last lines) or does not finish in time."""
    venv = os.path.join(cache, "tfdv-1.15.1-venv")
    python = os.path.join(venv, "bin", "python")
    marker = os.path.join(venv, "installed")
    if os.path.exists(marker):
        return python, ""
    if not os.path.exists(python):
        subprocess.run([sys.executable, "-m", "venv", venv], check=True)
    pip = [python, "-m", "pip", "install", "--disable-pip-version-check", *TFDV_REQUIREMENTS]
    try:
        dry = subprocess.run(pip + ["--dry-run"], capture_output=True, text=True, timeout=resolve_timeout)
    except subprocess.TimeoutExpired as timeout:
        tail = _tail(timeout.stdout)
        return None, f"pip's resolver did not finish in {resolve_timeout:.0f} s (still backtracking):\n{tail}"
    if dry.returncode:
        return None, f"pip's resolver failed (exit {dry.returncode}):\n{_tail(dry.stderr or dry.stdout)}"
    subprocess.run(pip, check=True, capture_output=True)
    with open(marker, "w", encoding="utf-8") as f:
        f.write(_tail(dry.stdout, 3))
    return python, ""


def _tail(text, lines: int = 12) -> str:
    if isinstance(text, bytes):
        text = text.decode(errors="replace")
    kept = [line for line in (text or "").splitlines() if line.strip() and "━" not in line]
    return "\n".join(kept[-lines:])


def bench_tfdv(rows: List[int], workdir: str, rounds: int, cache: str, resolve_timeout: float) -> None:
    """TFDV's statistics against our preparation (whole, and its pass 1) on the same CSV, interleaved."""
    python, why = tfdv_python(cache, resolve_timeout)
    if python is None:
        print(f"TFDV 1.15.1 is not measured: it does not install beside TensorFlow 2.15 here.\n{why}")
        return
    print(
        f"{'rows':>9} {'TFDV stats (s)':>22} {'prepare pass 1 (s)':>22} {'prepare (s)':>22} "
        f"{'TFDV / pass 1':>22} {'TFDV / prepare':>22}"
    )
    for n in rows:
        path = os.path.join(workdir, f"synthetic-{n}.csv")
        if not os.path.exists(path):
            generate(path, n)
        runs: Dict[str, List[dict]] = {"prepare": [], TFDV: []}
        for r in range(rounds):
            for impl in ("prepare", TFDV) if r % 2 == 0 else (TFDV, "prepare"):
                runs[impl].append(measure(impl, path, workdir, python=python if impl == TFDV else sys.executable))
        tfdv, ours = runs[TFDV], runs["prepare"]
        pass1 = [x["pass1"] for x in ours]
        whole = [x["seconds"] for x in ours]
        stats = [x["seconds"] for x in tfdv]
        print(
            f"{n:>9} {_cell(stats):>22} {_cell(pass1):>22} {_cell(whole):>22} "
            f"{_cell([t / p for t, p in zip(stats, pass1)]):>22} {_cell([t / w for t, w in zip(stats, whole)]):>22}",
            flush=True,
        )


def _cell(values: List[float]) -> str:
    return f"{statistics.median(values):.2f} [{min(values):.2f}-{max(values):.2f}]"


# -- driver -------------------------------------------------------------------------------------------------
def measure(impl: str, path: str, workdir: str, script: str = __file__, python: str = sys.executable) -> dict:
    """Runs `script --child impl path out` in a fresh process of `python`; returns the JSON line it prints last."""
    out = tempfile.mkdtemp(prefix=f"{impl}-", dir=workdir)
    cmd = [python, script, "--child", impl, path, os.path.join(out, "out")]
    env = dict(os.environ, PYTHONPATH=os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    done = subprocess.run(cmd, check=True, capture_output=True, text=True, env=env)
    subprocess.run(["rm", "-rf", out], check=True)
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, nargs="+", default=[100_000, 1_000_000])
    parser.add_argument("--workdir", default=os.path.join(tempfile.gettempdir(), "bench_prepare"))
    parser.add_argument("--tfdv", action="store_true", help="TFDV's statistics against our preparation")
    parser.add_argument("--rounds", type=int, default=3, help="interleaved rounds (--tfdv)")
    parser.add_argument("--tfdv-cache", default=os.path.join(tempfile.gettempdir(), "bench_prepare_cache"))
    parser.add_argument("--resolve-timeout", type=float, default=900.0, help="seconds for pip's resolver")
    parser.add_argument("--child", nargs=3, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(*args.child)
        return
    os.makedirs(args.workdir, exist_ok=True)
    if args.tfdv:
        bench_tfdv(args.rows, args.workdir, args.rounds, args.tfdv_cache, args.resolve_timeout)
        return
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
