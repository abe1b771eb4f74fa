"""The skew check: the rows batch prediction scores against the data the model was trained on. Host CPU only.

The training side is its `estimator_lib.data.distribution` profile (`PrepareResult.profile()`, an export's
`data_profile`); the scored side is the rows' counts over that profile's bins (`predict.tally`: one parse of the
encoded records, integer counts). `compare` reads only the two; the Beam engine's workers count the files they read
and its launcher adds the counts (`predict.skew_beam`), so both engines write the same skew.json bytes for the same
rows. The figures are `data.validation`'s: one definition each. Per feature, against `SkewConfig`'s thresholds
(docs/predict_export.md):

  * every feature: the change of its missing share (`validation.missing_share`);
  * numeric: PSI over the training deciles (`validation.psi`; the scored shares are counted exactly), and the share
    of present values outside the training [min, max];
  * categorical: PSI over the training categories plus one unseen bin, and the share of present values that are
    a category never seen in training (`validation.category_shares`).

And the predictions: the shares of the predicted classes (a regressor's: of the deciles of its eval predictions)
against those of the eval rows the model was blessed on (`predict.predicted`), counted while the rows are scored.

When: with `predict.skew=warn` the rows are counted while they are scored: from the columns the checkpoint's own
predict input passes through the model (`SkewCheck.tap`), else in a read of their own in a thread beside the
scoring (`SkewCheck.start`); both parts are judged before the predictions are committed (`SkewFinish`). With
`block` the rows are read and judged before any is scored, so a skewed set costs no scoring, and the predictions
before the commit.

A user's model_fn: its records are checked over the columns of their feature spec its preparation profiled
(`model.user.profile`: the scalar features' values, the var_len features' lengths, encoded images' sizes), read in
a thread beside the scoring ("block": before it); its predictions are its own and not compared.
"""

from __future__ import annotations

import dataclasses
import json
import math
import statistics
import threading
from typing import Any, Callable, Dict, Mapping, Optional, Sequence, Tuple, Union

import numpy as np

from estimator_lib import storage
from estimator_lib.config.feature_spec import FeatureSpec
from estimator_lib.config.skew import BLOCK, OFF, SkewConfig
from estimator_lib.config.stages import SKEW_FILE
from estimator_lib.data.validation import category_shares, decile_edges, missing_share, percentile_shares, psi
from estimator_lib.predict.predicted import PredictionCounter, PredictionProfile, PredictionSkew
from estimator_lib.predict.predicted import compare as compare_predictions
from estimator_lib.predict.tally import Bins, CodeCounter, Tally
from estimator_lib.schema import NUMERIC, Schema

PASSED, WARNED, BLOCKED, SKIPPED = "passed", "warned", "blocked", "skipped"
# figure -> the threshold (a `SkewConfig` field) it is held to
CHECKS = {
    "distance (PSI)": "max_distance",
    "unseen share": "max_unseen_share",
    "missing change": "max_missing_change",
    "out of range": "max_out_of_range",
}
SHOWN = 5  # features a summary names
NOW, THREAD, LATER = "now", "thread", "later"  # when a `PendingReport` is made
PSI = "distance (PSI)"
OUT_OF_RANGE = "out of range"
# The breach a reading tells, the most specific first: a new category or missing values explain a PSI.
READING_ORDER = ("unseen share", "missing change", PSI, "out of range")
# A PSI is flagged only beyond what sampling noise reaches this often between samples of one distribution.
NOISE_CONFIDENCE = 0.999
# Added to each counted bin before its share is taken (Jeffreys' prior): PSI takes the log of a share, and a
# decile that 69 scored rows happen to leave empty is not evidence of a share of 0.
COUNT_PRIOR = 0.5


class SkewError(ValueError):
    """The scored rows differ from the training data beyond a threshold, with `predict.skew=block`."""


