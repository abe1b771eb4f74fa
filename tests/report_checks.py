"""Checks of an evaluation report shared by the report's unit tests, the evaluate component's test and the
end-to-end runs: every section, images that are valid PNGs, nothing fetched from the network. Also the report
inputs of a small real evaluation with slices, intervals and importance (`penguin_findings`), for the report's
unit tests and its screenshot test."""

from __future__ import annotations

import base64
import re
import struct
from typing import Any, Callable, Dict, Mapping, Tuple

import numpy as np

from estimator_lib.evaluation import Blessing, Check, Scores, Truth, reported_metrics
from estimator_lib.evaluation.report import ReportInputs, RunHeader
from estimator_lib.evaluation.worst import row_losses

CLASSIFICATION_PLOTS = ["Confusion matrix", "ROC curves", "Precision-recall curves", "Calibration"]
REGRESSION_PLOTS = ["Predicted vs actual", "Residuals vs predicted", "Residual histogram"]
IMPORTANCE_PLOTS = ["Permutation importance", "Integrated gradients"]
CURVES_PLOTS = ["Loss during training"]
SECTIONS = ("Verdict", "Metrics", "Performance on the eval rows", "Data", "Run")
# The report's sections in reading order (`render_html`), each as the text that opens it; those an evaluation
# does not have are left out.
ORDER = (
    "<h2>Verdict",
    '<section id="header">',
    "<h2>Metrics",
    '<section id="slices">',
    '<section id="importance">',
    '<section id="curves">',
    '<section id="worst-rows">',
    "<h2>Performance on the eval rows",
    "<h2>Data",
    "<h2>Run",
)


def images(document: str) -> list:
    """(caption, base64 PNG) of every embedded image."""
    return re.findall(r'<img alt="([^"]+)" src="data:image/png;base64,([^"]+)">', document)


def assert_valid_png(data: str) -> None:
    raw = base64.b64decode(data, validate=True)
    assert raw[:8] == b"\x89PNG\r\n\x1a\n"
    width, height = struct.unpack(">II", raw[16:24])  # IHDR
    assert width >= 200 and height >= 200


def assert_offline(document: str) -> None:
    assert not re.search(r"(src|href)\s*=\s*[\"']?(https?:|//)", document, re.I)
    assert "<script" not in document.lower() and "@import" not in document and "url(" not in document


def assert_complete_report(document: str, classification: bool) -> None:
    """Every section, the task's plots as valid PNGs, per-class metrics for classification, nothing external."""
    for heading in SECTIONS + (("Per class",) if classification else ()):
        assert f"<h2>{heading}" in document or f"<h3>{heading}" in document, heading
    assert ("<h3>Per class" in document) == classification
    captions = [caption for caption, _ in images(document) if caption not in IMPORTANCE_PLOTS + CURVES_PLOTS]
    assert captions == (CLASSIFICATION_PLOTS if classification else REGRESSION_PLOTS)
    for _, data in images(document):
        assert_valid_png(data)
    assert_offline(document)
    shown = [document.index(opening) for opening in ORDER if opening in document]
    assert shown == sorted(shown), [opening for opening in ORDER if opening in document]


# -- a small real evaluation with slices, intervals and importance ---------------------------------------------------
CLASSES = ("Adelie", "Chinstrap", "Gentoo")
FEATURES = ("bill", "flipper", "noise")
MIN_ROWS = 10
SLICE_THRESHOLD = 0.9  # island=Dream (0.8548) fails, island=Biscoe (0.9231) passes


def _penguin_rows(n: int, seed: int) -> Tuple[np.ndarray, Dict[str, np.ndarray], np.ndarray]:
    """Labels [n], features {name: [n] float} (bill tells the class apart, flipper less so, noise not at all),
    islands [n] (Torgersen has fewer than MIN_ROWS rows)."""
    rng = np.random.default_rng(seed)
    k = np.arange(n) % 3
    features = {
        "bill": k + rng.normal(0.0, 0.45, n),
        "flipper": 0.5 * k + rng.normal(0.0, 0.5, n),
        "noise": rng.normal(0.0, 1.0, n),
    }
    islands = np.array(["Biscoe", "Dream", "Torgersen"], dtype=object)[rng.choice(3, n, p=[0.5, 0.45, 0.05])]
    return k, features, islands


