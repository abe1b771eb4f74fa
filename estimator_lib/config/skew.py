"""`SkewConfig` (`--set predict.*`): what batch prediction does when the rows it scores differ from the training
data, and how far they may differ."""

from __future__ import annotations

import dataclasses
import math
from typing import Any, Mapping

from estimator_lib.config.base import JsonConfig, require

OFF, WARN, BLOCK = "off", "warn", "block"
SKEW_MODES = (OFF, WARN, BLOCK)
# The per-feature thresholds, by the name `predict.features` overrides them with.
THRESHOLD_NAMES = ("max_distance", "max_unseen_share", "max_missing_change", "max_out_of_range")


@dataclasses.dataclass(frozen=True)
class SkewConfig(JsonConfig):
    """The skew check of the rows batch prediction scores against the model's training data
    (`estimator_lib.predict.skew`); the `predict` section of a run's settings.

    Attributes:
      skew: "off" computes nothing and writes no skew.json; "warn" writes skew.json and records the breaches in
        the predictions' metadata and the run's summary; "block" fails the stage before any prediction is
        published, naming the worst features.
      max_distance: the most population stability index (PSI) a feature may reach: over the training deciles for
        a numeric feature, over the training categories plus one "unseen" bin for a categorical one (0.1 is
        commonly read as a small shift, 0.25 as a large one). For few rows the limit applied is raised to what
        sampling noise reaches (0.51 for 69 rows against 275, 0.0002 for 200,000 against a million).
      max_unseen_share: the largest share of a categorical feature's present values that training never saw.
      max_missing_change: the largest change of a feature's share of missing values (0.1: ten points).
      max_out_of_range: the largest share of a numeric feature's present values outside the training
        [min, max].
      features: per-feature overrides, {feature: {threshold name: value}}, e.g.
        {"island": {"max_unseen_share": 0.5}}; a feature the model was not trained on fails the check, naming it.
      max_prediction_shift: the largest change of one predicted class's share of the rows (a regressor: of one
        decile of its eval predictions) between the eval rows the model was blessed on and the rows scored (0.1:
        ten points). For few rows the limit applied is raised to what sampling noise reaches (0.2 for 67 eval
        rows at a share near one half).
    """

    skew: str = WARN
    max_distance: float = 0.2
    max_unseen_share: float = 0.05
    max_missing_change: float = 0.1
    max_out_of_range: float = 0.05
    features: Mapping[str, Mapping[str, float]] = dataclasses.field(default_factory=dict)
    max_prediction_shift: float = 0.1

    def __post_init__(self) -> None:
        require(self.skew in SKEW_MODES, f"predict.skew={self.skew!r} must be one of {list(SKEW_MODES)}")
        for name in (*THRESHOLD_NAMES, "max_prediction_shift"):
            _check_threshold(f"predict.{name}", getattr(self, name))
        object.__setattr__(self, "features", {k: dict(v) for k, v in _feature_items(self.features)})
        for feature, overrides in self.features.items():
            for name, value in overrides.items():
                require(
                    name in THRESHOLD_NAMES,
                    f"predict.features[{feature!r}]: unknown threshold {name!r}; use one of {list(THRESHOLD_NAMES)}",
                )
                _check_threshold(f"predict.features[{feature!r}].{name}", value)

    def thresholds(self, feature: str) -> Mapping[str, float]:
        """{threshold name: value} for `feature`: its overrides over the defaults."""
        return {**{name: getattr(self, name) for name in THRESHOLD_NAMES}, **self.features.get(feature, {})}


def _feature_items(features: Any) -> list:
    require(
        isinstance(features, Mapping) and all(isinstance(v, Mapping) for v in features.values()),
        f"predict.features={features!r} must be a JSON object {{feature: {{threshold: value}}}}, e.g. "
        '{"island": {"max_unseen_share": 0.5}}',
    )
    return sorted(features.items())


def _check_threshold(key: str, value: Any) -> None:
    finite = isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
    require(finite and value >= 0, f"{key}={value!r} must be a number >= 0")


DEFAULT_SKEW = SkewConfig()  # the defaults: predict.skew=warn and the documented thresholds
