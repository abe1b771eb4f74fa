"""`BlessingConfig`: when a newly trained model is good enough to publish, and which way each metric points."""

from __future__ import annotations

import dataclasses
import math
from typing import Mapping, Optional

from estimator_lib.config.base import ConfigError, JsonConfig
from estimator_lib.schema import CLASSIFICATION, REGRESSION

HIGHER_IS_BETTER = ("accuracy", "auc", "r2")
LOWER_IS_BETTER = ("log_loss", "rmse", "mae")
TASK_METRICS = {CLASSIFICATION: ("accuracy", "log_loss", "auc"), REGRESSION: ("rmse", "mae", "r2")}
DEFAULT_COMPARISON = {CLASSIFICATION: "accuracy", REGRESSION: "rmse"}


class BlessingError(ConfigError):
    """The blessing configuration does not fit the task, or predictions do not cover the eval rows."""


def higher_is_better(metric: str) -> bool:
    if metric in HIGHER_IS_BETTER:
        return True
    if metric in LOWER_IS_BETTER:
        return False
    raise BlessingError(f"unknown blessing metric {metric!r}; use one of {sorted(HIGHER_IS_BETTER + LOWER_IS_BETTER)}")


@dataclasses.dataclass(frozen=True)
class BlessingConfig(JsonConfig):
    """When a candidate is blessed.

    Attributes:
      thresholds: {metric: worst acceptable value}; a floor for accuracy/auc/r2, a ceiling for
        log_loss/rmse/mae. Classification metrics: accuracy, log_loss, auc (one-vs-rest macro average for
        more than two classes); regression: rmse, mae, r2.
      beat_trivial: require the candidate to beat the trivial model (accuracy above the most frequent
        class's share; r2 above 0, i.e. better than always predicting the mean).
      comparison_metric: the metric compared with the baseline; None picks accuracy (classification) or rmse
        (regression).
      min_improvement: how much better than the baseline the candidate must be on the comparison metric, in the
        metric's units and direction (0.01 = one accuracy point better; -0.01 tolerates one point worse).
    """

    thresholds: Mapping[str, float] = dataclasses.field(default_factory=dict)
    beat_trivial: bool = True
    comparison_metric: Optional[str] = None
    min_improvement: float = 0.0

    def __post_init__(self) -> None:
        if not isinstance(self.thresholds, Mapping):
            raise BlessingError(f"blessing thresholds must be a JSON object {{metric: value}}, got {self.thresholds!r}")
        object.__setattr__(self, "thresholds", dict(self.thresholds))
        for name, value in self.thresholds.items():
            higher_is_better(name)
            if not isinstance(value, (int, float)) or isinstance(value, bool) or not math.isfinite(value):
                raise BlessingError(f"blessing threshold {name}={value!r} must be a finite number")
        if self.comparison_metric is not None:
            higher_is_better(self.comparison_metric)
        if not isinstance(self.min_improvement, (int, float)) or not math.isfinite(self.min_improvement):
            raise BlessingError(f"min_improvement={self.min_improvement!r} must be a finite number, e.g. 0.0")

    def check_task(self, task: str) -> None:
        """Raises when a metric named here does not exist for `task`."""
        allowed = TASK_METRICS[task]
        named = list(self.thresholds) + ([self.comparison_metric] if self.comparison_metric else [])
        wrong = sorted(m for m in named if m not in allowed)
        if wrong:
            raise BlessingError(f"blessing metric(s) {wrong} do not apply to a {task} label; use {list(allowed)}")

    def comparison_for(self, task: str) -> str:
        return self.comparison_metric or DEFAULT_COMPARISON[task]
