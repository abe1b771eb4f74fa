"""Benchmark: small runs end to end, stage by stage, against the code at a baseline commit, in one invocation.

    python benchmarks/bench_small_runs.py [--baseline REV] [--rounds 3] [--cases embedded,digits,predict]

Cases (each one command a user types, timed as wall time of the whole command, process start included):
  embedded   `tpu-pipeline run-local` on the embedded penguins data (344 rows), into a fresh output folder.
  digits     `tpu-pipeline run-local --data digits.csv --label target`: scikit-learn's digits (1,797 x 64, 10
             classes) written as a CSV; its eval accuracy is printed beside the time, with scikit-learn's
             LogisticRegression (fit and score on the same split sizes) as the hand-written reference.
  predict    scoring 25 new penguin rows with the published penguins model: `tpu-pipeline predict` in this tree;
             at the baseline, which has no such command, the only way, `run-local --predict-data`.
The baseline tree is a `git worktree` of REV run with the same Python (its packages come first on the path: each
process runs from its tree). Rounds are interleaved (baseline then current, case by case); the table gives the
median over rounds of the wall time and of each stage's own seconds (the run summary's `run.seconds`), and
"start+end", the wall time no stage accounts for (interpreter starts, imports, compiling the DAG, the summary).
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PENGUINS = os.path.join(ROOT, "estimator_lib", "data", "penguins.csv")
STAGES = ("resolve", "prepare", "train", "export", "batch_predict", "serving_check", "evaluate", "release")


def run(tree: str, args: list[str]) -> tuple[float, subprocess.CompletedProcess]:
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2")
    started = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "pipelines", *args], cwd=tree, env=env, capture_output=True, text=True)
    wall = time.perf_counter() - started
    if done.returncode != 0:
        raise SystemExit(f"{tree}: {' '.join(args)} failed:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}")
    return wall, done


def stage_seconds(output: str) -> dict[str, float]:
    with open(os.path.join(output, "summary.json"), encoding="utf-8") as f:
        return dict(json.load(f)["run"]["seconds"])


def accuracy(output: str) -> float:
    with open(os.path.join(output, "summary.json"), encoding="utf-8") as f:
        return float(json.load(f)["metrics"]["accuracy"])


def write_digits(path: str) -> None:
    from sklearn.datasets import load_digits

    digits = load_digits()
    with open(path, "w", newline="", encoding="utf-8") as f:
        writer = csv.writer(f)
        writer.writerow([f"p{i}" for i in range(digits.data.shape[1])] + ["target"])
        writer.writerows([*map(int, x), int(y)] for x, y in zip(digits.data, digits.target))


def write_new_rows(path: str, count: int = 25) -> None:
    """`count` penguin rows, the label cleared, as new rows to score."""
    with open(PENGUINS, newline="", encoding="utf-8") as f:
        rows = list(csv.reader(f))
    header, body = rows[0], rows[1 : count + 1]
    label = header.index("species")
    with open(path, "w", newline="", encoding="utf-8") as f:
        csv.writer(f).writerows([header, *([v if i != label else "" for i, v in enumerate(r)] for r in body)])


def sklearn_reference(digits_csv: str) -> tuple[float, float]:
    """LogisticRegression on a 75/25 split of the digits CSV: (seconds for read + fit + score, accuracy)."""
    import numpy as np
    from sklearn.linear_model import LogisticRegression
    from sklearn.model_selection import train_test_split

    started = time.perf_counter()
    data = np.loadtxt(digits_csv, delimiter=",", skiprows=1)
    x_train, x_test, y_train, y_test = train_test_split(data[:, :-1], data[:, -1], test_size=0.25, random_state=0)
    model = LogisticRegression(max_iter=2000).fit(x_train / 16, y_train)
    score = model.score(x_test / 16, y_test)
    return time.perf_counter() - started, score


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--baseline", default="625e297", help="the commit to compare with")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--cases", default="embedded,digits,predict")
    args = parser.parse_args()
    cases = args.cases.split(",")
    work = tempfile.mkdtemp(prefix="bench-small-")
    base = os.path.join(work, "baseline-tree")
    subprocess.run(["git", "-C", ROOT, "worktree", "add", "--detach", "-q", base, args.baseline], check=True)
    digits_csv, new_rows = os.path.join(work, "digits.csv"), os.path.join(work, "new.csv")
    write_digits(digits_csv)
    write_new_rows(new_rows)
    results: dict[tuple[str, str], list[dict[str, float]]] = {}
    try:
        published = {}
        for tree_name, tree in (("baseline", base), ("current", ROOT)):  # the model `predict` scores with
            out = os.path.join(work, f"published-{tree_name}")
            run(tree, ["run-local", "--output", out])
            published[tree_name] = out
        for r in range(args.rounds):
            for case in cases:
                for tree_name, tree in (("baseline", base), ("current", ROOT)):
                    out = os.path.join(work, f"{case}-{tree_name}-{r}")
                    row: dict[str, float] = {}
                    if case == "embedded":
                        row["wall"], _ = run(tree, ["run-local", "--output", out])
                        row.update(stage_seconds(out))
                    elif case == "digits":
                        row["wall"], _ = run(
                            tree, ["run-local", "--data", digits_csv, "--label", "target", "--output", out]
                        )
                        row.update(stage_seconds(out))
                        row["accuracy"] = accuracy(out)
                    elif case == "predict" and tree_name == "current":
                        model = os.path.join(published[tree_name], "published")
                        row["wall"], _ = run(tree, ["predict", "--model", model, "--data", new_rows, "--output", out])
                    else:  # the baseline's only way to score new rows: a whole run with --predict-data
                        run_args = ["run-local", "--output", published[tree_name], "--predict-data", new_rows]
                        row["wall"], _ = run(tree, run_args)
                        row.update(stage_seconds(published[tree_name]))
                    results.setdefault((case, tree_name), []).append(row)
                    print(f"round {r + 1} {case:9} {tree_name:8} {row['wall']:7.1f} s", file=sys.stderr, flush=True)
        reference = sklearn_reference(digits_csv) if "digits" in cases else None
    finally:
        subprocess.run(["git", "-C", ROOT, "worktree", "remove", "--force", base], check=False)
        shutil.rmtree(work, ignore_errors=True)
    print_table(results, cases, args, reference)


def print_table(results, cases, args, reference) -> None:
    columns = ["wall", *STAGES, "start+end", "accuracy"]
    print(f"\nmedian of {args.rounds} interleaved rounds; baseline = {args.baseline}; seconds")
    print(f"| case | tree | {' | '.join(columns)} | wall ratio |")
    print("|" + "---|" * (len(columns) + 3))
    for case in cases:
        walls = {}
        for tree in ("baseline", "current"):
            rows = results[(case, tree)]
            med = {c: statistics.median(r[c] for r in rows) for c in columns[:-2] + ["accuracy"] if c in rows[0]}
            if all(s in rows[0] for s in STAGES):
                med["start+end"] = statistics.median(r["wall"] - sum(r[s] for s in STAGES) for r in rows)
            walls[tree] = med["wall"]
            cells = [
                f"{med[c]:.3f}" if c == "accuracy" and c in med else f"{med[c]:.1f}" if c in med else ""
                for c in columns
            ]
            ratio = f"{walls['baseline'] / walls['current']:.2f}x faster" if tree == "current" else ""
            print(f"| {case} | {tree} | {' | '.join(cells)} | {ratio} |")
    if reference:
        print(f"| digits | scikit-learn LogisticRegression | {reference[0]:.1f} |{' |' * 9} {reference[1]:.3f} | |")


if __name__ == "__main__":
    main()
