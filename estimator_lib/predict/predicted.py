"""The prediction half of the skew check: what a model predicts for the rows it scores, against what it predicted
for the eval rows it was blessed on. Host CPU only.

Both sides are counts over the same bins (`PredictionProfile`):

  * classification: the predicted class of each row (the model's `class_ids`), over the schema's classes;
  * regression: the predicted value of each row, over the deciles of the eval predictions (float32 edges: the
    outputs' own type, so a value on an edge falls in the same bin on both sides).

The evaluate stage records the eval rows' profile in the blessing (`Blessing.eval_predictions`); a release carries
it into the published version's record, where `tpu-pipeline predict` reads it. Batch prediction counts its rows as
it scores them (`PredictionCounter.add`, on each engine's outputs; on Beam each worker counts its parts and the
launcher adds the counts) and `compare` judges the shift before the predictions are committed. The engines'
outputs agree to 1e-5, not bit for bit: a row on a near-tie between two classes, or on a bin edge, may count
differently on the other engine.

The figure is the largest change of one bin's share of the rows ("share shift"), held to
`SkewConfig.max_prediction_shift`, raised to what sampling noise reaches between samples of these sizes.
"""

from __future__ import annotations

import dataclasses
import json
import statistics
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple

import numpy as np

from estimator_lib.schema import CLASSIFICATION, Schema

CLASSES, VALUES = "classes", "values"
DECILES = np.linspace(0.1, 0.9, 9)
SHIFT = "share shift"
# A shift is flagged only beyond what sampling noise reaches this often between samples of one distribution.
NOISE_CONFIDENCE = 0.999


@dataclasses.dataclass(frozen=True)
class PredictionProfile:
    """What a model predicted for some rows, as counts over bins.

    Attributes:
      kind: "classes" (a classifier's predicted classes) or "values" (a regressor's predicted values).
      bins: the class names, in the schema's order ("classes"); for "values", the bins' edges (float32 values,
        ascending): bin 0 holds the values below edges[0], bin i those in [edges[i-1], edges[i]), the last those
        at or above edges[-1].
      counts: rows per bin.
    """

    kind: str
    bins: Tuple[Any, ...]
    counts: Tuple[int, ...]

    @property
    def rows(self) -> int:
        return int(sum(self.counts))

    def to_dict(self) -> Dict[str, Any]:
        return {"kind": self.kind, "bins": list(self.bins), "counts": list(self.counts), "rows": self.rows}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> "PredictionProfile":
        kind = data.get("kind")
        if kind not in (CLASSES, VALUES) or len(data.get("bins", ())) + (kind == VALUES) != len(data["counts"]):
            raise ValueError(f"not a prediction profile: {dict(data)!r}")
        bins = tuple(str(b) for b in data["bins"]) if kind == CLASSES else tuple(float(b) for b in data["bins"])
        return cls(kind, bins, tuple(int(c) for c in data["counts"]))

    def to_parameter(self) -> str:
        """The profile as a pipeline parameter's JSON text: a classifier's without its class names (the schema
        holds them, and a wide label's names do not belong on a command line), a regressor's with its edges."""
        compact = {"kind": self.kind, "counts": list(self.counts)}
        return json.dumps({**compact, "bins": list(self.bins)} if self.kind == VALUES else compact, sort_keys=True)

    @classmethod
    def from_parameter(cls, text: str, classes: Sequence[str]) -> Optional["PredictionProfile"]:
        """The profile `to_parameter` wrote ("": none), a classifier's bins being the schema's `classes`."""
        if not text:
            return None
        data = json.loads(text)
        return cls.from_dict({**data, "bins": list(classes)} if data.get("kind") == CLASSES else data)

    def counter(self) -> "PredictionCounter":
        """A counter of other rows over these bins."""
        return PredictionCounter(self.kind, self.bins)


def _edges(bins: Sequence[float]) -> np.ndarray:
    return np.asarray(bins, dtype=np.float32)


def eval_profile(schema: Schema, predicted: np.ndarray) -> PredictionProfile:
    """The profile of the eval rows' predictions: `predicted` holds the class names the model predicted
    (classification) or its predicted values (regression; the deciles become the bins)."""
    if schema.label.task == CLASSIFICATION:
        classes = tuple(schema.label.classes)
        index = {c: i for i, c in enumerate(classes)}
        counts = np.bincount([index[str(c)] for c in predicted], minlength=len(classes))
        return PredictionProfile(CLASSES, classes, tuple(int(c) for c in counts))
    values = np.asarray(predicted, dtype=np.float32)
    edges = np.unique(np.quantile(values, DECILES).astype(np.float32)) if len(values) else np.zeros(0, np.float32)
    counts = np.bincount(np.searchsorted(edges, values, side="right"), minlength=len(edges) + 1)
    return PredictionProfile(VALUES, tuple(float(e) for e in edges), tuple(int(c) for c in counts))