def _model(bill_weight: float) -> Callable[[Mapping[str, np.ndarray]], np.ndarray]:
    """A fixed model: probabilities [N, 3] from each class's distance to the features' class means."""

    def probabilities(features: Mapping[str, np.ndarray]) -> np.ndarray:
        k = np.arange(3)[None, :]
        logits = -bill_weight * (features["bill"][:, None] - k) ** 2 - (features["flipper"][:, None] - 0.5 * k) ** 2
        logits -= 0.01 * features["noise"][:, None] * k
        exp = np.exp(logits - logits.max(axis=1, keepdims=True))
        return exp / exp.sum(axis=1, keepdims=True)

    return probabilities


def _scores(probabilities: np.ndarray) -> Scores:
    return Scores(np.array([CLASSES[i] for i in probabilities.argmax(axis=1)], dtype=object), probabilities)


def _hits(truth: Truth, scores: Scores) -> np.ndarray:
    return (scores.predicted == truth.labels).astype(np.float64)


def _slices(truth: Truth, scores: Scores, islands: np.ndarray) -> Dict[str, Any]:
    rows = []
    for island in sorted(set(islands)):
        mask = islands == island
        part = Truth(tuple(np.array(truth.keys)[mask]), truth.labels[mask], truth.classes)
        metrics = reported_metrics(part, Scores(scores.predicted[mask], scores.probabilities[mask]))
        judged = int(mask.sum()) >= MIN_ROWS
        kept = {name: metrics[name] for name in ("accuracy", "log_loss")}
        passed = kept["accuracy"] >= SLICE_THRESHOLD if judged else None
        rows.append(
            {
                "name": f"island={island}",
                "features": ["island"],
                "rows": int(mask.sum()),
                "metrics": kept,
                "judged": judged,
                "passed": passed,
            }
        )
    overall = reported_metrics(truth, scores)
    rows.sort(key=lambda row: row["metrics"]["accuracy"])
    return {
        "metric": "accuracy",
        "min_rows": MIN_ROWS,
        "overall": {name: overall[name] for name in ("accuracy", "log_loss")},
        "slices": rows,
    }


def _slice_check(row: Mapping[str, Any]) -> Check:
    value, sign = row["metrics"]["accuracy"], ">=" if row["passed"] else "<"
    message = f"slice {row['name']}: accuracy={value:.4f} {sign} {SLICE_THRESHOLD}"
    return Check(f"slice {row['name']}", "accuracy", value, SLICE_THRESHOLD, row["passed"], message)


def _intervals(hits: np.ndarray, baseline_hits: np.ndarray, seed: int) -> Dict[str, Any]:
    """Bootstrap (percentile) intervals of accuracy and of the paired difference with the baseline."""
    rng = np.random.default_rng(seed)
    draws = rng.integers(0, len(hits), size=(200, len(hits)))
    accuracy, difference = hits[draws].mean(axis=1), (hits[draws] - baseline_hits[draws]).mean(axis=1)
    low, high = np.quantile(accuracy, [0.025, 0.975])
    d_low, d_high = np.quantile(difference, [0.025, 0.975])
    verdict = "better" if d_low > 0 else "worse" if d_high < 0 else "no different"
    return {
        "confidence": 0.95,
        "replicates": 200,
        "seed": seed,
        "metrics": {"accuracy": {"value": float(hits.mean()), "low": float(low), "high": float(high)}},
        "baseline": {
            "metric": "accuracy",
            "difference": float((hits - baseline_hits).mean()),
            "low": float(d_low),
            "high": float(d_high),
            "verdict": verdict,
        },
    }


def _importance(model: Callable, features: Dict[str, np.ndarray], labels: np.ndarray, seed: int) -> Dict[str, Any]:
    """Permutation importance of accuracy (3 repeats) and integrated gradients of the true class's probability
    (finite differences along the path from an all-zero input)."""
    rng = np.random.default_rng(seed)
    accuracy = float((model(features).argmax(axis=1) == labels).mean())
    permutation = []
    for name in FEATURES:
        drops = [
            accuracy
            - float((model({**features, name: rng.permutation(features[name])}).argmax(axis=1) == labels).mean())
            for _ in range(3)
        ]
        permutation.append({"feature": name, "importance": float(np.mean(drops)), "std": float(np.std(drops))})
    permutation.sort(key=lambda p: -p["importance"])
    rows, steps, h = np.arange(len(labels)), 16, 1e-4
    attributions = []
    for name in FEATURES:
        grads = [
            (
                model({n: a * v + (h if n == name else 0.0) for n, v in features.items()})[rows, labels]
                - model({n: a * v - (h if n == name else 0.0) for n, v in features.items()})[rows, labels]
            )
            / (2 * h)
            for a in (np.arange(steps) + 0.5) / steps
        ]
        attributions.append({"feature": name, "attribution": float(np.mean(features[name] * np.mean(grads, axis=0)))})
    return {
        "metric": "accuracy",
        "higher_is_better": True,
        "rows": len(labels),
        "repeats": 3,
        "permutation": permutation,
        "attributions": {
            "method": "integrated_gradients",
            "output": "probabilities",
            "steps": steps,
            "features": attributions,
        },
    }


