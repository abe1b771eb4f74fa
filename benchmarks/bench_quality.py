"""Benchmark: model quality of the default pipeline on a panel of public tables, beside two references.

    python benchmarks/bench_quality.py [--quick] [--tables NAME ...] [--workdir DIR] [--json FILE]

Needs the optional extra `bench` (scikit-learn, statsmodels). For every table the script writes a CSV into the
work directory and runs what the pipeline's stages run, with the default configs: `data.prepare.prepare`
(PrepareConfig with only data, label and task), `estimator.train` (the default `JobConfig`; early stopping on
the prepared validation split), `evaluation.evaluate_and_bless` (the default `BlessingConfig`, no published
baseline). TPU-strict mode is off (it changes no number, only adds checks).

Beside our eval metric it prints, on the same eval rows and the same training rows (the rows of the prepared
split(s) the model learned from, read back from its TFRecords):
  linear   scikit-learn's Ridge(alpha=1) / LogisticRegression(C=1) on numerics standardised with the schema's
           training statistics (missing -> the mean) and one-hot categoricals over the schema's vocabulary;
  strong   scikit-learn's HistGradientBoostingRegressor / Classifier (random_state=0, defaults) on the raw
           numerics (missing -> NaN) and native categoricals.
All three columns come from `estimator_lib.evaluation.compute_metrics` (rmse for regression, accuracy for
classification), so they are computed by the same code. "in-run reference" is the evaluate stage's own linear
reference (`estimator_lib.evaluation.reference`, NumPy), the one the blessing compares with. The tables and their
sources are listed in `TABLES` and in benchmarks/RESULTS.md; `--quick` runs the small ones.
"""

from __future__ import annotations

import argparse
import csv
import dataclasses
import json
import os
import sys
import tempfile
import time
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

from estimator_lib import estimator  # noqa: E402
from estimator_lib.config import BlessingConfig, JobConfig, PrepareConfig  # noqa: E402
from estimator_lib.data import prepare, records  # noqa: E402
from estimator_lib.data.embedded import default_dataset  # noqa: E402
from estimator_lib.evaluation import Scores, Truth, compute_metrics, evaluate_and_bless  # noqa: E402
from estimator_lib.model.inputs import resolve_files  # noqa: E402
from estimator_lib.schema import CLASSIFICATION, NUMERIC, REGRESSION, Schema  # noqa: E402

Rows = Tuple[List[str], List[List[Any]]]  # header, rows (None = missing)


# -- the panel -----------------------------------------------------------------------------------------------
@dataclasses.dataclass(frozen=True)
class Table:
    name: str
    task: str
    label: str
    load: Callable[[], Rows]
    source: str
    quick: bool = True


def _frame_rows(frame, label_values, label: str) -> Rows:
    header = [str(c) for c in frame.columns] + [label]
    rows = [[None if v != v else v for v in row] + [y] for row, y in zip(frame.itertuples(index=False), label_values)]
    return header, rows


def _sklearn(loader: str, label_of: Callable[[Any, int], Any], **kwargs) -> Callable[[], Rows]:
    def load() -> Rows:
        from sklearn import datasets

        bunch = getattr(datasets, loader)(as_frame=True, **kwargs)
        return _frame_rows(bunch.data, [label_of(bunch, v) for v in bunch.target], "target")

    return load


def _penguins() -> Rows:
    with open(default_dataset().path, newline="", encoding="utf-8") as f:
        reader = csv.reader(f)
        header = next(reader)
        return header, [[None if v == "NA" else v for v in row] for row in reader]


def _fair() -> Rows:
    """statsmodels' Fair (1978) affairs survey, 6366 rows: did the respondent have an affair? Occupation,
    husband's occupation and religiousness (coded 1-6 / 1-4) are written as text so they are categorical."""
    from statsmodels.datasets import fair

    frame = fair.load_pandas().data
    label = ["yes" if a > 0 else "no" for a in frame.pop("affairs")]
    for column in ("occupation", "occupation_husb", "religious"):
        frame[column] = [f"{column[:3]}{int(v)}" for v in frame[column]]
    return _frame_rows(frame, label, "had_affair")


