"""Stage records: a stage run again on the same inputs reuses its finished outputs instead of redoing them.

Each component keeps `stage.json` in its task directory (the directory holding its output artifacts):

    {"state": "started" | "complete", "inputs": "<sha256 of what the stage was given>",
     "outputs": {artifact name: its metadata}}           # outputs only when complete

`begin` writes a started record before any work; `finish` writes the complete record last, after the outputs
are written and described. On the next run of the same task directory:
  * a complete record of the same inputs, with the outputs still there: `restore` puts the outputs' metadata
    back and the stage does nothing else;
  * a record of other inputs: `begin` deletes what that attempt left in the output directories (checkpoints of
    another dataset or config must never be continued);
  * a started record of the same inputs: the outputs are kept, so training continues from its checkpoint.

What "the same inputs" means is the stage's to say: its parameters, the fingerprints of its input artifacts,
and what it resolves when it runs (the data files' versions, the LATEST version it compares with). A local run
resumed into its run folder reuses the same task directories (`pipelines.local`), which is how it skips what it
finished: the KFP local runner has no cache. On Vertex AI each run's tasks get fresh directories, so a record is
only found there by a retry of the same task.
"""

from __future__ import annotations

import datetime
import hashlib
import json
import os
import posixpath
from collections.abc import Mapping, Sequence
from typing import Any

from kfp.dsl import Artifact, ClassificationMetrics, Metrics

from estimator_lib import storage

RECORD_FILE = "stage.json"
STARTED, COMPLETE = "started", "complete"
# Printed by a stage that reused its outputs; the local runner's console shows the stage as reused.
REUSED_MARKER = "[stage reused]"
# Artifacts that live in metadata only (KFP writes no file for them).
_METADATA_ONLY = (Metrics, ClassificationMetrics)


def task_dir(uri: str) -> str:
    """The directory holding an output artifact: the task's directory."""
    uri = uri.rstrip("/")
    return posixpath.dirname(uri) if storage.is_gcs(uri) else os.path.dirname(os.path.abspath(uri))


def file_versions(patterns: Sequence[str]) -> dict[str, list[list[str]]]:
    """{pattern: [[file, version], ...]} for local or gs:// files and globs: what a stage read, cheaply."""
    return {p: [[f, storage.file_version(f)] for f in storage.glob(p)] for p in patterns}


def fingerprint_of(artifact: Artifact) -> str:
    """An input artifact's content fingerprint, as the stage that wrote it described it."""
    return str(artifact.metadata.get("fingerprint", artifact.uri))


class StageRecord:
    """The record of one stage run in the directory of its `outputs`, for the inputs it was given."""

    def __init__(self, stage: str, outputs: Mapping[str, Artifact], inputs: Mapping[str, Any]):
        self.stage = stage
        self.outputs = dict(outputs)
        text = json.dumps(inputs, sort_keys=True, separators=(",", ":"), default=str)
        self.inputs = hashlib.sha256(text.encode("utf-8")).hexdigest()
        self.path = storage.join(task_dir(next(iter(self.outputs.values())).uri), RECORD_FILE)

    def _read(self) -> dict[str, Any] | None:
        try:
            return json.loads(storage.read_text(self.path))
        except FileNotFoundError:
            return None

    def _files(self) -> list[Artifact]:
        return [a for a in self.outputs.values() if not isinstance(a, _METADATA_ONLY)]

    def restore(self) -> bool:
        """True when this stage already finished on the same inputs and its outputs are still there; their
        metadata is then restored and the stage has nothing left to do."""
        record = self._read()
        if not record or record.get("state") != COMPLETE or record.get("inputs") != self.inputs:
            return False
        if not all(storage.exists(a.uri) for a in self._files()):
            return False
        for name, artifact in self.outputs.items():
            artifact.metadata.update(record["outputs"][name])
        print(f"{REUSED_MARKER} {self.stage}: inputs unchanged since {record.get('finished_at', '?')}", flush=True)
        return True

    def begin(self) -> None:
        """Records that the stage started on these inputs. Outputs an attempt on other inputs left behind are
        deleted first; those of an attempt on the same inputs are kept (training resumes from them)."""
        record = self._read()
        if record is not None and record.get("inputs") != self.inputs:
            for artifact in self._files():
                storage.delete_tree(artifact.uri)
        self._write({"state": STARTED, "stage": self.stage, "inputs": self.inputs})

    def finish(self) -> None:
        """Records, last, that the outputs are complete, with their metadata."""
        outputs = {name: dict(a.metadata) for name, a in self.outputs.items()}
        finished = datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")
        self._write(
            {"state": COMPLETE, "stage": self.stage, "inputs": self.inputs, "outputs": outputs, "finished_at": finished}
        )

    def _write(self, record: Mapping[str, Any]) -> None:
        storage.write_text(self.path, json.dumps(record, indent=2, sort_keys=True, default=str) + "\n")
