"""The linear reference: a quick, deterministic model fitted in every run, to tell a good candidate from a bad one.

The evaluate stage fits it on the rows the candidate learned from (the train split and the validation split)
and scores it on the same eval rows, with the same metrics (`evaluation.metrics.compute_metrics`). The blessing
then asks the candidate to be no worse than it by a margin (`BlessingConfig.reference_margin`).

What it is: a linear model on the candidate's own normalised features (`model.transform`): numerics standardised
with the schema's training statistics (a missing value is the training mean, i.e. 0), and each categorical
one-hot over its vocabulary and out-of-vocabulary buckets, plus an intercept.
  * regression: ridge least squares on the standardised label, predictions in the label's units;
  * classification: multinomial logistic regression (softmax over every class).
Both minimise mean loss + l2/2 * |w|^2 (the intercept is not penalised) with l2 = 1 / rows, which is
scikit-learn's Ridge(alpha=1) and LogisticRegression(C=1). The solver is Newton's method with conjugate
gradients and a backtracking line search (a quadratic converges in one step): exact to `tolerance`, the same
result on every run, in NumPy on the host CPU. One-hot columns are never materialised, so a wide vocabulary costs
memory per row, not per column.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Callable, List, Optional, Sequence, Tuple

import numpy as np
import tensorflow as tf

from estimator_lib.evaluation.metrics import Scores, Truth
from estimator_lib.model import transform
from estimator_lib.model.inputs import Patterns, resolve_files
from estimator_lib.schema import CLASSIFICATION, KEY_FEATURE, LABEL_KEY, Schema

DEFAULT_MAX_ROWS = 200_000
_READ_BATCH = 4096


# -- the design matrix ---------------------------------------------------------------------------------------
@dataclasses.dataclass(frozen=True)
class Design:
    """Rows of the linear model's inputs, with one-hot columns kept as indices.

    Attributes:
      numeric: float64 [N, P], standardised numerics.
      ids: int64 [N, C], each categorical's id shifted into one shared one-hot space of `buckets` columns.
      buckets: total one-hot columns over all categoricals.
    The weight matrix is [P + buckets + 1, K]: numeric weights, one-hot weights, the intercept last.
    """

    numeric: np.ndarray
    ids: np.ndarray
    buckets: int

    @property
    def rows(self) -> int:
        return self.numeric.shape[0]

    @property
    def width(self) -> int:
        return self.numeric.shape[1] + self.buckets + 1

    def dot(self, w: np.ndarray) -> np.ndarray:
        """X @ w: [N, K] for w [width, K]."""
        p = self.numeric.shape[1]
        out = self.numeric @ w[:p] + w[-1]
        if self.ids.shape[1]:
            out = out + w[p:-1][self.ids].sum(axis=1)
        return out

    def tdot(self, g: np.ndarray) -> np.ndarray:
        """X.T @ g: [width, K] for g [N, K]."""
        c = self.ids.shape[1]
        one_hot = np.zeros((self.buckets, g.shape[1]))
        flat = self.ids.ravel()
        for k in range(g.shape[1]):
            one_hot[:, k] = np.bincount(flat, weights=np.repeat(g[:, k], c), minlength=self.buckets)
        return np.concatenate([self.numeric.T @ g, one_hot, g.sum(axis=0, keepdims=True)])


def _offsets(schema: Schema) -> np.ndarray:
    sizes = [f.num_buckets for f in schema.categorical]
    return np.concatenate([[0], np.cumsum(sizes)[:-1]]).astype(np.int64) if sizes else np.zeros(0, np.int64)


def _columns(columns: List[np.ndarray], rows: int) -> np.ndarray:
    """[rows, len(columns)]: the columns side by side (a schema may have no numeric or no categorical)."""
    return np.stack(columns, axis=1) if columns else np.zeros((rows, 0))


def read_design(schema: Schema, files: Sequence[Patterns], stride: int = 1) -> Tuple[List[str], Design, np.ndarray]:
    """Reads prepared TFRecords into (keys, design, labels), keeping every `stride`-th record. Host CPU.

    Features go through `model.transform`, as the model's own input does: numerics imputed with the training
    mean, categoricals looked up in the vocabulary. Labels are class indices (int) or values (float64).
    """
    paths = [p for pattern in files for p in resolve_files(pattern)]
    spec = transform.parse_spec(schema)
    dataset = tf.data.TFRecordDataset(paths)
    if stride > 1:
        dataset = dataset.enumerate().filter(lambda i, _: i % stride == 0).map(lambda _, s: s)
    keys: List[str] = []
    numeric, ids, labels = [], [], []
    for batch in dataset.batch(_READ_BATCH):
        parsed = tf.io.parse_example(batch, spec)
        features = transform.to_model_features(parsed, schema)
        keys.extend(k.decode("utf-8") for k in parsed[KEY_FEATURE].numpy())
        rows = len(batch)
        numeric.append(_columns([(features[f.key].numpy() - f.mean) / f.std for f in schema.numeric], rows))
        ids.append(_columns([features[f.key].numpy() for f in schema.categorical], rows))
        labels.append(parsed[LABEL_KEY].numpy())
    n = len(keys)
    numeric_all = np.concatenate(numeric).astype(np.float64) if n else np.zeros((0, len(schema.numeric)))
    ids_all = np.concatenate(ids).astype(np.int64) if n else np.zeros((0, len(schema.categorical)), np.int64)
    numeric_all = numeric_all.reshape(n, len(schema.numeric))
    ids_all = ids_all.reshape(n, len(schema.categorical)) + _offsets(schema)
    label_all = np.concatenate(labels) if n else np.zeros(0)
    buckets = sum(f.num_buckets for f in schema.categorical)
    return keys, Design(numeric_all, ids_all, buckets), label_all


# -- the solver ----------------------------------------------------------------------------------------------
Objective = Callable[[np.ndarray], Tuple[float, np.ndarray]]
HessianProduct = Callable[[np.ndarray, np.ndarray], np.ndarray]


def _conjugate_gradient(product: Callable[[np.ndarray], np.ndarray], b: np.ndarray, tol: float, iterations: int):
    """Solves product(x) = b for a symmetric positive (semi-)definite operator, from x = 0."""
    x = np.zeros_like(b)
    r = b.copy()
    d = r.copy()
    rr = float(np.sum(r * r))
    for _ in range(iterations):
        if math.sqrt(rr) <= tol:
            break
        hd = product(d)
        curvature = float(np.sum(d * hd))
        if curvature <= 0:
            break
        alpha = rr / curvature
        x += alpha * d
        r -= alpha * hd
        rr_next = float(np.sum(r * r))
        d = r + (rr_next / rr) * d
        rr = rr_next
    return x


def _norm(v: np.ndarray) -> float:
    return float(np.sqrt(np.sum(v * v)))


def newton_cg(
    objective: Objective, hessian_product: HessianProduct, w: np.ndarray, tolerance: float = 1e-10, steps: int = 100
) -> np.ndarray:
    """Minimises a smooth convex objective from `w`: Newton directions by conjugate gradients, then a
    backtracking (Armijo) line search. Stops when the gradient's norm is at most `tolerance`."""
    loss, grad = objective(w)
    for _ in range(steps):
        norm = _norm(grad)
        if norm <= tolerance:
            break
        cg_tol = min(0.5, math.sqrt(norm)) * norm
        direction = _conjugate_gradient(lambda v, w=w: hessian_product(w, v), -grad, cg_tol, 10 * w.size + 10)
        slope = float(np.sum(grad * direction))
        step = 1.0
        for _ in range(40):
            candidate = w + step * direction
            new_loss, new_grad = objective(candidate)
            if new_loss <= loss + 1e-4 * step * slope:
                break
            # Near the optimum the decrease is below the loss's rounding (a few ulps of it), where the Armijo test
            # would stop wherever the CPU's last bits fall; the gradient still resolves it.
            if new_loss <= loss + 64 * np.finfo(np.float64).eps * abs(loss) and _norm(new_grad) < norm:
                break
            step *= 0.5
        else:
            break  # no decrease left at machine precision
        w, loss, grad = candidate, new_loss, new_grad
    return w


