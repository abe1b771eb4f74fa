"""Blessing: is a newly trained model good enough to publish?

A candidate is blessed when every check passes:
  * it beats the trivial model (always the most frequent class; always the mean label), unless turned off;
  * each user threshold holds (`{"accuracy": 0.9}` is a floor, `{"rmse": 3.5}` a ceiling: the direction is the
    metric's own);
  * when a baseline is given (the last published model), the candidate improves on it by at least
    `min_improvement` on the comparison metric (negative tolerates a drop of that size).

Runs on the host CPU, on metrics from `evaluation.metrics`.
"""

from __future__ import annotations

import dataclasses
import json
import math
from typing import Any, Dict, List, Mapping, Optional, Tuple

from estimator_lib.config import BlessingConfig, higher_is_better
from estimator_lib.evaluation.metrics import Truth, trivial_metrics


# -- the decision --------------------------------------------------------------------------------------------
@dataclasses.dataclass(frozen=True)
class Check:
    """One blessing check: `value` compared with `bound` in the metric's direction."""

    name: str
    metric: str
    value: float
    bound: float
    passed: bool
    message: str


def _check(name: str, metric: str, value: float, bound: float, strict: bool, what: str) -> Check:
    higher = higher_is_better(metric)
    if math.isnan(value):
        passed = False
    elif higher:
        passed = value > bound if strict else value >= bound
    else:
        passed = value < bound if strict else value <= bound
    relation = (">" if strict else ">=") if higher else ("<" if strict else "<=")
    verdict = "holds" if passed else "fails"
    return Check(name, metric, value, bound, passed, f"{what}: {metric}={value:.4f} {relation} {bound:.4f} {verdict}")


@dataclasses.dataclass(frozen=True)
class Blessing:
    """The verdict and its evidence (what the export stage reads to decide whether to publish)."""

    blessed: bool
    checks: Tuple[Check, ...]
    candidate_metrics: Mapping[str, float]
    comparison_metric: str
    num_examples: int
    baseline_uri: Optional[str] = None
    baseline_metrics: Optional[Mapping[str, float]] = None

    @property
    def reasons(self) -> Tuple[str, ...]:
        """Why the candidate was not blessed (the failed checks), empty when it was."""
        return tuple(c.message for c in self.checks if not c.passed)

    def summary(self) -> str:
        if self.blessed:
            return f"blessed: all {len(self.checks)} check(s) hold"
        return "not blessed: " + "; ".join(self.reasons)

    def to_dict(self) -> Dict[str, Any]:
        out = dataclasses.asdict(self)
        out["checks"] = [dataclasses.asdict(c) for c in self.checks]
        out["reasons"] = list(self.reasons)
        return out

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=2, sort_keys=True)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> "Blessing":
        fields = {f.name for f in dataclasses.fields(cls)}
        kwargs = {k: v for k, v in data.items() if k in fields}
        kwargs["checks"] = tuple(Check(**c) for c in data["checks"])
        return cls(**kwargs)


def decide(
    config: BlessingConfig,
    truth: Truth,
    candidate: Mapping[str, float],
    baseline: Optional[Mapping[str, float]] = None,
    baseline_uri: Optional[str] = None,
) -> Blessing:
    """Applies `config` to the candidate's (and the baseline's) blessing metrics."""
    config.check_task(truth.task)
    checks: List[Check] = []
    if config.beat_trivial:
        for metric, value in trivial_metrics(truth).items():
            checks.append(_check("trivial", metric, candidate[metric], value, True, "better than the trivial model"))
    for metric, bound in sorted(config.thresholds.items()):
        checks.append(_check("threshold", metric, candidate[metric], float(bound), False, "threshold"))
    comparison = config.comparison_for(truth.task)
    if baseline is not None:
        sign = 1.0 if higher_is_better(comparison) else -1.0
        bound = baseline[comparison] + sign * config.min_improvement
        what = f"vs baseline {baseline[comparison]:.4f} with min_improvement {config.min_improvement:g}"
        checks.append(_check("baseline", comparison, candidate[comparison], bound, False, what))
    return Blessing(
        blessed=all(c.passed for c in checks),
        checks=tuple(checks),
        candidate_metrics=dict(candidate),
        comparison_metric=comparison,
        num_examples=len(truth.keys),
        baseline_uri=baseline_uri,
        baseline_metrics=dict(baseline) if baseline is not None else None,
    )