@dataclasses.dataclass(frozen=True)
class FeatureSkew:
    """One feature's figures against its thresholds.

    Attributes:
      feature: the column's original name. kind: "numeric" or "categorical".
      figures: {check: value} (`CHECKS`); a feature with no present value on either side has the missing
        change only.
      thresholds: {check: the limit applied}. breaches: the checks beyond their limit, worst first.
      severity: the largest figure / threshold ratio (the order of the report). reading: one line for people.
    """

    feature: str
    kind: str
    figures: Mapping[str, float]
    thresholds: Mapping[str, float]
    breaches: Tuple[str, ...]
    severity: float
    reading: str


@dataclasses.dataclass(frozen=True)
class SkewReport:
    """The skew check's outcome (skew.json).

    Attributes:
      status: "passed", "warned" (breaches, `predict.skew=warn`), "blocked" or "skipped" (`why`).
      mode: the `predict.skew` applied. rows: (training rows, scored rows).
      features: every feature, flagged ones first, worst first. why: why a check was skipped.
      predictions: the predictions' shares against the eval rows' (`predict.predicted`); None when not compared
        (the model records no eval predictions, or nothing was scored).
    """

    status: str
    mode: str
    rows: Tuple[int, int] = (0, 0)
    features: Tuple[FeatureSkew, ...] = ()
    why: str = ""
    predictions: Optional[PredictionSkew] = None

    @property
    def flagged(self) -> Tuple[FeatureSkew, ...]:
        return tuple(f for f in self.features if f.breaches)

    @property
    def predictions_moved(self) -> bool:
        return self.predictions is not None and bool(self.predictions.breaches)

    def summary(self) -> str:
        """One line: the verdict, the worst features' readings, then the predictions' when they moved."""
        if self.status == SKIPPED:
            return f"skipped: {self.why}"
        parts = []
        if self.flagged:
            named = "; ".join(f.reading for f in self.flagged[:SHOWN])
            more = f" (and {len(self.flagged) - SHOWN} more)" if len(self.flagged) > SHOWN else ""
            parts.append(f"{len(self.flagged)} of {len(self.features)} features skewed: {named}{more}")
        if self.predictions_moved:
            parts.append(f"the predictions moved: {self.predictions.reading}")
        if not parts:
            checked = " and their predictions" if self.predictions is not None else ""
            return (
                f"passed: {len(self.features)} features of {self.rows[1]} scored rows{checked} within their thresholds"
            )
        return f"{self.status}: " + "; ".join(parts)

    def to_dict(self) -> Dict[str, Any]:
        return {
            "status": self.status,
            "mode": self.mode,
            "summary": self.summary(),
            "rows": {"training": self.rows[0], "scored": self.rows[1]},
            "flagged": [f.feature for f in self.flagged],
            "features": [_feature_dict(f) for f in self.features],
            "why": self.why,
            "predictions": self.predictions.to_dict() if self.predictions is not None else None,
        }

    def with_predictions(self, predictions: Optional[PredictionSkew]) -> "SkewReport":
        """This report with the predictions' comparison, its status judged again."""
        if self.status == SKIPPED or predictions is None:
            return self
        status = self.status
        if predictions.breaches:
            status = BLOCKED if self.mode == BLOCK else WARNED
        return dataclasses.replace(self, status=status, predictions=predictions)


def _rounded(figures: Mapping[str, float]) -> Dict[str, float]:
    return {k: round(float(v), 4) for k, v in figures.items()}


def _feature_dict(f: FeatureSkew) -> Dict[str, Any]:
    out = dataclasses.asdict(f)
    out.update(figures=_rounded(f.figures), breaches=list(f.breaches), severity=round(float(f.severity), 4))
    return out


def skipped(mode: str, why: str) -> SkewReport:
    """Nothing to compare with (`why`: e.g. a model exported before data profiles were recorded)."""
    return SkewReport(SKIPPED, mode, why=why)


