"""Blessing: is a newly trained model good enough to publish?

A candidate is blessed when every check passes:
  * no feature the model reads predicts the label (near) perfectly on its own (`evaluation.leakage`): a rule on
    that one feature, learned on the rows the candidate learned from, removes less than `leakage_threshold` of
    the trivial model's errors on the eval rows, unless `allow_leakage` lists the feature (a leak: the label's
    copy, or a value known only after it, would make every other check pass);
  * it beats the trivial model (always the most frequent class; always the mean label) by more than chance
    allows on the eval rows (`confidence`), unless turned off;
  * each user threshold holds (`{"accuracy": 0.9}` is a floor, `{"rmse": 3.5}` a ceiling: the direction is the
    metric's own);
  * it is no worse than the linear reference fitted in the same run (`evaluation.reference`) by more than
    `reference_margin` on `reference_metric` (accuracy or r2 by default) plus the chance allowance of the
    paired difference on the eval rows, unless the margin is None;
  * when a baseline is given (the last published model), the candidate improves on it on the comparison metric:
    with `baseline_test="paired"` (the default), the lower bound of the bootstrap interval of their paired
    difference on the eval rows (`evaluation.intervals`) exceeds `min_improvement`, better beyond the noise;
    with "plain", the point value improves by at least `min_improvement` (negative tolerates a drop of that size);
  * every judged slice of the eval rows (`evaluation.slices`: a slice of at least `min_slice_rows` rows by its
    value, a smaller one by its bootstrap interval) meets `slice_thresholds` and is within `slice_max_gap` of the
    overall metric: one check per failing slice, naming it, or one passing check per bound when every judged slice
    meets it;
  * every metric of the candidate is a finite number (a NaN or an infinity blocks it, naming the metric).

A verdict with no check at all (no threshold, no baseline: a user model's first run) is blessed as a first model,
and says so; one that replaces a published version it was not compared with says so, beside that version's
recorded metrics (`Blessing.replacing`).

A candidate that holds the weights of its baseline, the published version V, is not blessed whatever its metrics
say (computed through another graph, they differ by rounding): "identical to version V; nothing to publish"
(`Blessing.identical_to`, which `release.checked_identity` applies).

Runs on the host CPU, on metrics from `evaluation.metrics`.
"""

from __future__ import annotations

import dataclasses
import json
import math
import re
import statistics
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple

from estimator_lib.config import BlessingConfig, higher_is_better
from estimator_lib.config.blessing import BlessingError
from estimator_lib.evaluation.leakage import FeatureScore
from estimator_lib.evaluation.metrics import Truth, trivial_metrics
from estimator_lib.evaluation.slices import findings, finite
from estimator_lib.schema import REGRESSION

# -- the decision --------------------------------------------------------------------------------------------
IDENTICAL = "identical"  # the check of a candidate that holds its baseline's weights (`Blessing.identical_to`)
FIRST_MODEL = "first model: no threshold and no published model to compare with"


def identical_message(version: str) -> str:
    """The verdict on a model whose weights are those of the published version `version`."""
    return f"identical to version {version}; nothing to publish"


@dataclasses.dataclass(frozen=True)
class Check:
    """One blessing check: `value` compared with `bound` in the metric's direction."""

    name: str
    metric: str
    value: float
    bound: float
    passed: bool
    message: str