def _randhie() -> Rows:
    """statsmodels' RAND Health Insurance Experiment, 20190 rows: doctor visits per year (mdvis)."""
    from statsmodels.datasets import randhie

    frame = randhie.load_pandas().data
    label = frame.pop("mdvis").astype(float).tolist()
    return _frame_rows(frame, label, "mdvis")


def _friedman1() -> Rows:
    """Friedman #1 (sklearn.datasets.make_friedman1, 3000 rows, noise 1, random_state 0):
    y = 10 sin(pi x1 x2) + 20 (x3 - 0.5)^2 + 10 x4 + 5 x5 + noise; x6..x10 are irrelevant."""
    from sklearn.datasets import make_friedman1

    x, y = make_friedman1(n_samples=3000, n_features=10, noise=1.0, random_state=0)
    return [f"x{i + 1}" for i in range(10)] + ["y"], [list(map(float, r)) + [float(t)] for r, t in zip(x, y)]


def _noise() -> Rows:
    """Pure noise, 2000 rows: 8 standard-normal features and an independent standard-normal label
    (numpy RandomState(2026)): no model can beat the mean."""
    rng = np.random.RandomState(2026)
    x, y = rng.normal(size=(2000, 8)), rng.normal(size=2000)
    return [f"x{i + 1}" for i in range(8)] + ["y"], [list(map(float, r)) + [float(t)] for r, t in zip(x, y)]


TABLES: Tuple[Table, ...] = (
    Table("penguins", CLASSIFICATION, "species", _penguins, "palmerpenguins (shipped: estimator_lib/data)"),
    Table(
        "breast_cancer",
        CLASSIFICATION,
        "target",
        _sklearn("load_breast_cancer", lambda b, v: str(b.target_names[int(v)])),
        "scikit-learn load_breast_cancer (UCI WDBC)",
    ),
    Table(
        "digits",
        CLASSIFICATION,
        "target",
        _sklearn("load_digits", lambda b, v: f"d{int(v)}"),
        "scikit-learn load_digits (UCI optdigits test set)",
        quick=False,
    ),
    Table("fair", CLASSIFICATION, "had_affair", _fair, "statsmodels datasets.fair", quick=False),
    Table(
        "diabetes",
        REGRESSION,
        "target",
        _sklearn("load_diabetes", lambda b, v: float(v), scaled=False),
        "scikit-learn load_diabetes (Efron et al. 2004)",
    ),
    Table("friedman1", REGRESSION, "y", _friedman1, "scikit-learn make_friedman1 (synthetic, seeded)"),
    Table("randhie", REGRESSION, "mdvis", _randhie, "statsmodels datasets.randhie", quick=False),
    Table("noise", REGRESSION, "y", _noise, "numpy RandomState(2026) (synthetic, seeded)"),
)


def write_csv(path: str, rows: Rows) -> None:
    header, body = rows
    with open(path, "w", newline="", encoding="utf-8") as f:
        writer = csv.writer(f)
        writer.writerow(header)
        for row in body:
            writer.writerow(["NA" if v is None else v for v in row])


# -- the pipeline's stages, default configs ------------------------------------------------------------------
def run_pipeline(csv_path: str, table: Table, work: str) -> Tuple[prepare.PrepareResult, Any, Any]:
    prepared = prepare.prepare(PrepareConfig(data=(csv_path,), label=table.label, task=table.task), f"{work}/data")
    job = JobConfig()
    model_dir = f"{work}/model"
    trained = estimator.train_prepared(job, prepared, model_dir)
    evaluation = evaluate_and_bless(job, prepared, model_dir, BlessingConfig(), None, f"{work}/evaluation")
    return prepared, trained, evaluation


