"""Data validation: a run's training data against the data of the published model it continues, before training.

Both sides are `estimator_lib.data.distribution` profiles of a training split: the reference's travels inside
the published model (its export metadata), the new one is written by `prepare`. Checked, each against a
`ValidationConfig` threshold:

  * schema: columns the reference had that the data lacks (dropped: read as missing in every row), columns the
    reference did not have (new: not used by the model); retyped columns already failed in `prepare`;
  * rows: the new training rows as a share of the reference's;
  * every feature: the change of its missing-value share, and the population stability index (PSI) between the
    two distributions: sum over bins of (new - old) * ln(new / old), shares floored at 1e-4. Numerics are
    binned on the reference's deciles (a share read from each side's percentiles), categoricals on the
    reference's values plus one bin of values it never saw;
  * categorical: the share of present values the reference never saw (a renamed or new category);
  * numeric: the mean's shift in reference standard deviations, and the ratio of the standard deviations.

`validate_data` returns a `ValidationReport` (Markdown for people and the Vertex AI UI, a dict for summaries);
what a breach does is `ValidationConfig.on_breach`'s to say (`check`).
"""

from __future__ import annotations

import dataclasses
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple

import numpy as np

from estimator_lib.config.validation import FAIL, ValidationConfig
from estimator_lib.data.common import DataError, markdown_text
from estimator_lib.schema import NUMERIC

PASSED, WARNED, FAILED, SKIPPED = "passed", "warned", "failed", "skipped"
_FLOOR = 1e-4


class DataValidationError(DataError):
    """The data drifted from the reference's beyond a threshold, with `validation.on_breach='fail'`."""


@dataclasses.dataclass(frozen=True)
class Finding:
    """One figure of one feature (or of the rows, or of the schema) against its threshold.

    Attributes:
      feature: the column's original name ("(rows)" for the row count).
      check: what was measured: "dropped column", "new column", "row ratio", "missing change", "distance (PSI)",
        "unseen share", "mean shift (std)", "std ratio".
      value: the figure (None for a schema change).
      threshold: the limit it is held to (None for a schema change).
      setting: the `ValidationConfig` field that sets the limit.
      breach: whether the figure is beyond the limit (or the schema change counts as a breach).
    """

    feature: str
    check: str
    value: Optional[float]
    threshold: Optional[float]
    setting: str
    breach: bool

    def text(self) -> str:
        if self.value is None:
            return f"{self.feature}: {self.check} ({self.setting}={'fail' if self.breach else 'warn'})"
        return f"{self.feature}: {self.check} {self.value:.3g} beyond {self.threshold:g} ({self.setting})"


@dataclasses.dataclass(frozen=True)
class ValidationReport:
    """The outcome of a validation.

    Attributes:
      status: "passed", "warned" (breaches recorded, the run goes on), "failed" or "skipped" (no reference).
      reference: the reference model's URI ("" when skipped).
      rows: (reference training rows, new training rows).
      findings: every figure measured, breaches first.
      on_breach: the `ValidationConfig.on_breach` applied.
      why: skipped with no reference, why the run continues no published model (the resolve stage's reason).
    """

    status: str
    reference: str = ""
    rows: Tuple[int, int] = (0, 0)
    findings: Tuple[Finding, ...] = ()
    on_breach: str = FAIL
    why: str = ""

    @property
    def breaches(self) -> Tuple[Finding, ...]:
        return tuple(f for f in self.findings if f.breach)

    def summary(self) -> str:
        """One line for the console and the summary."""
        if self.status == SKIPPED and self.reference:
            return f"skipped: {self.reference} records no profile of its data (exported before profiles were)"
        if self.status == SKIPPED:
            why = f" ({self.why})" if self.why else ""
            return f"skipped: this run continues no published model{why}, so there is no data to compare with"
        if not self.breaches:
            return f"passed: {len(self.findings)} figures within their thresholds against {self.reference}"
        listed = "; ".join(f.text() for f in self.breaches)
        return f"{self.status}, {len(self.breaches)} breach(es) against {self.reference}: {listed}"

    def to_dict(self) -> Dict[str, Any]:
        return {
            "status": self.status,
            "summary": self.summary(),
            "reference": self.reference,
            "rows": {"reference": self.rows[0], "new": self.rows[1]},
            "on_breach": self.on_breach,
            "breaches": [dataclasses.asdict(f) for f in self.breaches],
            "findings": [dataclasses.asdict(f) for f in self.findings],
        }

    def drift(self) -> Dict[str, Dict[str, float]]:
        """The measured figures per feature, {feature: {check: value}} (schema changes have no figure), for the
        evaluation report's drift table."""
        table: Dict[str, Dict[str, float]] = {}
        for f in self.findings:
            if f.value is not None:
                table.setdefault(f.feature, {})[f.check] = round(float(f.value), 4)
        return table

    def markdown(self) -> str:
        """The report as Markdown (a Vertex AI Markdown artifact shows it as it is). Feature names and the
        reference's path are `markdown_text`: they show as written, never as markup."""
        lines = ["# Data validation", "", f"**{self.status}** ({markdown_text(self.summary())})", ""]
        if self.status == SKIPPED:
            return "\n".join(lines + ["Nothing was checked.", ""])
        lines += [
            f"Reference: {markdown_text(self.reference)}, {self.rows[0]} training rows; this run: {self.rows[1]} "
            "training rows. "
            f"On a breach: `validation.on_breach={self.on_breach}`.",
            "",
            "| feature | check | figure | threshold | setting | |",
            "|---|---|---|---|---|---|",
        ]
        for f in self.findings:
            value = "" if f.value is None else f"{f.value:.4g}"
            threshold = "" if f.threshold is None else f"{f.threshold:g}"
            mark = "**breach**" if f.breach else "ok"
            lines.append(f"| {markdown_text(f.feature)} | {f.check} | {value} | {threshold} | `{f.setting}` | {mark} |")
        return "\n".join(lines + ["", _ADVICE, ""])