def compare(training: Mapping[str, Any], scored: Mapping[str, Any], config: SkewConfig) -> SkewReport:
    """Compares the scored rows (`tally.Bins.scored`) with the training profile, feature by feature.

    Raises:
      SkewError: `config.features` overrides a feature the training profile lacks (naming it).
    """
    known = training["features"]
    unknown = sorted(set(config.features) - set(known))
    if unknown:
        raise SkewError(
            f"predict.features names {unknown}, which the model was not trained on; its features: {sorted(known)}"
        )
    features = [
        feature_skew(name, old, scored["features"][name], config.thresholds(name))
        for name, old in known.items()
        if name in scored["features"]
    ]
    features.sort(key=lambda f: (not f.breaches, -f.severity, f.feature))
    status = PASSED
    if any(f.breaches for f in features):
        status = BLOCKED if config.skew == BLOCK else WARNED
    rows = (int(training["rows"]), int(scored["rows"]))
    return SkewReport(status, config.skew, rows, tuple(features), "")


def feature_skew(
    name: str, old: Mapping[str, Any], new: Mapping[str, Any], thresholds: Mapping[str, float]
) -> FeatureSkew:
    """One feature's figures (`_figures`), judged against `thresholds` ({`SkewConfig` field: limit}); the PSI's
    limit and the out-of-range share's are raised to what sampling noise reaches between samples of these sizes
    (`psi_noise`, `out_of_range_noise`)."""
    figures, bins = _figures(old, new)
    limits = {check: float(thresholds[CHECKS[check]]) for check in figures}
    if bins:
        limits[PSI] = max(limits[PSI], psi_noise(bins, old["present"], new["present"]))
    if OUT_OF_RANGE in figures:
        sampled = old["present"] // old.get("sample_every", 1)  # the values the training min and max are of
        limits[OUT_OF_RANGE] = max(limits[OUT_OF_RANGE], out_of_range_noise(sampled, new["present"]))
    ratios = {check: _ratio(figures[check], limits[check]) for check in figures}
    breaches = tuple(sorted((c for c in figures if figures[c] > limits[c]), key=lambda c: -ratios[c]))
    severity = max(ratios.values())
    told = [c for c in READING_ORDER if c in breaches]
    reading = _reading(name, told[0], old, new, figures) if told else f"`{name}`: within its thresholds"
    return FeatureSkew(name, old["kind"], figures, limits, breaches, severity, reading)


def _ratio(value: float, limit: float) -> float:
    if limit > 0:
        return value / limit
    return float("inf") if value > 0 else 0.0


def _figures(old: Mapping[str, Any], new: Mapping[str, Any]) -> Tuple[Dict[str, float], int]:
    """({check: figure}, the PSI's bins holding values on either side: 0 when there is no PSI)."""
    figures = {"missing change": abs(missing_share(new) - missing_share(old))}
    if not old["present"] or not new["present"]:
        return figures, 0
    if old["kind"] == NUMERIC:
        old_shares, new_shares = numeric_shares(old, new)
        figures[OUT_OF_RANGE] = (new["below"] + new["above"]) / new["present"]
    else:
        old_shares, new_shares, unseen = category_shares(old, new)
        figures["unseen share"] = float(unseen)
    figures[PSI] = psi(old_shares, new_shares)
    return figures, int(np.count_nonzero((old_shares > 0) | (new_shares > 0)))


def out_of_range_noise(old_present: int, new_present: int) -> float:
    """The share of values outside the training [min, max] that rows of the training distribution stay at or under
    with probability `NOISE_CONFIDENCE`.

    A value of the same distribution falls outside the range of n training values with probability 2 / (n + 1);
    the count of m such values beyond it is taken as binomial, and its quantile found by summing the probabilities
    (over a mean of 50, by the normal approximation).
    0.087 for 47 rows against 150, 0.00002 for 200,000 against a million: the limit then is `max_out_of_range`.
    """
    n, m = max(old_present, 1), max(new_present, 1)
    p = min(2.0 / (n + 1), 1.0)
    if p >= 1.0:
        return 1.0
    mean = m * p
    if mean > 50:  # the normal approximation (and the first probabilities would underflow)
        z = statistics.NormalDist().inv_cdf(NOISE_CONFIDENCE)
        return min((mean + z * math.sqrt(mean * (1 - p))) / m, 1.0)
    log_q = math.log1p(-p)
    k, log_pmf = 0, m * log_q  # P(X = 0)
    cdf = math.exp(log_pmf)
    while cdf < NOISE_CONFIDENCE and k < m:
        log_pmf += math.log(m - k) - math.log(k + 1) + math.log(p) - log_q
        k += 1
        cdf += math.exp(log_pmf)
    return k / m


