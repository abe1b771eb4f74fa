"""What one pipeline run is given, beyond the job config: the data it prepares and what it batch-predicts.

TensorFlow-free, so the CLI can check a run's arguments before anything starts.
"""

from __future__ import annotations

import posixpath

from estimator_lib.config.base import ConfigError

EMBEDDED_DATA = "embedded:penguins"
PREPARED_SPLITS = ("train", "eval", "test", "valid")
RAW_EXTENSIONS = (".csv", ".jsonl", ".json", ".ndjson")  # each may end in .gz (gzip-compressed)
GZIP = ".gz"
TFRECORD_EXTENSIONS = (".tfrecord", ".tfrecords")
SPLIT, TFRECORD, RAW, DIRECTORY = "split", "tfrecord", "raw", "directory"


def prediction_kind(data: str) -> str:
    """What `data` names, from its text alone (no I/O, so the CLI can check it before submitting):
    SPLIT ("eval", "train", "test", "valid"), RAW (.csv, .jsonl, .json, .ndjson, each optionally .gz), TFRECORD (.tfrecord, .tfrecords) or
    DIRECTORY (a trailing "/" or no extension: a directory of TFRecords, checked when the stage runs)."""
    if data in PREPARED_SPLITS:
        return SPLIT
    if data.endswith("/"):
        return DIRECTORY
    name = posixpath.basename(data).lower()
    ext = posixpath.splitext(name)[1]
    if ext == GZIP and posixpath.splitext(name[: -len(GZIP)])[1] in RAW_EXTENSIONS:
        return RAW
    if ext in RAW_EXTENSIONS:
        return RAW
    if ext in TFRECORD_EXTENSIONS:
        return TFRECORD
    if not ext:
        return DIRECTORY
    raise ConfigError(
        f"predict_data={data!r}: cannot tell what {ext!r} files hold; use a prepared split {PREPARED_SPLITS}, "
        f"CSV / JSON Lines rows ({', '.join(RAW_EXTENSIONS)}), or prepared TFRecords "
        f"({', '.join(TFRECORD_EXTENSIONS)}, or a directory of them); rename the files to match their format"
    )