# The run facts of `penguin_findings`: fixed, so the report's header can be checked exactly.
HEADER = RunHeader(
    run="tpu-estimator-pipeline-20261125T211912Z-a1b2c3",
    started="2026-11-25T21:19:12+00:00",
    written="2026-11-25T21:21:47+00:00",
    covers="prepare, train, evaluate until this report; batch prediction, export, the serving check and release "
    "run after it",
    data=(("penguins.csv", 480),),
    data_fingerprint="9f2c41d07be3" + "0" * 52,
    code="commit 2f05c19a1b2c",
    model="dnn family",
)
BEST_STEP = 600


def _curves() -> Dict[str, Any]:
    """A training loss logged every 100 steps and a validation loss every 200, lowest at `BEST_STEP`."""
    train = [[s, round(0.9 * np.exp(-s / 300) + 0.25, 4)] for s in range(100, 1001, 100)]
    validation = [[s, round(0.4 + 1e-6 * (s - BEST_STEP) ** 2, 4)] for s in range(200, 1001, 200)]
    return {"train": train, "validation": validation, "best_step": BEST_STEP}


def _worst(truth: Truth, candidate: Scores, features: Dict[str, np.ndarray], islands: np.ndarray) -> list:
    """The 10 rows of highest log loss, as `worst.worst_rows` gives them; row i sits on line i + 2 of
    penguins.csv (a header, then one row a line)."""
    losses = row_losses(truth, candidate)
    rows = []
    for i in np.argsort(-losses, kind="stable")[:10].tolist():
        predicted = candidate.predicted[i]
        values = {name: round(float(column[i]), 2) for name, column in features.items()}
        rows.append(
            {
                "key": truth.keys[i],
                "label": truth.labels[i],
                "predicted": predicted,
                "probability": float(candidate.probabilities[i, CLASSES.index(predicted)]),
                "loss": float(losses[i]),
                "source": {"file": "penguins.csv", "line": i + 2},
                "values": {**values, "island": islands[i]},
            }
        )
    return rows


def penguin_findings(n: int = 120, seed: int = 0) -> ReportInputs:
    """The report inputs of a fixed model on `n` penguin-like eval rows, against a weaker baseline: its verdict,
    metrics, slices by island (one too small to judge), bootstrap intervals, feature importance and the worst
    rows, all computed from the rows; a fixed run header and loss curves."""
    labels, features, islands = _penguin_rows(n, seed)
    truth = Truth(tuple(f"k{i}" for i in range(n)), np.array([CLASSES[i] for i in labels], dtype=object), CLASSES)
    candidate, baseline = _scores(_model(4.0)(features)), _scores(_model(0.3)(features))
    metrics, published = reported_metrics(truth, candidate), reported_metrics(truth, baseline)
    slices = _slices(truth, candidate, islands)
    checks = (
        Check("baseline", "accuracy", metrics["accuracy"], published["accuracy"], True, "beats the baseline"),
        *[_slice_check(row) for row in slices["slices"] if row["judged"]],
    )
    blessing = Blessing(
        all(c.passed for c in checks),
        checks,
        {"accuracy": metrics["accuracy"]},
        "accuracy",
        n,
        "/published/v1",
        {"accuracy": published["accuracy"]},
    )
    return ReportInputs(
        title="species on penguins: model at step 100",
        blessing=blessing,
        truth=truth,
        candidate=candidate,
        baseline=baseline,
        model_metrics=metrics,
        manifest={"counts": {"train": 3 * n, "eval": n}},
        run={"fingerprints": {"dataset": "abc123"}},
        slices=slices,
        intervals=_intervals(_hits(truth, candidate), _hits(truth, baseline), seed),
        importance=_importance(_model(4.0), features, labels, seed),
        header=HEADER,
        curves=_curves(),
        worst_rows=_worst(truth, candidate, features, islands),
    )