def psi_noise(bins: int, old_present: int, new_present: int) -> float:
    """The PSI two samples of one distribution stay under with probability `NOISE_CONFIDENCE`.

    Between samples of n and m values over k bins, PSI * n m / (n + m) follows a chi-square law with k - 1
    degrees of freedom (PSI is the J-divergence); its quantile by the Wilson-Hilferty approximation. 0.51 for
    deciles between 275 training and 69 scored values; 0.00017 for 200,000 scored values against a million.
    """
    dof = max(bins - 1, 1)
    z = statistics.NormalDist().inv_cdf(NOISE_CONFIDENCE)
    quantile = dof * (1 - 2 / (9 * dof) + z * (2 / (9 * dof)) ** 0.5) ** 3
    return quantile * (1 / max(old_present, 1) + 1 / max(new_present, 1))


def numeric_shares(old: Mapping[str, Any], new: Mapping[str, Any]) -> Tuple[np.ndarray, np.ndarray]:
    """The shares of the training profile (read from its percentiles) and of the scored rows (counted, each bin's
    count plus `COUNT_PRIOR`: an empty bin of a small sample is not read as a share of 0) over the bins cut at the
    training deciles' distinct values (`tally.FeatureBins.edges`)."""
    old_shares = percentile_shares(old["percentiles"], decile_edges(old["percentiles"]))
    counts = np.asarray(new["bins"], np.float64) + COUNT_PRIOR
    return old_shares, counts / counts.sum()


def _reading(name: str, check: str, old: Mapping[str, Any], new: Mapping[str, Any], figures: Mapping) -> str:
    value = figures[check]
    if check == "unseen share":
        return f"`{name}`: {value:.0%} of its values are a category never seen in training"
    if check == "missing change":
        return f"`{name}`: {missing_share(new):.0%} of rows are missing it ({missing_share(old):.0%} in training)"
    if check == "out of range":
        low, high = old["percentiles"][0], old["percentiles"][-1]
        return f"`{name}`: {value:.0%} of its values lie outside the training range [{low:g}, {high:g}]"
    if old["kind"] == NUMERIC:
        moved = _bin_moved_most(old, new)
        return f"`{name}`: its distribution moved (PSI {value:.2f} over the training deciles; {moved})"
    return f"`{name}`: its category shares moved (PSI {value:.2f}; {_moved_most(old, new)})"


def _bin_moved_most(old: Mapping[str, Any], new: Mapping[str, Any]) -> str:
    """The training decile bin whose share of present values changed most, as "30% of its values lie in
    (39.2, 42.1] here, 10% in training"."""
    old_shares, new_shares = numeric_shares(old, new)
    edges = decile_edges(old["percentiles"])
    k = int(np.argmax(np.abs(new_shares - old_shares)))
    if k == 0:
        where = f"at or below {edges[0]:g}"
    elif k == len(edges):
        where = f"above {edges[-1]:g}"
    else:
        where = f"in ({edges[k - 1]:g}, {edges[k]:g}]"
    return f"{new_shares[k]:.0%} of its values lie {where} here, {old_shares[k]:.0%} in training"


def _moved_most(old: Mapping[str, Any], new: Mapping[str, Any]) -> str:
    """The training category whose share of present values changed most, as "`v` 40% in training, 75% here"."""
    values = list(old["counts"])
    old_shares, new_shares, _ = category_shares(old, new)
    k = int(np.argmax(np.abs(new_shares[: len(values)] - old_shares[: len(values)])))
    return f"{values[k]!r} {old_shares[k]:.0%} in training, {new_shares[k]:.0%} here"


