"""`BlessingConfig`: when a newly trained model is good enough to publish, and which way each metric points."""

from __future__ import annotations

import dataclasses
import math
from typing import Mapping, Optional, Sequence, Tuple

from estimator_lib import vocabulary
from estimator_lib.config.base import ConfigError, JsonConfig
from estimator_lib.schema import CLASSIFICATION, REGRESSION

TASK_METRICS = {CLASSIFICATION: ("accuracy", "log_loss", "auc"), REGRESSION: ("rmse", "mae", "r2")}
# The built-in metrics a blessing may name; their directions are the vocabulary's.
BLESSING_METRICS = TASK_METRICS[CLASSIFICATION] + TASK_METRICS[REGRESSION]
HIGHER_IS_BETTER = tuple(m for m in BLESSING_METRICS if vocabulary.BY_NAME[m].better == vocabulary.HIGHER)
LOWER_IS_BETTER = tuple(m for m in BLESSING_METRICS if vocabulary.BY_NAME[m].better == vocabulary.LOWER)
DEFAULT_COMPARISON = {CLASSIFICATION: "accuracy", REGRESSION: "rmse"}
# Scale-free metrics, so one default margin means the same on every table.
DEFAULT_REFERENCE_METRIC = {CLASSIFICATION: "accuracy", REGRESSION: "r2"}


class BlessingError(ConfigError):
    """The blessing configuration does not fit the task, or predictions do not cover the eval rows."""


DIRECTIONS = (vocabulary.HIGHER, vocabulary.LOWER)
BASELINE_TESTS = ("paired", "plain")
MIN_REPLICATES, MAX_REPLICATES = 100, 100_000


def higher_is_better(metric: str, directions: Mapping[str, str] | None = None) -> bool:
    """Whether a larger `metric` is better: `directions` (a user metric's, {"nll": "lower"}) first, then the
    built-in metrics' own."""
    if directions and metric in directions:
        return directions[metric] == "higher"
    if metric in HIGHER_IS_BETTER:
        return True
    if metric in LOWER_IS_BETTER:
        return False
    raise BlessingError(
        f"unknown blessing metric {metric!r}; use one of {sorted(HIGHER_IS_BETTER + LOWER_IS_BETTER)}, or, for "
        f'your model_fn\'s own metric, give its direction: --set blessing.directions={{"{metric}": "higher"}}'
    )