def learned_splits(prepared: prepare.PrepareResult) -> List[str]:
    """The prepared splits the model learned from (train, and the validation split where there is one)."""
    return [s for s in ("train", "valid") if prepared.counts.get(s)]


# -- the references, on the same rows ------------------------------------------------------------------------
def read_rows(prepared: prepare.PrepareResult, splits: Sequence[str]) -> List[Dict[str, Any]]:
    files = [f for s in splits for f in resolve_files(prepared.files(s))]
    return [records.decode_example(r, prepared.schema) for r in records.read_tfrecords(files)]


def linear_matrix(rows: List[Dict[str, Any]], schema: Schema) -> np.ndarray:
    columns = []
    for f in schema.features:
        values = [r[f.name] for r in rows]
        if f.kind == NUMERIC:
            columns.append(np.array([(f.mean if v is None else v) for v in values], dtype=np.float64)[:, None])
            columns[-1] = (columns[-1] - f.mean) / f.std
        else:
            index = {c: i for i, c in enumerate(f.vocabulary)}
            one_hot = np.zeros((len(rows), len(f.vocabulary)))
            for n, v in enumerate(values):
                if v in index:
                    one_hot[n, index[v]] = 1.0
            columns.append(one_hot)
    return np.concatenate(columns, axis=1)


def tree_matrix(rows: List[Dict[str, Any]], schema: Schema) -> Tuple[np.ndarray, List[bool]]:
    columns, categorical = [], []
    for f in schema.features:
        if f.kind == NUMERIC:
            columns.append([np.nan if r[f.name] is None else r[f.name] for r in rows])
        else:
            index = {c: i for i, c in enumerate(f.vocabulary[:250])}
            columns.append([index.get(r[f.name], np.nan) for r in rows])
        categorical.append(f.kind != NUMERIC)
    return np.array(columns, dtype=np.float64).T, categorical


def labels(rows: List[Dict[str, Any]], schema: Schema) -> np.ndarray:
    values = [r[schema.label.name] for r in rows]
    return np.array(values, dtype=object if schema.label.task == CLASSIFICATION else np.float64)


def reference_metrics(prepared: prepare.PrepareResult, truth: Truth) -> Dict[str, Dict[str, float]]:
    from sklearn.ensemble import HistGradientBoostingClassifier, HistGradientBoostingRegressor
    from sklearn.linear_model import LogisticRegression, Ridge

    schema = prepared.schema
    train, evaluation = read_rows(prepared, learned_splits(prepared)), read_rows(prepared, ["eval"])
    by_key = {r["__key__"]: r for r in evaluation}
    evaluation = [by_key[k] for k in truth.keys]
    y = labels(train, schema)
    xt, categorical = tree_matrix(train, schema)
    xe, _ = tree_matrix(evaluation, schema)
    if schema.label.task == REGRESSION:
        linear = Ridge(alpha=1.0).fit(linear_matrix(train, schema), y)
        strong = HistGradientBoostingRegressor(random_state=0, categorical_features=categorical).fit(xt, y)
        return {
            "linear": compute_metrics(truth, Scores(linear.predict(linear_matrix(evaluation, schema)))),
            "strong": compute_metrics(truth, Scores(strong.predict(xe))),
        }
    out = {}
    models = {
        "linear": (LogisticRegression(C=1.0, max_iter=5000), linear_matrix),
        "strong": (HistGradientBoostingClassifier(random_state=0, categorical_features=categorical), None),
    }
    for name, (model, matrix) in models.items():
        fit_x, eval_x = (matrix(train, schema), matrix(evaluation, schema)) if matrix else (xt, xe)
        model.fit(fit_x, y)
        probabilities = np.zeros((len(evaluation), len(truth.classes)))
        known = model.predict_proba(eval_x)
        for j, cls in enumerate(model.classes_):
            probabilities[:, truth.classes.index(cls)] = known[:, j]
        predicted = np.array([truth.classes[i] for i in probabilities.argmax(axis=1)], dtype=object)
        out[name] = compute_metrics(truth, Scores(predicted, probabilities))
    return out


