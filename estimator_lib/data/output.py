"""Writing preparation's outputs into the staging directory: TFRecord shards, the quarantine file, the
fingerprints and the manifest. (Shards that Beam workers wrote stay where they are until the commit; their
fingerprints come from their writers: `output_fingerprints`' `elsewhere`.)

Layout (relative to the output directory):
  train/part-00000-of-00002.tfrecord ...   eval/...   valid/... (when valid_fraction > 0)   test/... (when
  test_fraction > 0)
  schema.json  manifest.json  quarantine.jsonl (only when rows were quarantined)  unlabelled.jsonl (only when
  rows had no label)
A row's shard comes from its key hash (`shard_of`), and each shard holds its rows in input order (file, then
line): where a row goes depends on the row alone, so workers can write shards without knowing the global order,
and a shard's bytes depend only on the input. Nothing fingerprinted holds a time stamp or a local path.
"""

from __future__ import annotations

import json
import os
from typing import Any, Dict, List, Optional, Sequence

import numpy as np

from estimator_lib import fingerprints

MANIFEST = "manifest.json"
SCHEMA = "schema.json"
QUARANTINE = "quarantine.jsonl"
UNLABELLED = "unlabelled.jsonl"


def shard_of(key_hashes: np.ndarray, num_shards: int) -> np.ndarray:
    """The shard (int64 in [0, num_shards)) of rows with these uint64 key hashes: the low 32 bits scaled to
    the shard count. The split comes from the high bits (`common.split_index`), so shards of every split are
    balanced."""
    low = np.asarray(key_hashes, dtype=np.uint64) & np.uint64(0xFFFFFFFF)
    return ((low * np.uint64(num_shards)) >> np.uint64(32)).astype(np.int64)


def shard_name(split: str, shard: int, num_shards: int) -> str:
    return f"{split}/part-{shard:05d}-of-{num_shards:05d}.tfrecord"


class ShardWriters:
    """TFRecord shards for each split, a row's shard from its key hash (a host-side, local-disk step). Records
    arrive framed (`tfrecord.frame`) in input order, so each chunk's records for one shard are one file write."""

    def __init__(self, staging: str, splits: Sequence[str], num_shards: int):
        self.names = {s: [shard_name(s, i, num_shards) for i in range(num_shards)] for s in splits}
        for split in splits:
            os.makedirs(os.path.join(staging, split), exist_ok=True)
        self._files = {s: [open(os.path.join(staging, n), "wb") for n in names] for s, names in self.names.items()}
        self.records = {name: 0 for names in self.names.values() for name in names}
        # Shards stored outside staging (none here; `data.beam.WorkerShards` has them): {name: where it is},
        # and {name: {sha256, bytes}} for the manifest.
        self.elsewhere: Dict[str, str] = {}
        self.fingerprints: Dict[str, Dict[str, Any]] = {}

    def write(self, split: str, framed: List[bytes], key_hashes: np.ndarray) -> None:
        """Appends `framed` records (in input order) to their shards, `key_hashes[i]` being record i's."""
        files, names = self._files[split], self.names[split]
        shards = shard_of(key_hashes, len(files))
        for k in np.unique(shards).tolist():
            mine = np.flatnonzero(shards == k).tolist()
            files[k].write(b"".join(framed[i] for i in mine))
            self.records[names[k]] += len(mine)

    def close(self) -> None:
        for files in self._files.values():
            for f in files:
                f.close()


class ConsecutiveShards:
    """TFRecord shards holding consecutive ranges of rows, for scoring: reading the shards in name order gives
    input order (batch prediction reads files in sorted order). Shard sizes follow the planned row count, so
    they differ by at most one plus the bad rows set aside (a host-side, local-disk step). Records arrive
    framed (`tfrecord.frame`).

    Same interface as `ShardWriters` with one split; a row for any other split is a bug and fails.
    """

    def __init__(self, staging: str, split: str, num_shards: int, planned_rows: int):
        self.split = split
        self.names = [scoring_shard_name(i, num_shards) for i in range(num_shards)]
        self._files = [open(os.path.join(staging, n), "wb") for n in self.names]
        self._planned = max(planned_rows, 1)
        self.records = {name: 0 for name in self.names}
        self._written = 0

    def write(self, split: str, framed: List[bytes], key_hashes: Any = None) -> None:
        """Appends `framed` records in input order (`key_hashes`, for `ShardWriters`' interface, is unused)."""
        if split != self.split:
            raise AssertionError(f"scoring rows must all land in split {self.split!r}, got one for {split!r}")
        shards = len(self._files)
        for record in framed:
            shard = min(self._written * shards // self._planned, shards - 1)
            self._files[shard].write(record)
            self.records[self.names[shard]] += 1
            self._written += 1

    def close(self) -> None:
        for f in self._files:
            f.close()


def scoring_shard_name(shard: int, num_shards: int) -> str:
    return f"part-{shard:05d}-of-{num_shards:05d}.tfrecord"


class JsonLinesWriter:
    """A JSON Lines file in the staging directory, created at its first row: `QUARANTINE` (a bad row per line
    with file, line, column, value, reason and the raw row) or `UNLABELLED` (an unlabelled row's raw cells per
    line, {column: text}, which scoring reads as it is)."""

    def __init__(self, staging: str, name: str):
        self.path = os.path.join(staging, name)
        self._file = None

    def write(self, bad: Dict[str, Any]) -> None:
        if self._file is None:
            self._file = open(self.path, "w", encoding="utf-8", newline="\n")
        self._file.write(json.dumps(bad, ensure_ascii=False, sort_keys=True) + "\n")

    def close(self) -> None:
        if self._file is not None:
            self._file.close()


def output_fingerprints(
    staging: str, records: Dict[str, int], elsewhere: Optional[Dict[str, Dict[str, Any]]] = None
) -> Dict[str, Dict[str, Any]]:
    """{relative path: {sha256, bytes[, records]}} of every output file written so far: those in `staging`,
    read here, and those stored elsewhere (workers' shards) from `elsewhere`'s {relative path: {sha256, bytes}},
    which their writers computed (never read again here)."""
    out: Dict[str, Dict[str, Any]] = {}
    for rel, known in (elsewhere or {}).items():
        out[rel] = {"sha256": known["sha256"], "bytes": known["bytes"]}
        if rel in records:
            out[rel]["records"] = records[rel]
    for root, _, files in os.walk(staging):
        for name in files:
            path = os.path.join(root, name)
            rel = os.path.relpath(path, staging).replace(os.sep, "/")
            entry: Dict[str, Any] = {"sha256": fingerprints.file_sha256(path), "bytes": os.path.getsize(path)}
            if rel in records:
                entry["records"] = records[rel]
            out[rel] = entry
    return dict(sorted(out.items()))


def write_json(path: str, value: Any) -> None:
    with open(path, "w", encoding="utf-8", newline="\n") as f:
        f.write(json.dumps(value, indent=2, sort_keys=True, ensure_ascii=False) + "\n")