_ADVICE = (
    "What to do: check the data (a renamed category, a changed unit, a broken export); if the change is real, "
    "run with `--set validation.on_breach=warn` (or raise the threshold named in the table) to train on it, or "
    "start cold with `--warm-start none --baseline none`."
)


def skipped(reference: str = "", why: str = "") -> ValidationReport:
    """Nothing to compare with: no reference model (`why` says why), or one exported before data profiles were
    recorded."""
    return ValidationReport(SKIPPED, reference, why=why)


def validate_data(
    reference: Mapping[str, Any],
    new: Mapping[str, Any],
    config: ValidationConfig,
    reference_uri: str,
    new_columns: Sequence[str] = (),
    dropped_columns: Sequence[str] = (),
) -> ValidationReport:
    """Compares two training-split profiles (`distribution.profile_split`).

    Args:
      reference: the reference model's data profile.
      new: this run's data profile (over the reference's features: prepare continued its schema).
      config: thresholds and what a breach does.
      reference_uri: the reference model, named in the report.
      new_columns, dropped_columns: the prepared manifest's `ignored_columns` and `absent_columns`.
    """
    findings = _schema_findings(new_columns, dropped_columns, config) + [_row_finding(reference, new, config)]
    for name, old in reference["features"].items():
        if name in new["features"] and name not in dropped_columns:
            findings += _feature_findings(name, old, new["features"][name], config)
    findings.sort(key=lambda f: not f.breach)
    status = PASSED
    if any(f.breach for f in findings):
        status = FAILED if config.on_breach == FAIL else WARNED
    rows = (int(reference["rows"]), int(new["rows"]))
    return ValidationReport(status, reference_uri, rows, tuple(findings), config.on_breach)


def _schema_findings(new_columns: Sequence[str], dropped: Sequence[str], config: ValidationConfig) -> List[Finding]:
    breach = config.schema_changes == FAIL
    changes = [(c, "dropped column") for c in dropped] + [(c, "new column") for c in new_columns]
    return [Finding(c, what, None, None, "validation.schema_changes", breach) for c, what in changes]


def _row_finding(reference: Mapping[str, Any], new: Mapping[str, Any], config: ValidationConfig) -> Finding:
    ratio = new["rows"] / max(reference["rows"], 1)
    if ratio < config.min_row_ratio:
        return Finding("(rows)", "row ratio", ratio, config.min_row_ratio, "validation.min_row_ratio", True)
    breach = ratio > config.max_row_ratio
    return Finding("(rows)", "row ratio", ratio, config.max_row_ratio, "validation.max_row_ratio", breach)