# -- one table -----------------------------------------------------------------------------------------------
def run_table(table: Table, workdir: str) -> Dict[str, Any]:
    from estimator_lib.evaluation import read_truth

    work = os.path.join(workdir, table.name)
    os.makedirs(work, exist_ok=True)
    csv_path = os.path.join(work, f"{table.name}.csv")
    rows = table.load()
    write_csv(csv_path, rows)
    start = time.perf_counter()
    prepared, trained, evaluation = run_pipeline(csv_path, table, work)
    seconds = time.perf_counter() - start
    truth = read_truth(prepared.files("eval"), prepared.schema)
    references = reference_metrics(prepared, truth)
    metric = "rmse" if table.task == REGRESSION else "accuracy"
    blessing = evaluation.blessing
    return {
        "table": table.name,
        "task": table.task,
        "rows": len(rows[1]),
        "features": len(prepared.schema.features),
        "categorical": len(prepared.schema.categorical),
        "counts": dict(prepared.counts),
        "metric": metric,
        "ours": blessing.candidate_metrics[metric],
        "linear": references["linear"][metric],
        "strong": references["strong"][metric],
        "ours_metrics": dict(blessing.candidate_metrics),
        "references": references,
        "in_run_reference": dict(blessing.reference_metrics or {}),
        "global_step": evaluation.global_step,
        "trained_steps": trained.trained_steps,
        "stopped": trained.validation.stopped if trained.validation else "budget",
        "blessed": blessing.blessed,
        "reasons": list(blessing.reasons),
        "seconds": seconds,
    }


def ratio(result: Dict[str, Any]) -> float:
    return result["ours"] / result["linear"] if result["linear"] else float("nan")


def print_table(results: List[Dict[str, Any]]) -> None:
    print()
    print(
        "| table | task | rows (train/valid/eval) | metric | ours | linear | strong | ours/linear | in-run reference "
        "| best step / trained | blessed |"
    )
    print("|---|---|---|---|---:|---:|---:|---:|---:|---|---|")
    for r in results:
        c = r["counts"]
        split = f"{r['rows']} ({c.get('train', 0)}/{c.get('valid', 0)}/{c.get('eval', 0)})"
        blessed = "yes" if r["blessed"] else "no: " + "; ".join(r["reasons"])
        in_run = r["in_run_reference"].get(r["metric"])
        in_run_text = f"{in_run:.4f}" if in_run is not None else "-"
        steps = f"{r['global_step']} / {r['trained_steps']} ({r['stopped']})"
        print(
            f"| {r['table']} | {r['task']} | {split} | {r['metric']} | {r['ours']:.4f} | {r['linear']:.4f} | "
            f"{r['strong']:.4f} | {ratio(r):.3f} | {in_run_text} | {steps} | {blessed} |"
        )


def main(argv: Optional[Sequence[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="only the small tables")
    parser.add_argument("--tables", nargs="*", help=f"tables to run (default all): {[t.name for t in TABLES]}")
    parser.add_argument("--workdir", default=None, help="where CSVs and outputs go (default: a new temp dir)")
    parser.add_argument("--json", default=None, help="also write the results as JSON to this file")
    args = parser.parse_args(argv)
    tf.get_logger().setLevel("ERROR")
    tables = [t for t in TABLES if (not args.quick or t.quick) and (not args.tables or t.name in args.tables)]
    workdir = args.workdir or tempfile.mkdtemp(prefix="bench_quality_")
    results = []
    for table in tables:
        result = run_table(table, workdir)
        print(
            f"{table.name}: {result['metric']} ours {result['ours']:.4f} linear {result['linear']:.4f} "
            f"strong {result['strong']:.4f} blessed={result['blessed']} ({result['seconds']:.0f} s)",
            flush=True,
        )
        results.append(result)
    print_table(results)
    if args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump(results, f, indent=2, sort_keys=True, default=float)
    return 0


if __name__ == "__main__":
    sys.exit(main())
