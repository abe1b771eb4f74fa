"""The prepare stage for a user's own TFRecords: every record checked against the feature spec, the records
split into train and eval, and published with the spec and a manifest, all or nothing.

The records are copied byte for byte (never re-encoded, never imputed): a record that lacks a feature, holds
the wrong number of values, or the wrong list type, fails the stage naming the file, the record's index, the
feature, what the spec expects and what the record holds. Without eval records of their own, `data` is split
by each record's content (a sha256 bucket against `eval_fraction`), so a record stays in its split from one run
to the next whatever else the data holds. Each split is written as `num_shards` files of consecutive records, so
its order is the input's order (prediction rows keep it). Tuning alone adds a validation split, cut from a
preparation's train split by the same hash rule (`carve_validation`); a run's own preparation never holds one.

Layout of the prepared directory: train/ and eval/ (part-NNNNN-of-MMMMM.tfrecord), feature_spec.json (the spec
with its label and key), profile.json (the train split's profile, the skew check's reference: `model.user.profile`),
manifest.json (kind "records": counts, the input files with their sizes, record counts
and sha256, the config), validation.md is the stage's separate artifact.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
from typing import Any, Dict, Iterator, List, Optional, Sequence, Tuple

import numpy as np
import tensorflow as tf

from estimator_lib import fingerprints, storage
from estimator_lib.config import ConfigError, PrepareConfig
from estimator_lib.config.feature_spec import FeatureSpec, FeatureSpecError
from estimator_lib.data.common import EVAL, TRAIN, VALID, markdown_text
from estimator_lib.data.distribution import PROFILE
from estimator_lib.model import inputs
from estimator_lib.model.user import records
from estimator_lib.model.user.profile import profile_records

KIND = "records"
FEATURE_SPEC = "feature_spec.json"
MANIFEST = "manifest.json"
FORMAT_VERSION = 1
_BATCH = 1024


@dataclasses.dataclass(frozen=True)
class PreparedRecords:
    """A published preparation of TFRecords: where it is, the spec (with label and key), counts per split, and
    the manifest."""

    output_dir: str
    spec: FeatureSpec
    counts: Dict[str, int]
    manifest: Dict[str, Any]

    def files(self, split: str) -> List[str]:
        return [storage.join(self.output_dir, name) for name in self.manifest["splits"][split]]

    def profile(self) -> Optional[Dict[str, Any]]:
        """The train split's profile (`model.user.profile`), the skew check's reference; None for a preparation
        made before records were profiled."""
        path = storage.join(self.output_dir, PROFILE)
        return json.loads(storage.read_text(path)) if storage.exists(path) else None


def read_spec(config: PrepareConfig) -> FeatureSpec:
    """The feature spec file `config.feature_spec` names (local or gs://), with the config's label and key."""
    path = config.feature_spec
    try:
        data = json.loads(storage.read_text(path))
    except FileNotFoundError:
        raise FeatureSpecError(f"--feature-spec {path}: no such file") from None
    except json.JSONDecodeError as e:
        raise FeatureSpecError(f"--feature-spec {path}: not valid JSON ({e})") from None
    spec = FeatureSpec.from_json(data, config.label, config.key_column, source=path)
    if spec.label is None:
        raise FeatureSpecError(f"--feature-spec {path}: give --label, the feature that is the label")
    return spec


def is_records(output_dir: str) -> bool:
    """Whether `output_dir` holds a preparation of TFRecords (this module's), not of raw rows."""
    return storage.exists(storage.join(output_dir, FEATURE_SPEC))


def load_records(output_dir: str) -> PreparedRecords:
    """Reads a published preparation of TFRecords back."""
    if not storage.is_committed(output_dir):
        raise FileNotFoundError(f"{output_dir} holds no complete preparation (no {storage.COMMIT_MARKER} marker)")
    manifest = json.loads(storage.read_text(storage.join(output_dir, MANIFEST)))
    saved = json.loads(storage.read_text(storage.join(output_dir, FEATURE_SPEC)))
    spec = FeatureSpec.from_json(saved["features"], saved["label"], saved["key"], source=FEATURE_SPEC)
    return PreparedRecords(output_dir, spec, {k: int(v) for k, v in manifest["counts"].items()}, manifest)


# -- reading and checking ------------------------------------------------------------------------------------
def _batches(path: str) -> Iterator[np.ndarray]:
    dataset = tf.data.TFRecordDataset([path], compression_type=records.compression([path])).batch(_BATCH)
    return dataset.as_numpy_iterator()


def _check_batch(path: str, batch: np.ndarray, spec: FeatureSpec, with_label: bool) -> None:
    """Parses one batch by the spec; a record that does not match fails naming the file, record and feature."""
    try:
        records.parse_batch(tf.constant(batch), spec, with_label)
    except (tf.errors.InvalidArgumentError, ValueError) as e:
        records.raise_for_records([path], spec, with_label, e)


def _in_eval(record: bytes, fraction: float) -> bool:
    """The record's split by its content: the same record is in the same split in every run."""
    bucket = int.from_bytes(hashlib.sha256(record).digest()[:8], "big") / 2.0**64
    return bucket < fraction


@dataclasses.dataclass
class _Input:
    uri: str
    records: int = 0
    eval_records: int = 0
    digest: Any = dataclasses.field(default_factory=hashlib.sha256)
    size: int = 0

    def described(self) -> Dict[str, Any]:
        return {
            "uri": self.uri,
            "name": os.path.basename(self.uri),
            "size": self.size,
            "records": self.records,
            "sha256": self.digest.hexdigest(),
        }


def _scan(files: Sequence[str], spec: FeatureSpec, split_fraction: Optional[float]) -> Tuple[List[_Input], List[bool]]:
    """First pass: checks every record, hashes the files' records, and (when splitting) assigns each record."""
    scanned, assigned = [], []
    for path in files:
        described = _Input(path)
        for batch in _batches(path):
            _check_batch(path, batch, spec, with_label=True)
            for record in batch:
                described.digest.update(len(record).to_bytes(8, "big") + record)
                described.size += len(record)
                if split_fraction is not None:
                    assigned.append(_in_eval(record, split_fraction))
                    described.eval_records += assigned[-1]
            described.records += len(batch)
        scanned.append(described)
    return scanned, assigned


def _shard_names(split: str, count: int) -> List[str]:
    return [f"{split}/part-{i:05d}-of-{count:05d}.tfrecord" for i in range(count)]


def _write_split(staging: str, split: str, stream: Iterator[bytes], total: int, num_shards: int) -> List[str]:
    """Writes `total` records as `num_shards` files of consecutive records (fewer when there are fewer records)."""
    shards = max(1, min(num_shards, total))
    names = _shard_names(split, shards)
    os.makedirs(os.path.join(staging, split), exist_ok=True)
    for shard, name in enumerate(names):
        size = total // shards + (1 if shard < total % shards else 0)
        with tf.io.TFRecordWriter(os.path.join(staging, name)) as writer:
            for _, record in zip(range(size), stream):
                writer.write(record)
    return names


def _records(files: Sequence[str], keep: Optional[Iterator[bool]] = None, want: bool = True) -> Iterator[bytes]:
    """The files' records in order; with `keep`, those whose assignment equals `want`."""
    for path in files:
        for batch in _batches(path):
            for record in batch:
                if keep is None or next(keep) == want:
                    yield bytes(record)


# -- the stage --------------------------------------------------------------------------------------------------
def _resolve(patterns: Sequence[str], what: str) -> List[str]:
    try:
        return inputs.resolve_files(list(patterns))
    except FileNotFoundError as e:
        raise FileNotFoundError(f"{what}: {e}") from None


def _label_counts(files: Sequence[str], spec: FeatureSpec) -> Optional[Dict[str, int]]:
    """Records per label value, for a scalar integer or bytes label (a class label); None for another label."""
    label = spec.feature(spec.label)
    if label.shape or label.dtype == "float32" or label.var_len:
        return None
    counts: Dict[str, int] = {}
    for value in records.read_column(files, label):
        counts[str(value)] = counts.get(str(value), 0) + 1
    return dict(sorted(counts.items()))


def _class_counts(written: Dict[str, List[str]], spec: FeatureSpec) -> Dict[str, Dict[str, int]]:
    counted = {name: _label_counts(files, spec) for name, files in written.items()}
    return {name: counts for name, counts in counted.items() if counts is not None}


def prepare_records(config: PrepareConfig, output_dir: str) -> PreparedRecords:
    """Checks, splits and publishes the TFRecords `config` names (`config.feature_spec` describes them).

    Args:
      config: `data` (and `eval_data`, else `eval_fraction` splits `data`), `feature_spec`, `label`,
        `key_column`, `num_shards`.
      output_dir: where the preparation is published (local or gs://), all or nothing.

    Raises:
      FeatureSpecError: the spec file is missing or wrong. RecordMismatchError: a record does not match it.
      FileNotFoundError: a pattern matches no file.
    """
    spec = read_spec(config)
    train_files = _resolve(config.data, "--data")
    eval_files = _resolve(config.eval_data, "--eval-data") if config.eval_data else []
    split = None if eval_files else config.eval_fraction
    scanned, assigned = _scan(train_files, spec, split)
    scanned_eval, _ = _scan(eval_files, spec, None)
    if eval_files:
        counts = {TRAIN: sum(s.records for s in scanned), EVAL: sum(s.records for s in scanned_eval)}
    else:
        counts = {EVAL: sum(assigned), TRAIN: len(assigned) - sum(assigned)}
    for name, count in counts.items():
        if count == 0:
            raise ValueError(
                f"the {name} split holds no record ({sum(s.records for s in scanned)} records in --data "
                f"{list(config.data)}); give more records, --eval-data, or another prepare.eval_fraction"
            )

    def fill(staging: str) -> Dict[str, Any]:
        splits = {}
        if eval_files:
            splits[TRAIN] = _write_split(staging, TRAIN, _records(train_files), counts[TRAIN], config.num_shards)
            splits[EVAL] = _write_split(staging, EVAL, _records(eval_files), counts[EVAL], config.num_shards)
        else:
            for name, want in ((TRAIN, False), (EVAL, True)):
                stream = _records(train_files, iter(assigned), want)
                splits[name] = _write_split(staging, name, stream, counts[name], config.num_shards)
        written = {name: [os.path.join(staging, f) for f in files] for name, files in splits.items()}
        manifest = _manifest(config, spec, counts, splits, scanned + scanned_eval, written)
        storage.write_text(os.path.join(staging, MANIFEST), json.dumps(manifest, indent=2, sort_keys=True))
        saved = {"features": spec.to_json(), "label": spec.label, "key": spec.key}
        storage.write_text(os.path.join(staging, FEATURE_SPEC), json.dumps(saved, indent=2, sort_keys=True))
        profile = profile_records(written[TRAIN], spec, counts[TRAIN])
        storage.write_text(os.path.join(staging, PROFILE), json.dumps(profile, indent=2, sort_keys=True))
        return manifest

    manifest = storage.commit_staged(output_dir, fill)
    return PreparedRecords(output_dir, spec, counts, manifest)


def _manifest(config, spec, counts, splits, scanned, written) -> Dict[str, Any]:
    described = [s.described() for s in scanned]
    names = [d["name"] for d in described]
    return {
        "kind": KIND,
        "format_version": FORMAT_VERSION,
        "counts": counts,
        "rows": {"total": sum(d["records"] for d in described), "quarantined": 0},
        "missing": {},
        "class_counts": _class_counts(written, spec),
        "notes": [],
        "splits": splits,
        "inputs": described,
        "input_fingerprint": fingerprints.json_digest([{k: d[k] for k in ("sha256", "records")} for d in described]),
        "config": config.recorded(names),
        "label": spec.label,
        "key": spec.key,
        "features": spec.to_json(),
    }


def carve_validation(prepared: PreparedRecords, output_dir: str) -> PreparedRecords:
    """A validation split for tuning, carved from `prepared`'s train split and published with the rest of it in
    `output_dir` (read back when already there): the train records whose content hash falls in the
    `valid_fraction` of the hash range next to eval's (the rule that splits eval off, so a record is in the same
    split every run), with a manifest. The eval split is not copied; `prepared` itself is unchanged.

    Raises:
      ConfigError: the validation or the remaining train split would hold no record.
    """
    if storage.is_committed(output_dir):
        manifest = json.loads(storage.read_text(storage.join(output_dir, MANIFEST)))
        return PreparedRecords(output_dir, prepared.spec, manifest["counts"], manifest)
    config, files = prepared.manifest["config"], prepared.files(TRAIN)
    below = (0.0 if config["eval_data"] else config["eval_fraction"]) + config["valid_fraction"]
    assigned = [_in_eval(record, below) for record in _records(files)]
    counts = {TRAIN: assigned.count(False), VALID: assigned.count(True)}
    if not all(counts.values()):
        raise ConfigError(
            f"tuning a model_fn carves prepare.valid_fraction={config['valid_fraction']} of the "
            f"{len(assigned)} train records into a validation split, which leaves {counts}: give more records"
        )

    def fill(staging: str) -> Dict[str, Any]:
        splits = {}
        for name, want in ((TRAIN, False), (VALID, True)):
            stream = _records(files, iter(assigned), want)
            splits[name] = _write_split(staging, name, stream, counts[name], config["num_shards"])
        kept = {k: prepared.manifest[k] for k in ("kind", "format_version", "config", "label", "key", "features")}
        manifest = {**kept, "counts": counts, "splits": splits, "carved_from": prepared.output_dir}
        storage.write_text(os.path.join(staging, MANIFEST), json.dumps(manifest, indent=2, sort_keys=True))
        return manifest

    return PreparedRecords(output_dir, prepared.spec, counts, storage.commit_staged(output_dir, fill))


@dataclasses.dataclass(frozen=True)
class RecordsValidation:
    """The validation of a user's records, read as a data validation report (`data.validation.ValidationReport`'s
    fields): every record matched the feature spec, or preparation failed naming the first that did not."""

    rows: int
    status: str = "passed"

    @classmethod
    def of(cls, prepared: PreparedRecords) -> "RecordsValidation":
        return cls(int(prepared.manifest["rows"]["total"]))

    def summary(self) -> str:
        return f"passed: all {self.rows} records match the feature spec"

    def to_dict(self) -> Dict[str, Any]:
        return {
            "status": self.status,
            "summary": self.summary(),
            "rows": {"new": self.rows},
            "breaches": [],
            "findings": [],
        }

    def drift(self) -> Dict[str, Any]:
        return {}


def validation_markdown(prepared: PreparedRecords) -> str:
    """The prepare stage's report: every record matched the spec; records per split, the spec, the classes."""
    manifest, spec = prepared.manifest, prepared.spec
    lines = [
        "# Data validation: TFRecords against the feature spec",
        "",
        f"**pass**: all {manifest['rows']['total']} records match the feature spec (checked one by one; nothing "
        "is imputed).",
        "",
        "| split | records |",
        "|---|---:|",
    ]
    lines += [f"| {name} | {count} |" for name, count in sorted(prepared.counts.items())]
    lines += ["", "| feature | role | dtype | shape |", "|---|---|---|---|"]
    roles = {spec.label: "label", spec.key: "key"}
    for feature in spec.features:
        shape = list(feature.shape) + (["var_len"] if feature.var_len else [])
        lines.append(
            f"| {markdown_text(feature.name)} | {roles.get(feature.name, 'input')} | {feature.dtype} | {shape} |"
        )
    classes = manifest["class_counts"]
    if classes:
        names = sorted({c for per in classes.values() for c in per})
        splits = sorted(classes)
        lines += ["", "| label value | " + " | ".join(splits) + " |", "|---" * (len(splits) + 1) + "|"]
        lines += [
            f"| {markdown_text(c)} | " + " | ".join(str(classes[s].get(c, 0)) for s in splits) + " |" for c in names
        ]
    return "\n".join(lines) + "\n"
