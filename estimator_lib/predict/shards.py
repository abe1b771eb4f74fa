"""A prediction output on disk: sharded, checksummed JSON Lines, published atomically, on the host CPU.

`output_dir/predictions-SSSSS-of-NNNNN.jsonl` hold consecutive ranges of the input (reading the shards in
name order gives input order) and `manifest.json` the row count, per-shard rows, bytes and sha256, the fields
and where the rows came from. Everything is written to a staging directory and published with
`storage.commit_staged`, so `output_dir` is either absent, a previous complete output, or this complete output
(`storage.is_committed`), locally and on gs://.
"""

from __future__ import annotations

import bisect
import dataclasses
import hashlib
import itertools
import json
import os
from typing import Any, Callable, Dict, Iterator, List, Mapping, Optional, Sequence, Tuple

from estimator_lib import storage
from estimator_lib.model.outputs import PredictionError
from estimator_lib.predict.jsonl import RowFormatter
from estimator_lib.predict.predicted import PredictionCounter
from estimator_lib.predict.rows import Batch, HostRows, slice_rows
from estimator_lib.progress import RowProgress
from estimator_lib.schema import KEY_FEATURE

PREDICTIONS_MANIFEST = "manifest.json"
# Rows formatted at a time: formatting holds the GIL and hashing each piece releases it, so pieces this small
# keep the estimator's thread from waiting long to start its next step.
FORMAT_ROWS = 1024
ShardEntry = Dict[str, Any]  # {"file": name, "rows": int, "bytes": int, "sha256": hex digest}


@dataclasses.dataclass(frozen=True)
class PredictResult:
    """A committed prediction output.

    Attributes:
      output_dir: where the JSONL shards and manifest.json were committed.
      count: rows written (one per input row; padding excluded).
      shards: shard file URIs, in input order.
      manifest: what manifest.json holds: "count", "shards" [{"file", "rows", "bytes", "sha256"}], "fields",
        "source" (checkpoint or SavedModel), "inputs".
    """

    output_dir: str
    count: int
    shards: Tuple[str, ...]
    manifest: Dict[str, Any]


def shard_name(index: int, num_shards: int) -> str:
    """The file name of shard `index` of `num_shards` (both in the name, so shards sort in row order)."""
    return f"predictions-{index:05d}-of-{num_shards:05d}.jsonl"


def shard_sizes(count: int, num_shards: int) -> List[int]:
    """Rows per shard: consecutive ranges whose sizes differ by at most one."""
    base, extra = divmod(count, num_shards)
    return [base + (1 if i < extra else 0) for i in range(num_shards)]


def check_num_shards(num_shards: int) -> None:
    """Raises ValueError unless `num_shards` is a positive integer."""
    if not isinstance(num_shards, int) or isinstance(num_shards, bool) or num_shards < 1:
        raise ValueError(f"num_shards={num_shards!r} must be a positive integer, e.g. 1")


class ShardWriter:
    """Writes `count` rows into `num_shards` files of consecutive rows (sizes differ by at most one).

    Attributes:
      sizes: rows per shard (`shard_sizes`).
      ends: each shard's end row (exclusive), cumulative.
      shards: the manifest entries of the shards closed so far.
    """

    def __init__(self, directory: str, count: int, num_shards: int):
        self._directory = directory
        self._num_shards = num_shards
        self.sizes = shard_sizes(count, num_shards)
        self.ends = list(itertools.accumulate(self.sizes))
        self._shard = -1
        self._left = 0
        self._file = None
        self._hash = hashlib.sha256()
        self._bytes = 0
        self.shards: List[ShardEntry] = []
        self._next_shard()

    def _next_shard(self) -> None:
        if self._file is not None:
            self._file.close()
            self.shards.append(
                {
                    "file": shard_name(self._shard, self._num_shards),
                    "rows": self.sizes[self._shard],
                    "bytes": self._bytes,
                    "sha256": self._hash.hexdigest(),
                }
            )
        self._shard += 1
        if self._shard < self._num_shards:
            path = os.path.join(self._directory, shard_name(self._shard, self._num_shards))
            self._file = open(path, "wb", buffering=1 << 20)
            self._hash, self._bytes, self._left = hashlib.sha256(), 0, self.sizes[self._shard]
        else:
            self._file = None

    def rows_until_next_shard(self) -> int:
        """Rows the current shard still takes, moving on past full shards first."""
        while self._file is not None and self._left == 0:
            self._next_shard()
        return self._left

    def write(self, data: bytes, rows: int) -> None:
        """Appends `rows` formatted rows to the current shard."""
        self._file.write(data)
        self._hash.update(data)
        self._bytes += len(data)
        self._left -= rows

    def close(self) -> List[ShardEntry]:
        """Closes the last shards (empty ones are written empty); returns every shard's manifest entry.

        Raises:
          PredictionError: a shard that did not get its planned rows.
        """
        while self._file is not None:
            if self._left:
                raise PredictionError(f"shard {self._shard} is {self._left} row(s) short of its planned size")
            self._next_shard()
        return self.shards