@dataclasses.dataclass(frozen=True)
class SkewCheck:
    """What a batch prediction checks its rows against: the training profile (None: the model records none),
    the `predict.*` settings, and the eval rows' prediction profile (`Blessing.eval_predictions`; None: the
    model's evaluation recorded none, and the predictions are not compared)."""

    training: Optional[Mapping[str, Any]]
    config: SkewConfig
    predicted: Optional[Mapping[str, Any]] = None

    def counter(self) -> Optional[PredictionCounter]:
        """A counter of the scored rows' predictions over the eval profile's bins; None when there is nothing
        to compare them with (the check is off, or no training or eval profile)."""
        if self.config.skew == OFF or self.training is None or self.predicted is None:
            return None
        return PredictionProfile.from_dict(self.predicted).counter()

    def tap(self, schema: Schema) -> Optional[CodeCounter]:
        """What batch prediction's own input pipeline feeds with the rows' codes (`tally.CodeCounter`; its
        `bins` go to `inputs.predict_input_fn_builder`): with "warn" and a training profile; None otherwise
        ("block" reads the rows before scoring them, "off" reads nothing)."""
        if self.config.skew in (OFF, BLOCK) or self.training is None:
            return None
        return CodeCounter(Bins.of(self.training, schema))

    def start(
        self,
        files: Sequence[str],
        schema: Union[Schema, FeatureSpec],
        rows: Optional[int],
        tally: Optional[Callable[[Bins], Tally]] = None,
        tap: Optional[CodeCounter] = None,
        compression: str = "",
    ) -> Optional["PendingReport"]:
        """The check of the `rows` records of `files` (None: not checked) against the training profile: rows
        encoded by `schema`, or a user's records its feature spec describes ("GZIP" or "" `compression`);
        None with `predict.skew=off` (nothing is read). With "block" the rows are judged here, before any is
        scored; with "warn" they are counted while they are scored: by `tap` (`SkewCheck.tap`'s, fed by the
        scoring's own input) and judged when the report is asked for, else read in a thread of their own.
        `tally(bins)` counts them elsewhere, at once (Beam's workers); None counts them here (`Bins.tally`).

        Raises:
          SkewError: with `predict.skew=block`, a feature beyond a threshold (naming the worst ones); nothing is
            scored or published.
        """
        if self.config.skew == OFF:
            return None
        training = self.training
        if training is None:
            why = "the model records no profile of its training data (prepared before profiles)"
            return PendingReport(lambda: skipped(self.config.skew, why))
        bins = Bins.of(training, schema) if tap is None else tap.bins
        if not bins.features:
            why = "none of the model's features is one the check reads (a scalar, a sequence's length)"
            return PendingReport(lambda: skipped(self.config.skew, why))

        def judged(counted: Tally) -> SkewReport:
            report = compare(training, bins.scored(bins.checked(counted, rows)), self.config)
            enforce(report)
            return report

        if tap is not None:
            return PendingReport(lambda: judged(tap.tally), LATER)
        count = tally or (lambda b: b.tally(files, compression))
        return PendingReport(
            lambda: judged(count(bins)), THREAD if tally is None and self.config.skew != BLOCK else NOW
        )

    def finish(
        self, pending: Optional["PendingReport"], counter: Optional[PredictionCounter]
    ) -> Optional["SkewFinish"]:
        """The `SkewFinish` of `start`'s check; None when there is none (`predict.skew=off`)."""
        return None if pending is None else SkewFinish(self, pending, counter)

    def after_scoring(self, report: SkewReport, counter: Optional[PredictionCounter]) -> SkewReport:
        """`report` (the rows') with the scored rows' predictions (`counter`, filled while scoring) compared with
        the eval rows'; call it before the predictions are committed.

        Raises:
          SkewError: with `predict.skew=block`, the predictions moved beyond the threshold; nothing is published.
        """
        if counter is None:
            return report
        reference = PredictionProfile.from_dict(self.predicted)
        judged = report.with_predictions(
            compare_predictions(reference, counter.profile(), self.config.max_prediction_shift)
        )
        enforce(judged)
        return judged