def _check(
    name: str, metric: str, value: float, bound: float, strict: bool, what: str, higher: Optional[bool] = None
) -> Check:
    higher = higher_is_better(metric) if higher is None else higher
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
    """The verdict and its evidence (what the export stage reads to decide whether to publish).

    `leakage` holds each scored feature's one-feature rule on the eval rows, {feature: {metric: value, "skill":
    share of the trivial model's errors it removes}} (`evaluation.leakage`); None when not checked (a user model,
    or `leakage_threshold` null). `baseline_interval` holds the paired bootstrap of the difference with the
    baseline the baseline check read, {"metric", "difference", "low", "high", "verdict"} (`evaluation.intervals`);
    None without a baseline, with `baseline_test="plain"`, or for a user model. `replaces` holds the published
    version this model replaces without comparing, {"version", "why", "metrics", "num_examples"} (its record's
    metrics), or None (`replacing`). `candidate_metrics` holds the finite metrics; a non-finite one is named by
    its failed check. `eval_predictions` holds what the candidate predicted for the eval rows, as counts
    (`predict.predicted.PredictionProfile.to_dict`), which batch prediction's skew check compares its predictions
    with; None for a user model.
    """

    blessed: bool
    checks: Tuple[Check, ...]
    candidate_metrics: Mapping[str, float]
    comparison_metric: str
    num_examples: int
    baseline_uri: Optional[str] = None
    baseline_metrics: Optional[Mapping[str, float]] = None
    reference: Optional[str] = None
    reference_metrics: Optional[Mapping[str, float]] = None
    reference_errors: Optional[Mapping[str, float]] = None
    leakage: Optional[Mapping[str, Mapping[str, float]]] = None
    baseline_interval: Optional[Mapping[str, Any]] = None
    replaces: Optional[Mapping[str, Any]] = None
    eval_predictions: Optional[Mapping[str, Any]] = None

    @property
    def reasons(self) -> Tuple[str, ...]:
        """Why the candidate was not blessed (the failed checks), empty when it was."""
        return tuple(c.message for c in self.checks if not c.passed)

    @property
    def identical(self) -> str:
        """The verdict "identical to version V; nothing to publish" when the candidate holds the weights of its
        baseline, the published version V (`identical_to`); "" otherwise."""
        return next((c.message for c in self.checks if c.name == IDENTICAL), "")

    def identical_to(self, version: str) -> "Blessing":
        """This verdict for a candidate that holds the weights of its baseline, the published version `version`:
        not blessed, the baseline check replaced by the failed check `identical_message(version)`, which the
        summary gives alone (a metric computed through another graph differs by rounding, not by a model)."""
        if not any(c.name == "baseline" for c in self.checks):
            raise ValueError(f"this verdict compared with no baseline, so it cannot be identical to version {version}")
        message = identical_message(version)
        checks = tuple(
            dataclasses.replace(c, name=IDENTICAL, passed=False, message=message) if c.name == "baseline" else c
            for c in self.checks
        )
        return dataclasses.replace(self, blessed=False, checks=checks)

    def replacing(self, version: str, published: Mapping[str, Any], why: str) -> "Blessing":
        """This verdict for a model that replaces the published version `version` without a comparison (`why`:
        "--baseline none", a new lineage), beside the verdict its publisher recorded (`published`: a
        `to_dict()`); the summary says what it replaces and how their recorded metrics compare."""
        recorded = {
            "metrics": dict(published.get("candidate_metrics") or {}),
            "num_examples": published.get("num_examples"),
        }
        return dataclasses.replace(self, replaces={"version": version, "why": why, **recorded})

    def summary(self) -> str:
        if self.identical:
            return self.identical
        if not self.blessed:
            return "not blessed: " + "; ".join(self.reasons)
        # the report's table adds a leakage check that passed unrecorded
        held = "every check holds" if self.checks else FIRST_MODEL
        if self.replaces is None:
            return f"blessed: {held}"
        held = held if self.checks else "no threshold, and no baseline to compare with"
        return f"blessed: {held}; {self._replaced()}"

    def _replaced(self) -> str:
        """What this model replaces without a comparison, and their metrics side by side."""
        old, metric = self.replaces, self.comparison_metric
        theirs, ours = old["metrics"].get(metric), self.candidate_metrics.get(metric)
        if theirs is None or ours is None:
            compared = f"its record has no {metric} to set beside this model's"
        else:
            compared = f"{metric} {ours:.4f} here, {theirs:.4f} recorded for it"
        rows = f"({old['num_examples']} then, {self.num_examples} now)"
        where = f"on different eval rows {rows}"
        if old["num_examples"] == self.num_examples:
            where = f"each on its own run's eval rows {rows}, which need not be the same rows"
        return f"replaces version {old['version']} without comparing ({old['why']}): {compared}, {where}"

    def to_dict(self) -> Dict[str, Any]:
        out = dataclasses.asdict(self)
        out["checks"] = [dataclasses.asdict(c) for c in self.checks]
        out["reasons"] = list(self.reasons)
        for optional in ("replaces", "eval_predictions"):
            if out[optional] is None:
                del out[optional]  # a verdict without it keeps its record's bytes
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
    reference: Optional[Mapping[str, float]] = None,
    reference_description: Optional[str] = None,
    reference_errors: Optional[Mapping[str, float]] = None,
    leakage: Optional[Sequence[FeatureScore]] = None,
    slices: Optional[Mapping[str, Any]] = None,
    baseline_interval: Optional[Mapping[str, Any]] = None,
) -> Blessing:
    """Applies `config` to the candidate's blessing metrics, beside the linear reference's and the baseline's,
    to each feature's one-feature rule, and to each slice of the eval rows.

    Args:
      config: when to bless.
      truth: the eval rows' labels (their count and class shares set the trivial model's bound).
      candidate, baseline, reference: blessing metrics (`evaluation.metrics.compute_metrics`) of the
        candidate, the last published model (None: first run) and the linear reference fitted in this run
        (None: not fitted, so not compared).
      baseline_uri, reference_description: what the baseline and the reference are, for the record.
      reference_errors: standard errors of the per-row difference between candidate and reference
        (`metrics.paired_standard_errors`); a metric without one gets no chance allowance.
      leakage: each feature's one-feature rule on the eval rows (`leakage.one_feature_scores`); None: not
        checked.
      slices: the slice table (`slices.slice_table`); None: no slice configured.
      baseline_interval: the paired bootstrap of the difference with the baseline on the comparison metric
        (`intervals.bootstrap_intervals(...)["baseline"]`); needed with a baseline when `baseline_test="paired"`.
    """
    config.check_task(truth.task)
    checks: List[Check] = _finite_checks(candidate, len(truth.keys)) + _leakage_checks(config, leakage or ())
    if config.beat_trivial:
        checks.append(_trivial_check(truth, candidate, config.confidence))
    for metric, bound in sorted(config.thresholds.items()):
        checks.append(_check("threshold", metric, candidate[metric], float(bound), False, "threshold"))
    if reference is not None and config.reference_margin is not None:
        checks.append(_reference_check(config, truth, candidate, reference, reference_errors or {}))
    comparison = config.comparison_for(truth.task)
    paired = baseline is not None and config.baseline_test == "paired"
    if paired:
        checks.append(_paired_baseline_check(config, comparison, candidate, baseline, baseline_interval))
    elif baseline is not None:
        sign = 1.0 if higher_is_better(comparison) else -1.0
        bound = baseline[comparison] + sign * config.min_improvement
        what = f"vs baseline {baseline[comparison]:.4f} with min_improvement {config.min_improvement:g}"
        checks.append(_check("baseline", comparison, candidate[comparison], bound, False, what))
    checks.extend(slice_checks(config, slices))
    return Blessing(
        blessed=all(c.passed for c in checks),
        checks=tuple(checks),
        candidate_metrics=finite(candidate),
        comparison_metric=comparison,
        num_examples=len(truth.keys),
        baseline_uri=baseline_uri,
        baseline_metrics=dict(baseline) if baseline is not None else None,
        reference=reference_description,
        reference_metrics=dict(reference) if reference is not None else None,
        reference_errors=dict(reference_errors) if reference_errors is not None else None,
        leakage={s.feature: s.to_dict() for s in leakage} if leakage is not None else None,
        baseline_interval=dict(baseline_interval) if paired else None,
    )


