"""`PrepareConfig`: what input preparation reads and how it decides types, splits and bad rows."""

from __future__ import annotations

import dataclasses
import os
from typing import Any, Dict, List, Optional, Sequence, Tuple

from estimator_lib.config.base import JsonConfig, require
from estimator_lib.schema import CLASSIFICATION, REGRESSION

DEFAULT_MISSING_VALUES = ("", "NA", "N/A", "null", "None")


@dataclasses.dataclass(frozen=True)
class PrepareConfig(JsonConfig):
    """What to prepare and how. Frozen, validated on construction, JSON round trip (`to_dict`/`from_dict`).

    Attributes:
      data: local paths, gs:// URIs, or globs of either ("*", "?", "[...]").
      label: the label column (original name).
      task: "classification" | "regression"; None infers it (text, or few distinct whole numbers ->
        classification).
      key_column: a column of unique row keys; None derives keys from each row's content.
      input_format: "auto" (by extension: .csv; .jsonl/.json/.ndjson) | "csv" | "jsonl".
      schema_uri: a schema JSON (Schema.to_json format) to enforce instead of inferring types; its statistics
        are recomputed (given vocabularies and label classes are kept).
      eval_fraction, test_fraction: expected shares of rows in the eval and test splits.
      valid_fraction: expected share of rows in the validation split, carved from the rows that would train
        (same stable hash: eval and test rows do not change with it); training judges early stopping on it
        (`training.early_stopping`). 0 trains on every non-eval row, without early stopping.
      num_shards: TFRecord files per split (at least the number of TPU hosts).
      bad_rows: "fail" on the first bad row, or "quarantine" bad rows into quarantine.jsonl.
      max_bad_fraction: with "quarantine", fail anyway when more than this share of rows is bad.
      missing_values: texts meaning "missing" (after stripping white space); JSON null is always missing.
      min_numeric_fraction: a column is inferred numeric when at least this share of its values are numbers.
      max_inferred_classes: a whole-number label with at most this many distinct values is inferred as
        classification.
      max_classes: most distinct label values classification accepts.
      max_vocabulary_size: most values kept in a categorical column's vocabulary (its training values, most
        frequent first); the others map to the out-of-vocabulary id. A column it cuts is a warning: the prepared
        manifest's `vocabulary_caps` and `notes` give the distinct values, those kept and the training rows left
        out (docs/prepare.md, Vocabularies). A vocabulary a supplied schema gives is never cut.
      unknown_columns: with a schema, columns it does not list: "fail" or "ignore" (listed in the manifest).
      num_workers: worker processes; None uses every core.
      chunk_bytes: input bytes per chunk of work (part of the output's identity: statistics are summed per
        chunk).
      feature_spec: a JSON file (local or gs://) describing TFRecords of `tf.train.Example`
        (`estimator_lib.config.feature_spec`): `data` (and `eval_data`) are then such records, for a user's own
        model_fn (`model.model_fn`); they are checked against the spec, never imputed. None: raw rows.
      eval_data: with a feature spec, TFRecords (paths or globs) to evaluate on; () splits `data` by
        `eval_fraction` (by each record's content hash, so a record stays in its split from run to run).
      refit_normalization: when preparing against a reference schema (a published model a run continues),
        recompute numeric means and standard deviations (and a regression label's) from this data instead of
        keeping the reference's; a warm-started model then meets differently scaled inputs.
    """

    data: Tuple[str, ...]
    label: str
    task: Optional[str] = None
    key_column: Optional[str] = None
    input_format: str = "auto"
    schema_uri: Optional[str] = None
    eval_fraction: float = 0.2
    test_fraction: float = 0.0
    valid_fraction: float = 0.1
    num_shards: int = 2
    bad_rows: str = "fail"
    max_bad_fraction: float = 0.01
    missing_values: Tuple[str, ...] = DEFAULT_MISSING_VALUES
    min_numeric_fraction: float = 0.9
    max_inferred_classes: int = 20
    max_classes: int = 1000
    max_vocabulary_size: int = 10000
    unknown_columns: str = "fail"
    num_workers: Optional[int] = None
    chunk_bytes: int = 1 << 20
    refit_normalization: bool = False
    feature_spec: Optional[str] = None
    eval_data: Tuple[str, ...] = ()

    def __post_init__(self) -> None:
        data = (self.data,) if isinstance(self.data, str) else tuple(self.data)
        object.__setattr__(self, "data", data)
        eval_data = (self.eval_data,) if isinstance(self.eval_data, str) else tuple(self.eval_data)
        object.__setattr__(self, "eval_data", eval_data)
        require(
            self.feature_spec is None or (isinstance(self.feature_spec, str) and bool(self.feature_spec)),
            f"prepare.feature_spec={self.feature_spec!r} must be the path of a JSON feature spec, or null",
        )
        require(
            not eval_data or self.feature_spec is not None,
            f"prepare.eval_data={list(eval_data)} is for TFRecords described by a feature spec (--feature-spec); "
            "raw rows are split by prepare.eval_fraction",
        )
        object.__setattr__(self, "missing_values", tuple(self.missing_values))
        require(
            bool(data) and all(isinstance(d, str) and d for d in data),
            f"prepare.data={data!r} must list at least one path",
        )
        require(
            isinstance(self.label, str) and bool(self.label),
            f"prepare.label={self.label!r} must name the label column",
        )
        require(
            self.task in (None, CLASSIFICATION, REGRESSION),
            f"prepare.task={self.task!r} must be None, 'classification' or 'regression'",
        )
        require(
            self.key_column != self.label,
            f"prepare.key_column={self.key_column!r} is the label; use another column or None",
        )
        require(
            self.input_format in ("auto", "csv", "jsonl"),
            f"prepare.input_format={self.input_format!r} must be 'auto', 'csv' or 'jsonl'",
        )
        self._check_fractions()
        for name in ("num_shards", "max_inferred_classes", "max_classes", "max_vocabulary_size"):
            _positive(name, getattr(self, name))
        require(
            self.num_workers is None or (_is_int(self.num_workers) and self.num_workers > 0),
            f"prepare.num_workers={self.num_workers!r} must be None (all cores) or a positive integer",
        )
        require(
            _is_int(self.chunk_bytes) and self.chunk_bytes >= 1024,
            f"prepare.chunk_bytes={self.chunk_bytes!r} must be an integer >= 1024",
        )
        require(
            self.bad_rows in ("fail", "quarantine"),
            f"prepare.bad_rows={self.bad_rows!r} must be 'fail' or 'quarantine'",
        )
        require(
            self.unknown_columns in ("fail", "ignore"),
            f"prepare.unknown_columns={self.unknown_columns!r} must be 'fail' or 'ignore'",
        )
        require(
            all(isinstance(t, str) for t in self.missing_values),
            f"prepare.missing_values={self.missing_values!r} must be texts",
        )

    def _check_fractions(self) -> None:
        require(0 < self.eval_fraction < 1, f"prepare.eval_fraction={self.eval_fraction!r} must be in (0, 1), e.g. 0.2")
        require(0 <= self.test_fraction < 1, f"prepare.test_fraction={self.test_fraction!r} must be in [0, 1)")
        require(
            0 <= self.valid_fraction < 1,
            f"prepare.valid_fraction={self.valid_fraction!r} must be in [0, 1), e.g. 0.1 (0: no validation split)",
        )
        held_out = self.eval_fraction + self.test_fraction + self.valid_fraction
        require(
            held_out < 1,
            f"prepare.eval_fraction + test_fraction + valid_fraction = {held_out:g} leaves no training rows; keep "
            f"their sum below 1 (prepare.eval_fraction={self.eval_fraction!r}, prepare.test_fraction="
            f"{self.test_fraction!r}, prepare.valid_fraction={self.valid_fraction!r})",
        )
        require(0 <= self.max_bad_fraction < 1, f"prepare.max_bad_fraction={self.max_bad_fraction!r} must be in [0, 1)")
        require(
            0 < self.min_numeric_fraction <= 1,
            f"prepare.min_numeric_fraction={self.min_numeric_fraction!r} must be in (0, 1]",
        )

    @property
    def workers(self) -> int:
        return self.num_workers or os.cpu_count() or 1

    def reads(self) -> List[str]:
        """What preparation reads: the data, and for a user's records their eval data and feature spec file."""
        return [*self.data, *self.eval_data, *([self.feature_spec] if self.feature_spec else [])]

    def recorded(self, input_names: Sequence[str]) -> Dict[str, Any]:
        """The config as the manifest records it: locations replaced by input names (outputs must not depend
        on where files live) and without num_workers (which never changes the output)."""
        out = self.to_dict()
        out["data"] = list(input_names)
        out["schema_uri"] = os.path.basename(self.schema_uri) if self.schema_uri else None
        out.pop("num_workers")
        if self.feature_spec is None:  # raw rows: the manifest reads as it did before records were supported
            out.pop("feature_spec")
            out.pop("eval_data")
        return out


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _positive(name: str, value: Any) -> None:
    require(_is_int(value) and value > 0, f"prepare.{name}={value!r} must be a positive integer")
