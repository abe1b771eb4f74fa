"""Reading a committed prediction output back (`shards` wrote it): its manifest checked against every shard's
rows and sha256 first."""

from __future__ import annotations

import hashlib
import json
from typing import Any, Dict, List

from estimator_lib import storage
from estimator_lib.model.outputs import PredictionError
from estimator_lib.predict.shards import PREDICTIONS_MANIFEST


def verify_output(output_dir: str) -> Dict[str, Any]:
    """Checks a committed prediction output (marker, per-shard rows and sha256); returns its manifest.

    Raises:
      FileNotFoundError: nothing committed at `output_dir`.
      PredictionError: a shard whose bytes or line count differ from its manifest entry.
    """
    if not storage.is_committed(output_dir):
        raise FileNotFoundError(f"{output_dir!r} holds no committed prediction output; run batch prediction")
    manifest = json.loads(storage.read_text(storage.join(output_dir, PREDICTIONS_MANIFEST)))
    for shard in manifest["shards"]:
        data = storage.read_bytes(storage.join(output_dir, shard["file"]))
        if hashlib.sha256(data).hexdigest() != shard["sha256"] or data.count(b"\n") != shard["rows"]:
            raise PredictionError(f"shard {shard['file']} of {output_dir!r} does not match its manifest entry")
    return manifest


def read_predictions(output_dir: str) -> List[Dict[str, Any]]:
    """All rows of a committed output in input order (verified first). For checks and small outputs."""
    manifest = verify_output(output_dir)
    rows: List[Dict[str, Any]] = []
    for shard in manifest["shards"]:
        text = storage.read_text(storage.join(output_dir, shard["file"]))
        rows.extend(json.loads(line) for line in text.splitlines())
    return rows