def decide_user(
    config: BlessingConfig,
    candidate: Mapping[str, float],
    num_examples: int,
    baseline: Optional[Mapping[str, float]] = None,
    baseline_uri: Optional[str] = None,
    slices: Optional[Mapping[str, Any]] = None,
) -> Blessing:
    """Applies `config` to a user model's metrics (its metric_fn's, by their names): each threshold, and, with a
    baseline (the published model's metrics from the same metric_fn on the same records), the comparison
    metric improved by `min_improvement`; and to each slice (`slices`, the metric_fn's metrics per slice). A
    metric the thresholds or the comparison name that the metric_fn does not report is an error naming the
    metrics it does report.

    The metric_fn reports aggregate metrics only: there are no per-row outputs to resample, so the paired test
    cannot run. With `baseline_test="paired"` the candidate must then be strictly better than the baseline plus
    `min_improvement` (a model no different from the published one is not published again); "plain" accepts
    equal."""
    comparison = config.comparison_metric or ""
    named = sorted(
        set(config.thresholds)
        | set(config.slice_thresholds)
        | set(config.slice_max_gap)
        | ({comparison} if baseline is not None else set())
    )
    for who, metrics in (("your model_fn's metric_fn", candidate), ("the published model", baseline or candidate)):
        missing = [m for m in named if m not in metrics]
        if missing:
            raise BlessingError(
                f"blessing names metric(s) {missing}, which {who} does not report; it reports {sorted(metrics)}"
            )
    checks: List[Check] = _finite_checks(candidate, num_examples)
    for metric, bound in sorted(config.thresholds.items()):
        higher = config.higher_is_better(metric)
        checks.append(_check("threshold", metric, candidate[metric], float(bound), False, "threshold", higher))
    if baseline is not None:
        higher = config.higher_is_better(comparison)
        bound = baseline[comparison] + (1.0 if higher else -1.0) * config.min_improvement
        what = f"vs baseline {baseline[comparison]:.4f} with min_improvement {config.min_improvement:g}"
        strict = config.baseline_test == "paired"
        check = _check("baseline", comparison, candidate[comparison], bound, strict, what, higher)
        if strict:
            note = (
                " (blessing.baseline_test=paired: your metric_fn reports aggregate metrics only, no per-row outputs "
                "to pair, so the candidate must be strictly better; 'plain' accepts equal)"
            )
            check = dataclasses.replace(check, message=check.message + note)
        checks.append(check)
    checks.extend(slice_checks(config, slices))
    return Blessing(
        blessed=all(c.passed for c in checks),
        checks=tuple(checks),
        candidate_metrics=finite(candidate),
        comparison_metric=comparison,
        num_examples=num_examples,
        baseline_uri=baseline_uri,
        baseline_metrics=dict(baseline) if baseline is not None else None,
    )