class PendingReport:
    """The rows' skew report (`SkewCheck.start`), made `when`: NOW (raising here), in a THREAD of its own while the
    rows are scored, or LATER, by `result()` (from counts the scoring made); `result()` returns it, raising what
    making it raised."""

    def __init__(self, make: Callable[[], SkewReport], when: str = NOW):
        self._make, self._report, self._error = make, None, None
        self._thread: Optional[threading.Thread] = None
        if when == THREAD:
            self._thread = threading.Thread(target=self._run, name="skew-check", daemon=True)
            self._thread.start()
        elif when == NOW:
            self._report = make()

    def _run(self) -> None:
        try:
            self._report = self._make()
        except BaseException as e:  # noqa: B902 - handed to the thread that waits for the report
            self._error = e

    def result(self) -> SkewReport:
        if self._thread is not None:
            self._thread.join()
        elif self._report is None and self._error is None:
            self._run()
        if self._error is not None:
            raise self._error
        assert self._report is not None
        return self._report


class SkewFinish:
    """What runs in a prediction output's staging directory before its commit (`shards.publish`'s `finish`):
    the rows' report awaited, the predictions' part of the check (`SkewCheck.after_scoring`), each raising on
    "block", then skew.json written beside the predictions. `report` is the final report once it ran."""

    def __init__(self, check: SkewCheck, pending: PendingReport, counter: Optional[PredictionCounter]):
        self._check, self._pending, self._counter = check, pending, counter
        self.report: Optional[SkewReport] = None

    def __call__(self, staging: str) -> None:
        self.report = self._check.after_scoring(self._pending.result(), self._counter)
        write_report(self.report, staging)


def enforce(report: SkewReport) -> None:
    """Raises `SkewError` naming the worst features when the report blocks."""
    if report.status != BLOCKED:
        return
    fix = (
        'raise a threshold for the feature: --set predict.features=\'{"FEATURE": {"max_distance": 0.5}}\''
        if report.flagged
        else "raise the predictions' threshold: --set predict.max_prediction_shift=0.3"
    )
    raise SkewError(
        f"skew check {report.summary()}. No prediction was published. Check the rows being scored (a changed "
        "unit, a new category, a broken export); if the change is expected, run with --set predict.skew=warn, or "
        f"{fix}"
    )


def headline(report: Mapping[str, Any]) -> Dict[str, Any]:
    """A skew.json's bounded summary (an artifact's metadata carries it): the verdict, the mode, one line, the
    worst `SHOWN` flagged features with their figures, breaches and reading, the predictions' reading when they
    moved (else ""), and the warning a run's webhook alert carries ("skew check warned: ...", or "" unless the
    check warned)."""
    keep = ("feature", "figures", "breaches", "reading")
    worst = [{k: f[k] for k in keep} for f in report["features"] if f["breaches"]][:SHOWN]
    predictions = report.get("predictions") or {}
    moved = predictions["reading"] if predictions.get("breaches") else ""
    warning = f"skew check {report['summary']}" if report["status"] == WARNED else ""
    head = {"status": report["status"], "mode": report["mode"], "summary": report["summary"], "worst": worst}
    return {**head, "predictions": moved, "warning": warning}


def write_report(report: SkewReport, output_dir: str) -> str:
    """Writes `report` as `output_dir`/skew.json (atomically); returns its URI."""
    uri = storage.join(output_dir, SKEW_FILE)
    storage.write_text(uri, json.dumps(report.to_dict(), indent=2, sort_keys=True) + "\n")
    return uri


def read_report(output_dir: str) -> Optional[Dict[str, Any]]:
    """`output_dir`/skew.json as written, or None when there is none (`predict.skew=off`)."""
    uri = storage.join(output_dir, SKEW_FILE)
    return json.loads(storage.read_text(uri)) if storage.exists(uri) else None