def _penalised(design: Design, l2: float) -> np.ndarray:
    mask = np.ones((design.width, 1))
    mask[-1] = 0.0  # the intercept is not penalised
    return l2 * mask


def fit_ridge(design: Design, target: np.ndarray, l2: float, tolerance: float = 1e-10) -> np.ndarray:
    """Weights [width, 1] minimising mean((Xw - target)^2) / 2 + l2/2 |w|^2 (intercept unpenalised)."""
    penalty = _penalised(design, l2)
    t = target.reshape(-1, 1)
    n = design.rows

    def objective(w):
        residual = design.dot(w) - t
        return 0.5 * float(np.mean(residual**2)) + 0.5 * float(np.sum(penalty * w * w)), (
            design.tdot(residual) / n + penalty * w
        )

    def product(_, v):
        return design.tdot(design.dot(v)) / n + penalty * v

    return newton_cg(objective, product, np.zeros((design.width, 1)), tolerance)


def _softmax(logits: np.ndarray) -> np.ndarray:
    z = logits - logits.max(axis=1, keepdims=True)
    e = np.exp(z)
    return e / e.sum(axis=1, keepdims=True)


def fit_logistic(
    design: Design, labels: np.ndarray, num_classes: int, l2: float, tolerance: float = 1e-10
) -> np.ndarray:
    """Weights [width, K] of multinomial logistic regression: mean cross entropy + l2/2 |W|^2 (intercepts
    unpenalised). labels int [N] in [0, K)."""
    penalty = _penalised(design, l2)
    onehot = np.eye(num_classes)[labels]
    n = design.rows

    def objective(w):
        logits = design.dot(w)
        shifted = logits - logits.max(axis=1, keepdims=True)
        log_norm = np.log(np.exp(shifted).sum(axis=1))
        loss = float(np.mean(log_norm - np.sum(onehot * shifted, axis=1)))
        grad = design.tdot(_softmax(logits) - onehot) / n + penalty * w
        return loss + 0.5 * float(np.sum(penalty * w * w)), grad

    def product(w, v):
        p = _softmax(design.dot(w))
        z = design.dot(v)
        pz = p * z
        return design.tdot(pz - p * pz.sum(axis=1, keepdims=True)) / n + penalty * v

    return newton_cg(objective, product, np.zeros((design.width, num_classes)), tolerance)