def slice_checks(config: BlessingConfig, table: Optional[Mapping[str, Any]]) -> List[Check]:
    """One failed check per judged slice that misses a slice bound (its message names the slice); for a bound every
    judged slice meets, one passed check with the worst slice's value. None without a table or a bound."""
    if table is None:
        return []
    found = [f for f in findings(config, table) if f.passed is not None]  # None: a slice too small to judge
    checks = [Check("slice", f.metric, f.value, f.bound, False, f.message) for f in found if not f.passed]
    for metric, bound in dict.fromkeys((f.metric, f.bound) for f in found):
        held = [f for f in found if (f.metric, f.bound) == (metric, bound)]
        if all(f.passed for f in held):
            worst = min(held, key=lambda f: f.value if config.higher_is_better(metric) else -f.value)
            message = f"every judged slice ({len(held)}) meets it; the worst, {worst.message}"
            checks.append(Check("slice", metric, worst.value, bound, True, message))
    return checks


def _finite_checks(candidate: Mapping[str, float], rows: int) -> List[Check]:
    """A failed check per metric that is NaN or infinite: nothing can be judged on it, and no record holds it."""
    return [
        Check(
            "finite",
            metric,
            float(value),
            0.0,
            False,
            f"{metric}={float(value)} on the {rows} eval rows is not a finite number, so the model cannot be judged "
            "on it: check how it is computed (a division by zero, a log of 0, an AUC of rows of one class)",
        )
        for metric, value in sorted(candidate.items())
        if not math.isfinite(value)
    ]


def _paired_baseline_check(
    config: BlessingConfig,
    metric: str,
    candidate: Mapping[str, float],
    baseline: Mapping[str, float],
    interval: Optional[Mapping[str, Any]],
) -> Check:
    """Passes when the lower bound of the paired difference's interval (positive = better) exceeds
    `min_improvement`. Its bound, in the metric's units, is the value the candidate would need for that: the
    baseline plus `min_improvement` plus the interval's lower half-width (the noise)."""
    if interval is None or interval.get("metric") != metric:
        raise BlessingError(
            f"blessing.baseline_test=paired needs the paired bootstrap of the candidate and the baseline on "
            f"{metric!r} over the same eval rows (evaluation.intervals.bootstrap_intervals), and none was given; "
            "pass it, or set blessing.baseline_test=plain to compare the point values"
        )
    low, high, difference = interval["low"], interval["high"], interval["difference"]
    minimum = config.min_improvement
    passed = bool(low > minimum)
    sign = 1.0 if higher_is_better(metric) else -1.0
    bound = candidate[metric] - sign * (low - minimum)
    if minimum == 0:
        outcome = "better beyond the noise" if passed else "not better beyond the noise"
    else:
        outcome = f"lower bound {low:+.4f} {'>' if passed else 'not above'} min_improvement {minimum:g}"
    message = (
        f"vs baseline {baseline[metric]:.4f}: difference {difference:+.4f} [{low:+.4f}, {high:+.4f}] at "
        f"{config.confidence:g}, {outcome}"
    )
    if not passed:
        message += " (blessing.baseline_test=paired; 'plain' compares the point values)"
    return Check("baseline", metric, candidate[metric], bound, passed, message)