@dataclasses.dataclass(frozen=True)
class BlessingConfig(JsonConfig):
    """When a candidate is blessed.

    Attributes:
      thresholds: {metric: worst acceptable value}; a floor for accuracy/auc/r2, a ceiling for
        log_loss/rmse/mae. Classification metrics: accuracy, log_loss, auc (one-vs-rest macro average for
        more than two classes); regression: rmse, mae, r2.
      beat_trivial: require the candidate to beat the trivial model (always the most frequent class; always
        the mean) by more than chance allows on the eval rows (see `confidence`).
      confidence: the one-sided confidence of the two chance allowances, with z its standard normal quantile
        (1.64 for 0.95) and n eval rows. Trivial model: accuracy must exceed the most frequent class's share p by
        z * sqrt(p (1 - p) / n), and r2 must exceed z^2 / n (the most r2 a model unrelated to the label reaches
        by chance). Reference: the candidate may fall behind it by the margin plus z standard errors of the
        per-row difference between the two (accuracy, log_loss, r2, mae; rmse and auc get no allowance). 0.5
        gives z = 0: plain comparisons.
      reference_metric: the metric compared with the linear reference fitted in the same run
        (`evaluation.reference`); None picks accuracy (classification) or r2 (regression), which have the
        same scale on every table.
      reference_margin: how much worse than the linear reference the candidate may be on `reference_metric`, in
        the metric's units (0.02: two accuracy points, or 0.02 of r2), beyond the chance allowance; None skips
        the check (the reference is still fitted and reported).
      comparison_metric: the metric compared with the baseline; None picks accuracy (classification) or rmse
        (regression).
      min_improvement: how much better than the baseline the candidate must be on the comparison metric, in the
        metric's units and direction (0.01 = one accuracy point better; -0.01 tolerates one point worse).
      directions: the direction of a user model_fn's own metrics, {"name": "higher" | "lower"}, so that
        thresholds and `comparison_metric` may name them (the built-in names have theirs). A user model is
        blessed on its metric_fn's metrics by `thresholds` and, against the published model, `comparison_metric`
        (required for a user model); the trivial-model, linear-reference and leakage checks are the built-in
        families'.
      leakage_threshold: a feature leaks when a rule on it alone (one value -> one class or mean label, learned on
        the rows the candidate learned from; `evaluation.leakage`) removes at least this share of the trivial
        model's errors on the eval rows: of its misclassified rows, or of its squared error (that share is r2).
        A copy of the label removes all of them (1.0); a feature unrelated to the label about none. A leak blocks
        the blessing, naming the feature, unless `allow_leakage` lists it. None skips the check (and its read of
        the training rows). The built-in families' tabular runs only, whose features are known.
      allow_leakage: original names of features that may predict the label alone (a value truly known when the
        model predicts): a leak of theirs is recorded and passes. A name the data's schema does not have is an
        error at the evaluate stage, before any work.
      importance_rows: how many eval rows (a seeded sample) feature importance is measured on
        (`evaluation.importance`): each feature's values are permuted across these rows `importance_repeats` times
        and the comparison metric's loss is its importance; the sample also shrinks so that features x repeats
        x rows stays within 100,000 predicted rows. None turns feature importance off.
      importance_repeats: permutations per feature (their mean is the importance, their spread its std).
      slices: the slices the eval rows are cut into, each a feature's original name ("island": one slice per
        value) or a comma-joined cross ("island,sex": one per pair of values); each slice's rows and metrics are
        reported (`evaluation.slices`). A categorical's slices are its values, a numeric's `slice_buckets`
        quantile buckets of the eval rows; a missing value is a slice of its own ("missing"). For a user model,
        any scalar feature of the feature spec. A name the data does not have is an error before any work.
      slice_buckets: quantile buckets per numeric slice feature (fewer when values repeat).
      min_slice_rows: a slice with fewer eval rows is judged by its metric's bootstrap interval: it fails when the
        interval lies wholly on the wrong side of a bound, and is too few rows to judge either way when it holds
        the bound (a user model's small slices always: no per-row values to resample).
      slice_thresholds: {metric: worst acceptable value} every judged slice must meet, in the metric's own
        direction (as `thresholds`).
      slice_max_gap: {metric: gap}: no judged slice may be worse than the metric over all eval rows by more than
        gap, in the metric's units and direction.
      bootstrap_replicates: how many times the eval rows are resampled (with replacement, as many as there are)
        for the confidence intervals of the headline metrics and of the paired difference with the baseline
        (`evaluation.intervals`), at `confidence` (two-sided percentile intervals). AUC uses the first
        replicates only on large eval splits (see `evaluation.intervals`). In [100, 100000].
      bootstrap_seed: the seed of the resampling (>= 0): the same rows, models and seed give the same intervals,
        to the bit.
      baseline_test: how the candidate is compared with the baseline on `comparison_metric`. "paired": both
        models are scored on the same resampled rows and the check passes only when the lower bound of the
        interval of their difference (positive = better in the metric's direction) exceeds `min_improvement`:
        better beyond the noise, so a model no different from the published one is not published again. A user
        model (its metric_fn reports aggregate metrics only, nothing to resample) must then be strictly better
        than the baseline plus `min_improvement`. "plain": the point values, the candidate at least the
        baseline plus `min_improvement`.
    """

    thresholds: Mapping[str, float] = dataclasses.field(default_factory=dict)
    beat_trivial: bool = True
    confidence: float = 0.95
    comparison_metric: Optional[str] = None
    min_improvement: float = 0.0
    reference_metric: Optional[str] = None
    reference_margin: Optional[float] = 0.02
    directions: Mapping[str, str] = dataclasses.field(default_factory=dict)
    leakage_threshold: Optional[float] = 0.99
    allow_leakage: Tuple[str, ...] = ()
    importance_rows: Optional[int] = 1000
    importance_repeats: int = 2
    slices: Tuple[str, ...] = ()
    slice_buckets: int = 4
    min_slice_rows: int = 20
    slice_thresholds: Mapping[str, float] = dataclasses.field(default_factory=dict)
    slice_max_gap: Mapping[str, float] = dataclasses.field(default_factory=dict)
    bootstrap_replicates: int = 1000
    bootstrap_seed: int = 0
    baseline_test: str = "paired"

    def __post_init__(self) -> None:
        if not isinstance(self.directions, Mapping) or any(d not in DIRECTIONS for d in self.directions.values()):
            raise BlessingError(
                f'blessing.directions={self.directions!r} must map metric names to "higher" or "lower", e.g. '
                '{"nll": "lower"}'
            )
        object.__setattr__(self, "directions", dict(self.directions))
        if not isinstance(self.thresholds, Mapping):
            raise BlessingError(f"blessing.thresholds must be a JSON object {{metric: value}}, got {self.thresholds!r}")
        object.__setattr__(self, "thresholds", dict(self.thresholds))
        for name, value in self.thresholds.items():
            _known_metric("blessing.thresholds", name, self.directions)
            if not _number(value):
                raise BlessingError(f"blessing.thresholds: the threshold {name}={value!r} must be a finite number")
        if self.comparison_metric is not None:
            _known_metric("blessing.comparison_metric", self.comparison_metric, self.directions)
        if not _number(self.min_improvement):
            raise BlessingError(f"blessing.min_improvement={self.min_improvement!r} must be a finite number, e.g. 0.0")
        if not _number(self.confidence) or not 0.5 <= self.confidence < 1:
            raise BlessingError(
                f"blessing.confidence={self.confidence!r} must be a number in [0.5, 1), e.g. 0.95 "
                "(0.5: a plain comparison with the trivial model)"
            )
        if self.reference_metric is not None:
            _known_metric("blessing.reference_metric", self.reference_metric, {})
        if self.reference_margin is not None and (not _number(self.reference_margin) or self.reference_margin < 0):
            raise BlessingError(
                f"blessing.reference_margin={self.reference_margin!r} must be a finite number >= 0, e.g. 0.02, or "
                "null to skip the comparison with the linear reference"
            )
        self._check_leakage_settings()
        self._check_importance_settings()
        self._check_slice_settings()
        self._check_bootstrap_settings()

    def _check_slice_settings(self) -> None:
        given = (self.slices,) if isinstance(self.slices, str) else tuple(self.slices)
        for spec in given:
            names = [n.strip() for n in spec.split(",")] if isinstance(spec, str) else [""]
            if not all(names) or len(set(names)) != len(names):
                raise BlessingError(
                    f"blessing.slices: {spec!r} must be a feature's name or a comma-joined cross of distinct "
                    'features, e.g. --slice island or --slice island,sex (blessing.slices=["island", "island,sex"])'
                )
        specs = tuple(",".join(n.strip() for n in spec.split(",")) for spec in given)
        object.__setattr__(self, "slices", specs)
        if len(set(specs)) != len(specs):
            raise BlessingError(f"blessing.slices={list(specs)!r} names a slice twice; list each once")
        for name, value, low in (("slice_buckets", self.slice_buckets, 2), ("min_slice_rows", self.min_slice_rows, 1)):
            if not isinstance(value, int) or isinstance(value, bool) or value < low:
                raise BlessingError(f"blessing.{name}={value!r} must be an integer >= {low}, e.g. {low * 2}")
        for name in ("slice_thresholds", "slice_max_gap"):
            bounds = getattr(self, name)
            if not isinstance(bounds, Mapping):
                raise BlessingError(f"blessing.{name} must be a JSON object {{metric: value}}, got {bounds!r}")
            object.__setattr__(self, name, dict(bounds))
            for metric, value in bounds.items():
                _known_metric(f"blessing.{name}", metric, self.directions)
                if not _number(value) or (name == "slice_max_gap" and value < 0):
                    least = " >= 0" if name == "slice_max_gap" else ""
                    raise BlessingError(f"blessing.{name}: {metric}={value!r} must be a finite number{least}")
            if bounds and not specs:
                raise BlessingError(
                    f"blessing.{name}={bounds!r} judges slices, and blessing.slices names none: add --slice FEATURE"
                )

    @property
    def slice_features(self) -> Tuple[str, ...]:
        """Every feature the slices name, in order of first mention."""
        return tuple(dict.fromkeys(n for spec in self.slices for n in spec.split(",")))

    def check_slice_features(self, features: Sequence[str], what: str = "features of the data") -> None:
        """Raises when a slice names a feature not in `features` (original names, or a user spec's scalars)."""
        unknown = [n for n in self.slice_features if n not in features]
        if unknown:
            raise BlessingError(
                f"blessing.slices {list(self.slices)} names {unknown}, which are not {what}; they are "
                f"{list(features)}: give --slice one of them"
            )

    def _check_leakage_settings(self) -> None:
        threshold = self.leakage_threshold
        if threshold is not None and (not _number(threshold) or not 0 < threshold <= 1):
            raise BlessingError(
                f"blessing.leakage_threshold={threshold!r} must be a number in (0, 1], e.g. 0.99 (the share of the "
                "trivial model's errors one feature alone may remove before it counts as a leak), or null to skip "
                "the leakage check"
            )
        names = (self.allow_leakage,) if isinstance(self.allow_leakage, str) else tuple(self.allow_leakage)
        object.__setattr__(self, "allow_leakage", names)
        if not all(isinstance(n, str) and n for n in names) or len(set(names)) != len(names):
            raise BlessingError(
                f"blessing.allow_leakage={list(names)!r} must list distinct, non-empty feature names (original "
                'column names), e.g. ["refund_issued"]'
            )

    def _check_importance_settings(self) -> None:
        rows, repeats = self.importance_rows, self.importance_repeats
        if rows is not None and (not _integer(rows) or rows < 10):
            raise BlessingError(
                f"blessing.importance_rows={rows!r} must be a whole number >= 10, e.g. 1000 (the eval rows feature "
                "importance is measured on), or null to skip feature importance"
            )
        if not _integer(repeats) or not 1 <= repeats <= 20:
            raise BlessingError(
                f"blessing.importance_repeats={repeats!r} must be a whole number from 1 to 20, e.g. 2 (permutations "
                "of each feature; their mean is its importance)"
            )

    def _check_bootstrap_settings(self) -> None:
        replicates = self.bootstrap_replicates
        if not _integer(replicates) or not MIN_REPLICATES <= replicates <= MAX_REPLICATES:
            raise BlessingError(
                f"blessing.bootstrap_replicates={replicates!r} must be an integer in [{MIN_REPLICATES}, "
                f"{MAX_REPLICATES}], e.g. 1000 (fewer gives no stable interval bounds; more only costs time)"
            )
        if not _integer(self.bootstrap_seed) or self.bootstrap_seed < 0:
            raise BlessingError(f"blessing.bootstrap_seed={self.bootstrap_seed!r} must be an integer >= 0, e.g. 0")
        if self.baseline_test not in BASELINE_TESTS:
            raise BlessingError(
                f"blessing.baseline_test={self.baseline_test!r} must be one of {list(BASELINE_TESTS)}: 'paired' "
                "(better than the baseline beyond the noise of the eval rows) or 'plain' (the point values)"
            )

    def higher_is_better(self, metric: str) -> bool:
        return higher_is_better(metric, self.directions)

    def check_user_metrics(self) -> None:
        """A user model is compared with the published one on a metric of its metric_fn: it must be named. The
        leakage check, which reads the built-in families' features, does not apply: allowing a leak is refused."""
        if self.allow_leakage:
            raise BlessingError(
                f"blessing.allow_leakage={list(self.allow_leakage)} names features of a built-in family's table, and "
                "this run trains your own model_fn, blessed on its metric_fn's metrics (no leakage check): remove it"
            )
        if self.comparison_metric is None:
            raise BlessingError(
                "blessing.comparison_metric is not set: with your own model_fn, name the metric of your metric_fn "
                "that decides whether a model is better than the published one, e.g. --set "
                "blessing.comparison_metric=accuracy (for a metric of your own, also --set "
                'blessing.directions={"my_metric": "higher"})'
            )

    def named_metrics(self) -> Tuple[str, ...]:
        """Each metric named here (thresholds, comparison and reference metric, slice rules), sorted."""
        chosen = [m for m in (self.comparison_metric, self.reference_metric) if m]
        return tuple(sorted({*self.thresholds, *chosen, *self.slice_thresholds, *self.slice_max_gap}))

    def check_task(self, task: Optional[str]) -> None:
        """`check_task_metrics` of the metrics named here: when the settings are resolved, before any work, and
        when the evaluation knows the task (the train stage checks `named_metrics` once prepare inferred it)."""
        check_task_metrics(self.named_metrics(), task)

    def check_allowed_leakage(self, features: Sequence[str]) -> None:
        """Raises when `allow_leakage` names a feature the data does not have (`features`: its original names)."""
        unknown = [n for n in self.allow_leakage if n not in features]
        if unknown:
            raise BlessingError(
                f"blessing.allow_leakage names {unknown}, which are not features of the data; its features are "
                f"{list(features)}: list original column names (the label is not a feature)"
            )

    def comparison_for(self, task: str) -> str:
        return self.comparison_metric or DEFAULT_COMPARISON[task]

    def reference_metric_for(self, task: str) -> str:
        return self.reference_metric or DEFAULT_REFERENCE_METRIC[task]


def _known_metric(key: str, metric: str, directions: Mapping[str, str]) -> None:
    try:
        higher_is_better(metric, directions)
    except BlessingError as e:
        raise BlessingError(f"{key}: {e}") from None


def _integer(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _number(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def check_task_metrics(named: Sequence[str], task: Optional[str]) -> None:
    """Raises when a metric in `named` does not exist for `task` (a built-in family's), or, with `task` None (not
    known yet: inferred from the data), when the metrics named belong to both tasks."""
    if task is None:
        by_task = {t: sorted({m for m in named if m in allowed}) for t, allowed in TASK_METRICS.items()}
        if all(by_task.values()):
            raise BlessingError(
                f"blessing names metrics of a {CLASSIFICATION} label {by_task[CLASSIFICATION]} and of a "
                f"{REGRESSION} label {by_task[REGRESSION]}; a run has one task: keep one of them"
            )
        return
    allowed = TASK_METRICS[task]
    wrong = sorted(m for m in named if m not in allowed)
    if wrong:
        raise BlessingError(f"blessing metric(s) {wrong} do not apply to a {task} label; use {list(allowed)}")