def check(report: ValidationReport, report_uri: str) -> None:
    """Raises `DataValidationError` naming every breach when the report failed."""
    if report.status != FAILED:
        return
    raise DataValidationError(
        f"data validation {report.summary()}. Report: {report_uri}. Fix the data, or if the change is "
        "real run with --set validation.on_breach=warn (or raise the threshold named), or start cold with "
        "--warm-start none --baseline none"
    )


def _feature_findings(
    name: str, old: Mapping[str, Any], new: Mapping[str, Any], config: ValidationConfig
) -> List[Finding]:
    def finding(check: str, value: float, threshold: float, setting: str) -> Finding:
        return Finding(name, check, float(value), threshold, f"validation.{setting}", value > threshold)

    missing = abs(missing_share(new) - missing_share(old))
    out = [finding("missing change", missing, config.max_missing_change, "max_missing_change")]
    if not old["present"] or not new["present"]:
        return out
    if old["kind"] == NUMERIC:
        out.append(finding("distance (PSI)", numeric_psi(old, new), config.max_distance, "max_distance"))
        std = old["std"] if old["std"] > 0 else 1.0
        out.append(
            finding("mean shift (std)", abs(new["mean"] - old["mean"]) / std, config.max_mean_shift, "max_mean_shift")
        )
        if old["std"] > 0 and new["std"] > 0:
            spread = max(new["std"] / old["std"], old["std"] / new["std"])
            out.append(finding("std ratio", spread, config.max_std_ratio, "max_std_ratio"))
        return out
    old_shares, new_shares, unseen = category_shares(old, new)
    out.append(finding("distance (PSI)", psi(old_shares, new_shares), config.max_distance, "max_distance"))
    out.append(finding("unseen share", unseen, config.max_unseen_share, "max_unseen_share"))
    return out


def missing_share(profile: Mapping[str, Any]) -> float:
    """The share of a profiled feature's values that are missing."""
    return profile["missing"] / max(profile["missing"] + profile["present"], 1)


def psi(old: np.ndarray, new: np.ndarray) -> float:
    """Population stability index of two share vectors over the same bins (shares floored at 1e-4)."""
    old, new = np.maximum(old, _FLOOR), np.maximum(new, _FLOOR)
    return float(np.sum((new - old) * np.log(new / old)))


def percentile_cdf(percentiles: Sequence[float], points: np.ndarray) -> np.ndarray:
    """The share of values at or below each point, read from 101 percentiles (a step estimate, 1% resolution)."""
    pcts = np.asarray(percentiles, np.float64)
    return np.searchsorted(pcts, points, side="right") / len(pcts)


def numeric_psi(old: Mapping[str, Any], new: Mapping[str, Any]) -> float:
    """PSI of a numeric feature's two profiles, binned on `old`'s deciles (`numeric_shares`)."""
    return psi(*numeric_shares(old, new))


def decile_edges(percentiles: Sequence[float]) -> np.ndarray:
    """The bin edges PSI uses for a numeric feature: the distinct deciles of its reference's 101 percentiles (bin k
    holds the values v with edges[k-1] < v <= edges[k])."""
    return np.unique(np.asarray(percentiles, np.float64)[10:100:10])


def percentile_shares(percentiles: Sequence[float], edges: np.ndarray) -> np.ndarray:
    """A profile's shares over the bins cut at `edges`, read from its percentiles."""
    return np.diff(np.concatenate([[0.0], percentile_cdf(percentiles, edges), [1.0]]))


def numeric_shares(old: Mapping[str, Any], new: Mapping[str, Any]) -> Tuple[np.ndarray, np.ndarray]:
    """Both profiles' shares over bins cut at `old`'s distinct deciles, each read from the profile's percentiles."""
    edges = decile_edges(old["percentiles"])
    return percentile_shares(old["percentiles"], edges), percentile_shares(new["percentiles"], edges)


def category_shares(old: Mapping[str, Any], new: Mapping[str, Any]) -> Tuple[np.ndarray, np.ndarray, float]:
    """Shares over the reference's values plus one unseen bin, and the new data's unseen share."""
    values = list(old["counts"])
    old_counts = np.array([old["counts"][v] for v in values] + [old.get("other", 0)], np.float64)
    known = [new["counts"].get(v, 0) for v in values]
    unseen_count = new["present"] - sum(known)
    new_counts = np.array(known + [unseen_count], np.float64)
    return old_counts / old_counts.sum(), new_counts / new_counts.sum(), unseen_count / new["present"]