def _leakage_checks(config: BlessingConfig, scores: Sequence[FeatureScore]) -> List[Check]:
    """One check per feature whose rule alone removes at least `leakage_threshold` of the trivial model's errors,
    the most predictive first: failed, or passed when `allow_leakage` lists the feature. The bound is in the
    metric's units: the trivial model's value plus that share of what it leaves."""
    threshold = config.leakage_threshold
    if threshold is None:
        return []
    checks = []
    for score in sorted(scores, key=lambda s: -s.skill):
        if not score.skill >= threshold:
            continue
        bound = score.trivial + threshold * (1.0 - score.trivial)
        allowed = score.feature in config.allow_leakage
        found = (
            f"leakage: feature {score.feature!r} alone predicts the label: a rule on it, learned on the rows the "
            f"model learned from, scores {score.metric}={score.value:.4f} >= {bound:.4f} on the eval rows, removing "
            f"{score.skill:.4f} of the trivial model's errors ({score.metric} {score.trivial:.4f}; "
            f"blessing.leakage_threshold={threshold:g})"
        )
        if allowed:
            message = f"{found}; allowed by blessing.allow_leakage"
        else:
            message = (
                f"{found}: a copy of the label, or a value known only after it? Drop the column, or leave it out of "
                f"model.features; if its value is known when the model predicts, allow it: "
                f"{_allow_setting([*config.allow_leakage, score.feature])}"
            )
        checks.append(Check("leakage", score.metric, score.value, bound, allowed, message))
    return checks


def _allow_setting(names: Sequence[str]) -> str:
    """The `--set` that allows `names`: comma-separated when each is a plain word, else a quoted JSON list."""
    if all(re.fullmatch(r"[\w.-]+", n) for n in names):
        return f"--set blessing.allow_leakage={','.join(names)}"
    return f"--set 'blessing.allow_leakage={json.dumps(list(names), ensure_ascii=False)}'"


def _reference_check(
    config: BlessingConfig,
    truth: Truth,
    candidate: Mapping[str, float],
    reference: Mapping[str, float],
    errors: Mapping[str, float],
) -> Check:
    """The candidate may fall behind the reference by the margin plus z standard errors of their paired
    difference: on a small eval split a gap of a row or two is chance, on a large one it is not."""
    metric = config.reference_metric_for(truth.task)
    z = statistics.NormalDist().inv_cdf(config.confidence)
    slack = config.reference_margin + z * errors.get(metric, 0.0)
    bound = reference[metric] + (-slack if higher_is_better(metric) else slack)
    what = (
        f"no worse than the linear reference {reference[metric]:.4f} by more than {config.reference_margin:g} plus "
        f"{z:.2f} x {errors.get(metric, 0.0):.4f} (standard error of the paired difference over {len(truth.keys)} rows)"
    )
    return _check("reference", metric, candidate[metric], bound, False, what)


def _trivial_check(truth: Truth, candidate: Mapping[str, float], confidence: float) -> Check:
    """The candidate against the trivial model, with the margin chance allows over the eval rows.

    A model unrelated to the label reaches, at the one-sided `confidence` (z its normal quantile):
      * accuracy up to p + z sqrt(p (1 - p) / n), p the most frequent class's share (a binomial proportion);
      * r2 up to z^2 / n: its r2 is about -s^2 + 2 s c with c ~ N(0, 1/n) the correlation by chance and s its
        spread relative to the label's, at most c^2 over every s.
    """
    n = len(truth.keys)
    z = statistics.NormalDist().inv_cdf(confidence)
    ((metric, trivial),) = trivial_metrics(truth).items()
    if truth.task == REGRESSION:
        bound = trivial + z * z / n
        what = f"better than the trivial model (the mean: r2 0, plus {z:.2f}^2/{n} rows for chance)"
    else:
        bound = trivial + z * math.sqrt(trivial * (1.0 - trivial) / n)
        what = (
            f"better than the trivial model (the most frequent class: accuracy {trivial:.4f}, plus {z:.2f} "
            f"standard errors over {n} rows)"
        )
    return _check("trivial", metric, candidate[metric], bound, True, what)