# -- the reference of a run ----------------------------------------------------------------------------------
@dataclasses.dataclass(frozen=True)
class LinearReference:
    """A fitted linear reference. `weights` [width, K] (K = 1 for regression); `rows` it was fitted on."""

    schema: Schema
    weights: np.ndarray
    l2: float
    rows: int

    @property
    def description(self) -> str:
        kind = "logistic regression" if self.schema.label.task == CLASSIFICATION else "ridge least squares"
        return f"{kind} on the normalised features (l2 {self.l2:.3g}, {self.rows} training rows)"

    def predict(self, design: Design) -> Scores:
        """Predictions for `design`'s rows: values in the label's units, or classes and probabilities."""
        label = self.schema.label
        out = design.dot(self.weights)
        if label.task != CLASSIFICATION:
            return Scores(out[:, 0] * label.std + label.mean)
        probabilities = _softmax(out)
        predicted = np.array([label.classes[i] for i in probabilities.argmax(axis=1)], dtype=object)
        return Scores(predicted, probabilities)

    def scores(self, files: Patterns, truth: Truth) -> Scores:
        """The reference's predictions for the eval rows in `files`, in `truth.keys` order."""
        keys, design, _ = read_design(self.schema, [files])
        scores = self.predict(design)
        position = {k: i for i, k in enumerate(keys)}
        order = np.array([position[k] for k in truth.keys], dtype=np.int64)
        probabilities = None if scores.probabilities is None else scores.probabilities[order]
        return Scores(scores.predicted[order], probabilities)


def fit_reference(
    schema: Schema, files: Sequence[Patterns], count: Optional[int] = None, max_rows: int = DEFAULT_MAX_ROWS
) -> LinearReference:
    """Fits the linear reference on the records of `files` (at most `max_rows` of them: every k-th record when
    `count`, the records in the files, is larger)."""
    stride = max(1, math.ceil(count / max_rows)) if count else 1
    _, design, labels = read_design(schema, files, stride)
    if design.rows == 0:
        raise ValueError(f"no training row in {list(files)!r} to fit the linear reference on")
    l2 = 1.0 / design.rows
    label = schema.label
    if label.task == CLASSIFICATION:
        weights = fit_logistic(design, labels.astype(np.int64), label.num_classes, l2)
    else:
        weights = fit_ridge(design, (labels.astype(np.float64) - label.mean) / label.std, l2)
    return LinearReference(schema, weights, l2, design.rows)
