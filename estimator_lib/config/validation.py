"""`ValidationConfig`: how far a run's data may drift from the data of the published model it continues."""

from __future__ import annotations

import dataclasses
import math

from estimator_lib.config.base import JsonConfig, require

FAIL, WARN = "fail", "warn"


@dataclasses.dataclass(frozen=True)
class ValidationConfig(JsonConfig):
    """Thresholds of the data validation against the reference model's data (the model a run warm-starts from
    or compares with), and what a breach does.

    Every figure compares the new training split with the training split of the data the reference model was
    trained on (`estimator_lib.data.validation`).

    Attributes:
      on_breach: "fail" stops the run before training, naming each feature, its figure and its threshold;
        "warn" records the breaches in the report and the summary and carries on.
      max_distance: the most population stability index (PSI, a symmetric distance between two histograms:
        reference deciles for numerics, the reference's values plus "unseen" for categoricals) a feature may
        reach. 0.1 is commonly read as a small shift, 0.25 as a large one.
      max_unseen_share: the largest share of a categorical feature's present values that the reference never saw
        (a renamed or new category).
      max_mean_shift: the largest change of a numeric feature's mean, in standard deviations of the reference.
      max_std_ratio: the largest ratio between the two standard deviations (either way round).
      max_missing_change: the largest change of a feature's share of missing values (0.1: ten points).
      min_row_ratio, max_row_ratio: the new training rows as a share of the reference's must lie between these.
      schema_changes: what a new or dropped column is: "fail" counts it as a breach (with `on_breach` deciding
        what happens), "warn" records it only. A dropped column is then read as missing in every row; a new one
        is not used by the model (start cold, `--warm-start none --baseline none`, to use it).
    """

    on_breach: str = FAIL
    max_distance: float = 0.25
    max_unseen_share: float = 0.1
    max_mean_shift: float = 1.0
    max_std_ratio: float = 2.0
    max_missing_change: float = 0.1
    min_row_ratio: float = 0.5
    max_row_ratio: float = 4.0
    schema_changes: str = FAIL

    def __post_init__(self) -> None:
        for name in ("on_breach", "schema_changes"):
            value = getattr(self, name)
            require(value in (FAIL, WARN), f"validation.{name}={value!r} must be 'fail' or 'warn'")
        for name in ("max_distance", "max_unseen_share", "max_mean_shift", "max_missing_change", "min_row_ratio"):
            value = getattr(self, name)
            require(_finite(value) and value >= 0, f"validation.{name}={value!r} must be a number >= 0")
        require(
            _finite(self.max_std_ratio) and self.max_std_ratio >= 1,
            f"validation.max_std_ratio={self.max_std_ratio!r} must be a number >= 1 (2: half to twice the spread)",
        )
        require(
            _finite(self.max_row_ratio) and self.max_row_ratio >= self.min_row_ratio,
            f"validation.max_row_ratio={self.max_row_ratio!r} must be a number >= min_row_ratio={self.min_row_ratio!r}",
        )


def _finite(value: object) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
