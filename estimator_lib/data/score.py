"""Scoring's own pieces of `prepare.encode_for_scoring`: new raw rows encoded through an existing (training)
schema for batch prediction. The passes, readers, bad-row handling and wire encoder are prepare's own; this
module only adds what differs: the result type, the column checks, the encode plan and the manifest.

Every row goes to split `SPLIT` of pass 2 (the eval slot, which gathers no training statistics) and is
written in input order by `data.output.ConsecutiveShards`.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable, Dict, List, Optional

from estimator_lib import fingerprints, storage
from estimator_lib.config import ConfigError, PrepareConfig
from estimator_lib.data.common import DataError
from estimator_lib.data.encode import EncodePlan
from estimator_lib.data.output import output_fingerprints
from estimator_lib.data.plan import Decisions, decide_classes, require_readable, unread_rows
from estimator_lib.data.plan import encode_plan as prepare_encode_plan
from estimator_lib.data.profile import Profile
from estimator_lib.data.read import Chunk
from estimator_lib.data.stats import Totals
from estimator_lib.schema import Schema

FORMAT_VERSION = 1
SPLIT = 1  # pass 2's eval slot: it gathers no training statistics, which scoring does not need
# split_index(u) gives SPLIT when u < test_fraction + eval_fraction; 2.0 exceeds every u in [0, 1] (even one
# that float rounding made 1.0), so every row lands in SPLIT and the rows stay in one ordered stream.
_EVERY_ROW = 2.0
FILES = "part-*.tfrecord"


@dataclasses.dataclass(frozen=True)
class ScoringData:
    """Rows encoded for scoring and published.

    Attributes:
      output_dir: where the shards, schema.json and manifest.json are.
      count: records written (good rows), in input order: batch prediction's `num_examples`.
      manifest: manifest.json: `rows` (total, written, bad, quarantined, labelled), `extra_columns`,
        `missing` per feature, `inputs`, `outputs`, `fingerprint`.
    """

    output_dir: str
    count: int
    manifest: Dict[str, Any]

    @property
    def files(self) -> str:
        """Glob pattern of the TFRecord shards (name order is input order)."""
        return storage.join(self.output_dir, FILES)

    @property
    def extra_columns(self) -> List[str]:
        """Input columns the schema does not know (ignored for scoring)."""
        return list(self.manifest["extra_columns"])


def key_column(schema: Schema, requested: Optional[str]) -> Optional[str]:
    """The key column for scoring: the requested one, else the schema's; a different one is refused because
    the schema's key column would then name other values in the output."""
    if requested is None:
        return schema.key_column
    if schema.key_column is not None and requested != schema.key_column:
        raise ConfigError(
            f"key_column={requested!r} differs from the schema's key column {schema.key_column!r}; score with "
            f"key_column={schema.key_column!r} (or None)"
        )
    return requested


def _required(schema: Schema, key: Optional[str]) -> List[str]:
    names = _names(schema)
    return names + ([key] if key is not None and key not in names else [])


def _names(schema: Schema) -> List[str]:
    return [f.name for f in schema.features]


def _absent_message(absent: List[str], key: Optional[str]) -> str:
    needed = "every feature column of the schema" + (f" and the key column {key!r}" if key else "")
    return (
        f"column(s) {absent} are missing: scoring needs {needed} (values may be missing: empty or NA; "
        "the label and other columns are optional)"
    )


def header_check(schema: Schema, key: Optional[str]) -> Callable[[Chunk], None]:
    """The CSV header check: every file has each feature column (and the key column). The label and other
    columns are optional."""
    required = _required(schema, key)

    def check(chunk: Chunk) -> None:
        header = chunk.columns or ()
        absent = [c for c in required if c not in header]
        if absent:
            raise DataError(f"{chunk.file_name} line 1: {_absent_message(absent, key)}; the header has {list(header)}")

    return check


def check_columns(profile: Profile, schema: Schema, config: "PrepareConfig") -> List[str]:
    """Checks the input's columns after pass 1 (JSON Lines: the union over rows); returns the extra ones."""
    if profile.rows == 0:
        raise DataError(f"the input has no rows (inputs: {list(config.data)}); check the files are not empty")
    require_readable(profile)
    absent = [c for c in _required(schema, config.key_column) if c not in profile.columns]
    if absent:
        raise DataError(
            f"{_absent_message(absent, config.key_column)}: no row has them; the input has {list(profile.columns)}"
            + unread_rows(profile)
        )
    known = set(_names(schema)) | {schema.label.name, config.key_column}
    return [c for c in profile.columns if c not in known]


def encode_plan(schema: Schema, config: "PrepareConfig") -> EncodePlan:
    """prepare's encode plan for the schema as it is, with an optional label and every row in `SPLIT`."""
    task = schema.label.task
    classes, whole = decide_classes(Profile(), config, schema, task)
    decisions = Decisions(schema.features, task, classes, whole, (), schema)
    plan = prepare_encode_plan(decisions, config)
    return dataclasses.replace(
        plan, eval_fraction=_EVERY_ROW, test_fraction=0.0, valid_fraction=0.0, optional_label=True
    )


def manifest(
    staging: str,
    inputs: List[Dict[str, Any]],
    schema: Schema,
    extra: List[str],
    totals: Totals,
    shard_records: Dict[str, int],
    config: "PrepareConfig",
) -> Dict[str, Any]:
    """manifest.json of a scoring encode (no time stamps or locations: identical inputs give identical bytes)."""
    outputs = output_fingerprints(staging, shard_records)
    written = totals.counts[SPLIT]
    out: Dict[str, Any] = {
        "format_version": FORMAT_VERSION,
        "kind": "scoring",
        "config": _recorded(config, [i["name"] for i in inputs]),
        "inputs": inputs,
        "input_fingerprint": fingerprints.json_digest(inputs),
        "schema_fingerprint": fingerprints.json_digest(schema.to_dict()),
        "task": schema.label.task,
        "label": schema.label.name,
        "key_column": config.key_column,
        "extra_columns": extra,
        "rows": {
            "total": totals.rows,
            "written": written,
            "bad": totals.bad,
            "quarantined": totals.bad,
            "labelled": totals.labelled,
        },
        "count": written,
        "missing": dict(zip(_names(schema), totals.missing[SPLIT])),
        "files": sorted(shard_records),
        "outputs": outputs,
    }
    out["fingerprint"] = fingerprints.json_digest({"inputs": out["input_fingerprint"], "outputs": outputs})
    return out


def _recorded(config: "PrepareConfig", names: List[str]) -> Dict[str, Any]:
    fields = ("key_column", "input_format", "num_shards", "bad_rows", "max_bad_fraction", "missing_values")
    recorded = config.recorded(names)
    return {"data": recorded["data"], "chunk_bytes": config.chunk_bytes, **{f: recorded[f] for f in fields}}