class PredictionCounter:
    """Counts scored rows' predictions over a profile's bins, batch by batch (`add`); counters of parts of the
    rows add up (`absorb`). Picklable: the Beam engine ships one to its workers."""

    def __init__(self, kind: str, bins: Sequence[Any]):
        self.kind, self.bins = kind, tuple(bins)
        self._edges = _edges(bins) if kind == VALUES else None
        self.counts = np.zeros(len(self.bins) + (kind == VALUES), dtype=np.int64)

    def fresh(self) -> "PredictionCounter":
        """A counter over the same bins, at zero."""
        return PredictionCounter(self.kind, self.bins)

    def add(self, outputs: Mapping[str, np.ndarray]) -> None:
        """Counts one batch of real rows' model outputs ("class_ids" [n] or [n, 1]; "predictions" [n, 1])."""
        if self.kind == CLASSES:
            ids = np.asarray(outputs["class_ids"]).reshape(-1).astype(np.int64)
        else:
            values = np.asarray(outputs["predictions"], dtype=np.float32).reshape(-1)
            ids = np.searchsorted(self._edges, values, side="right")
        self.counts += np.bincount(ids, minlength=len(self.counts))[: len(self.counts)]

    def absorb(self, counts: Sequence[int]) -> None:
        """Adds another counter's `counts` (a part of the rows counted elsewhere)."""
        self.counts += np.asarray(counts, dtype=np.int64)

    def profile(self) -> PredictionProfile:
        return PredictionProfile(self.kind, self.bins, tuple(int(c) for c in self.counts))


@dataclasses.dataclass(frozen=True)
class PredictionSkew:
    """The scored rows' predictions against the eval rows'.

    Attributes:
      kind: the profile's kind. rows: (eval rows, scored rows).
      shares: {bin name: [eval share, scored share]} (a values bin is named by its range).
      figures: {"share shift": the largest change of one bin's share}. thresholds: {"share shift": the limit
        applied}. breaches: ("share shift",) or (). reading: one line for people.
    """

    kind: str
    rows: Tuple[int, int]
    shares: Mapping[str, Tuple[float, float]]
    figures: Mapping[str, float]
    thresholds: Mapping[str, float]
    breaches: Tuple[str, ...]
    reading: str

    def to_dict(self) -> Dict[str, Any]:
        return {
            "kind": self.kind,
            "rows": {"eval": self.rows[0], "scored": self.rows[1]},
            "shares": {k: [round(float(a), 4), round(float(b), 4)] for k, (a, b) in self.shares.items()},
            "figures": {k: round(float(v), 4) for k, v in self.figures.items()},
            "thresholds": {k: round(float(v), 4) for k, v in self.thresholds.items()},
            "breaches": list(self.breaches),
            "reading": self.reading,
        }


def bin_names(profile: PredictionProfile) -> List[str]:
    """Each bin's name: the class, or the range of predicted values ("< 3.2", "[3.2, 4.1)", ">= 7.5")."""
    if profile.kind == CLASSES:
        return list(profile.bins)
    edges = [f"{e:.4g}" for e in profile.bins]
    if not edges:
        return ["all values"]
    inner = [f"[{a}, {b})" for a, b in zip(edges, edges[1:])]
    return [f"< {edges[0]}", *inner, f">= {edges[-1]}"]


def shift_noise(share: float, eval_rows: int, scored_rows: int) -> float:
    """The change of a bin's share two samples of one distribution stay under with probability `NOISE_CONFIDENCE`
    (normal approximation of the difference of two proportions around `share`)."""
    z = statistics.NormalDist().inv_cdf(NOISE_CONFIDENCE)
    return z * (share * (1 - share) * (1 / max(eval_rows, 1) + 1 / max(scored_rows, 1))) ** 0.5


def compare(reference: PredictionProfile, scored: PredictionProfile, max_shift: float) -> Optional[PredictionSkew]:
    """The scored rows' prediction shares against the eval rows'; None when either side has no row. The limit is
    `max_shift`, raised to `shift_noise` at the moved bin's pooled share."""
    if reference.rows == 0 or scored.rows == 0:
        return None
    old = np.asarray(reference.counts, np.float64) / reference.rows
    new = np.asarray(scored.counts, np.float64) / scored.rows
    change = new - old
    # the bin that moved most; of two that moved alike (two classes always do), the one that grew
    k = max(range(len(change)), key=lambda i: (round(abs(float(change[i])), 12), float(change[i])))
    shift = float(abs(new[k] - old[k]))
    pooled = (reference.counts[k] + scored.counts[k]) / (reference.rows + scored.rows)
    limit = max(float(max_shift), shift_noise(pooled, reference.rows, scored.rows))
    names = bin_names(reference)
    breaches = (SHIFT,) if shift > limit else ()
    what = "predicted class" if reference.kind == CLASSES else "predicted values in"
    reading = (
        f"{what} {names[k]}: {new[k]:.0%} of the scored rows, {old[k]:.0%} of the eval rows the model was blessed on"
    )
    return PredictionSkew(
        reference.kind,
        (reference.rows, scored.rows),
        {name: (float(a), float(b)) for name, a, b in zip(names, old, new)},
        {SHIFT: shift},
        {SHIFT: limit},
        breaches,
        reading,
    )