def formatted_pieces(
    host: HostRows, outputs: Batch, formatter: RowFormatter, first_row: int, ends: Sequence[int]
) -> Iterator[Tuple[int, int, bytes]]:
    """(shard, rows, JSON Lines bytes) pieces of one joined batch whose first row is input row `first_row`:
    cut at the shards' ends (`ends`, cumulative, exclusive) and every `FORMAT_ROWS` rows. The bytes do not
    depend on where a batch is cut, so any batching of the rows gives the same shards."""
    start, n = 0, len(host[KEY_FEATURE])
    while start < n:
        row = first_row + start
        shard = bisect.bisect_right(ends, row)
        if shard >= len(ends):
            raise PredictionError(f"more rows than the {ends[-1] if ends else 0} planned ones arrived")
        end = start + min(n - start, ends[shard] - row, FORMAT_ROWS)
        yield shard, end - start, formatter.format(slice_rows(host, start, end), slice_rows(outputs, start, end), row)
        start = end


def write_rows(
    joined: Iterator[Tuple[HostRows, Batch]],
    formatter: RowFormatter,
    writer: ShardWriter,
    counter: Optional[PredictionCounter] = None,
) -> int:
    """Formats and writes joined (host rows, outputs) batches, splitting them at shard boundaries, and counts
    their predictions into `counter` (None: not counted); returns the rows written."""
    written, progress = 0, RowProgress("batch predict", total=sum(writer.sizes))
    for host, outputs in joined:
        if counter is not None:
            counter.add(outputs)
        for _, rows, data in formatted_pieces(host, outputs, formatter, written, writer.ends):
            writer.rows_until_next_shard()  # moves on to the piece's shard
            writer.write(data, rows)
            written += rows
            progress.update(rows)
    progress.finish()
    return written


def commit_rows(
    joined: Iterator[Tuple[HostRows, Batch]],
    formatter: RowFormatter,
    count: int,
    output_dir: str,
    num_shards: int,
    provenance: Dict[str, Any],
    counter: Optional[PredictionCounter] = None,
    finish: Optional[Callable[[str], None]] = None,
) -> PredictResult:
    """Writes joined (host rows, outputs) batches of `count` rows in all into a staging directory, then
    publishes it as `output_dir` in one commit (`publish`); `provenance` adds entries to the manifest; the
    predictions are counted into `counter`; `finish` as for `publish`.

    Raises:
      PredictionError: a row count other than `count`; nothing is published.
    """

    def write_shards(staging: str) -> List[ShardEntry]:
        writer = ShardWriter(staging, count, num_shards)
        written = write_rows(joined, formatter, writer, counter)
        shards = writer.close()
        if written != count:
            raise PredictionError(f"wrote {written} rows for {count} input rows")
        return shards

    return publish(write_shards, formatter.fields, output_dir, num_shards, provenance, finish=finish)


def publish(
    write_shards: Callable[[str], List[ShardEntry]],
    fields: Sequence[str],
    output_dir: str,
    num_shards: int,
    provenance: Dict[str, Any],
    elsewhere: Optional[Mapping[str, str]] = None,
    finish: Optional[Callable[[str], None]] = None,
) -> PredictResult:
    """Publishes a prediction output in one commit: `write_shards(staging)` writes the shards into a local
    staging directory (or leaves them where `elsewhere` says: {file name: path or gs:// URI}, filled by the
    time it returns) and returns their manifest entries ({"file", "rows", "bytes", "sha256"}, in order); the
    manifest is written beside them. `finish(staging)` then runs before the commit: it may add files (the skew
    check's skew.json), or raise, and nothing is published."""

    def fill(staging: str) -> Dict[str, Any]:
        shards = write_shards(staging)
        count = sum(s["rows"] for s in shards)
        manifest = dict(provenance, format="jsonl", count=count, num_shards=num_shards, shards=shards)
        manifest["fields"] = list(fields)
        storage.write_text(os.path.join(staging, PREDICTIONS_MANIFEST), json.dumps(manifest, indent=2, sort_keys=True))
        if finish is not None:
            finish(staging)
        return manifest

    manifest = storage.commit_staged(output_dir, fill, elsewhere)
    if not storage.is_committed(output_dir):
        raise PredictionError(f"published {output_dir!r} but its commit marker is missing")
    uris = tuple(storage.join(output_dir, s["file"]) for s in manifest["shards"])
    return PredictResult(output_dir, manifest["count"], uris, manifest)
