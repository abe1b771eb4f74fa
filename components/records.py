"""Stage records: a stage run again on the same inputs reuses its finished outputs instead of redoing them.

Each component keeps `stage.json` in its task directory (the directory holding its output artifacts):

    {"state": "started" | "complete", "inputs": "<sha256 of what the stage was given>",
     "outputs": {artifact name: its metadata}, "layout": N}   # outputs and layout only when complete

`begin` writes a started record before any work; `finish` writes the complete record last, after the outputs
are written and described. On the next run of the same task directory:
  * a complete record of the same inputs, with the outputs still there: `restore` puts the outputs' metadata
    back and the stage does nothing else;
  * a record of other inputs: `begin` deletes what that attempt left in the output directories (checkpoints of
    another dataset or config must never be continued);
  * a started record of the same inputs: the outputs are kept, so training continues from its checkpoint;
  * a complete record of the same inputs whose metadata has another layout (`METADATA_LAYOUTS`: written by a
    version that described its outputs otherwise): treated as started, so the stage runs again on the outputs
    it kept, and a run resumed after an upgrade never passes on metadata this version no longer writes.

`finish` also writes the stage's manifest beside the record (`estimator_lib.manifest`): the input artifacts and
files it read with their content fingerprints, its config (the inputs that are not sources), the versions and
machine it ran on, its outputs' fingerprints, and when it started and ended. A reused stage keeps the manifest
of the run that computed its outputs.

What "the same inputs" means is the stage's to say: its parameters (prepare's include the resolve stage's content
token of its data), the fingerprints of its input artifacts, and what it resolves when it runs (the content
versions of the raw rows batch predict reads, the LATEST version it compares with). A local run resumed into its
run folder reuses the same task directories (`pipelines.local`), which is how it skips what it finished: the KFP
local runner has no cache. On Vertex AI each run's tasks get fresh directories, so a record is
only found there by a retry of the same task (`pipelines.retry`).

A retried task may also get fresh directories of its own. `adopt_interrupted` then looks in the run's directory
(the one holding every task directory of the run: <pipeline root>/<project number>/<pipeline job>/ on Vertex AI,
<pipeline root>/<pipeline>-<run id>/ locally) for a record of the same stage on the same inputs, and copies that
attempt's outputs into its own, so training continues from the interrupted attempt's checkpoint. The
run's directory is this run's alone and the inputs are the content fingerprint: a later run, or this run's stage
on other data or another config, never continues from it.
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

from estimator_lib import fingerprints, manifest, storage

RECORD_FILE = "stage.json"
# TensorFlow's record of a model directory's checkpoints (it names the newest).
CHECKPOINT_STATE_FILE = "checkpoint"
# The train stage's job config, beside the checkpoints: evaluate, batch predict, export and the run's summary read it.
JOB_CONFIG_FILE = "job_config.json"
# Set in the environment by whoever starts the stage: the image it runs in (a digest or commit tag), and on a
# Cloud TPU VM the accelerator type ("v3-8").
IMAGE_ENV = "TPU_PIPELINE_IMAGE"
TPU_TYPE_ENV = "TPU_ACCELERATOR_TYPE"
# Set to "1" by the local runner when its console is a terminal: a stage's progress lines then come every
# `PROGRESS_SECONDS[True]` seconds, for the console's redrawn bar; in logs (Vertex AI, CI) every 10 s.
CONSOLE_TTY_ENV = "TPU_PIPELINE_CONSOLE_TTY"
PROGRESS_SECONDS = {True: 1.0, False: 10.0}
# The directory this package was imported from; a git checkout when it holds pyproject.toml.
PACKAGE_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
STARTED, COMPLETE = "started", "complete"
# Printed by a stage that reused its outputs; the local runner's console shows the stage as reused.
REUSED_MARKER = "[stage reused]"
# Artifacts that live in metadata only (KFP writes no file for them).
_METADATA_ONLY = (Metrics, ClassificationMetrics)
# The layout of what a stage's `components.artifacts.describe_*` records in its outputs' metadata, by stage (1 when
# not listed); bump a stage's when its metadata changes in a way a later stage or a resumed run must not be
# handed the old one. export 2: the signatures' inputs moved into the SavedModel's export_metadata.json (a wide
# model's, 1.1 MB for 4,000 features, could not be passed on the release stage's command line).
METADATA_LAYOUTS = {"export": 2}


def task_dir(uri: str) -> str:
    """The directory holding an output artifact: the task's directory."""
    uri = uri.rstrip("/")
    return posixpath.dirname(uri) if storage.is_gcs(uri) else os.path.dirname(os.path.abspath(uri))


def file_versions(patterns: Sequence[str]) -> dict[str, list[list[str]]]:
    """{pattern: [[file, content version], ...]} for local or gs:// files and globs (directories left out): what a
    stage read, by content (`fingerprints.content_version`: a local file's sha256, never its size and mtime, which
    `cp -p` or `rsync -t` keep across an edit)."""
    files = {p: [f for f in storage.glob(p) if storage.is_gcs(f) or os.path.isfile(f)] for p in patterns}
    return {p: [[f, fingerprints.content_version(f)] for f in matched] for p, matched in files.items()}


def environment(tpu: Mapping[str, Any]) -> dict[str, Any]:
    """The versions (with the commit of a checkout, or the image) and the machine a stage runs with."""
    checkout = os.path.exists(os.path.join(PACKAGE_DIR, "pyproject.toml"))
    commit = manifest.git_commit(PACKAGE_DIR) if checkout else None
    modified = manifest.git_modified(PACKAGE_DIR) if commit else None
    return {
        "versions": manifest.versions(commit, modified, os.environ.get(IMAGE_ENV) or None),
        "machine": manifest.machine(tpu, os.environ.get(TPU_TYPE_ENV) or None, kernel_settings()),
    }


def kernel_settings() -> dict[str, str]:
    """The environment variables that choose TensorFlow's CPU kernels (`manifest.KERNEL_SETTINGS`) that are set."""
    return {name: os.environ[name] for name in manifest.KERNEL_SETTINGS if name in os.environ}


def manifest_uri(output_uri: str) -> str:
    """The manifest of the stage that wrote the output at `output_uri` (in the output's task directory)."""
    return manifest.manifest_path(task_dir(output_uri))


def _parent(uri: str) -> str:
    return posixpath.dirname(uri.rstrip("/")) if storage.is_gcs(uri) else os.path.dirname(uri.rstrip(os.sep))


def _basename(uri: str) -> str:
    return posixpath.basename(uri.rstrip("/"))


def copy_tree(source: str, destination: str) -> list[str]:
    """Copies every file under `source` (local or gs://) to the same relative path under `destination`; returns
    the copied files' relative paths. TensorFlow's `checkpoint` state files are copied last: until then no state
    file names a checkpoint whose files are not all there."""
    prefix = source.rstrip("/") + "/"
    relative = [f[len(prefix) :] for f in storage.list_files(source) if f.startswith(prefix)]
    relative.sort(key=lambda name: (_basename(name) == CHECKPOINT_STATE_FILE, name))
    for name in relative:
        storage.write_bytes(storage.join(destination, name), storage.read_bytes(prefix + name))
    return relative


def _now() -> str:
    return datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")


def fingerprint_of(artifact: Artifact) -> str:
    """An input artifact's content fingerprint, as the stage that wrote it described it."""
    return str(artifact.metadata.get("fingerprint", artifact.uri))


def files_source(patterns: Sequence[str]) -> dict[str, Any]:
    """A source of files or globs for a manifest: the patterns, the files they match and their
    `fingerprint_contents` (paths left out: the same bytes elsewhere have the same fingerprint)."""
    matches = {f for p in patterns for f in storage.glob(p)}
    files = [f for f in matches if storage.is_gcs(f) or os.path.isfile(f)]
    return {"uri": list(patterns), "files": len(files), "fingerprint": fingerprints.fingerprint_contents(files)}


def _source(source: Artifact | Mapping[str, Any]) -> dict[str, Any]:
    if isinstance(source, Artifact):
        return {"uri": source.uri, "fingerprint": fingerprint_of(source)}
    return dict(source)


def _output(artifact: Artifact) -> dict[str, Any]:
    """An output's URI and fingerprint; an artifact that lives in metadata only is fingerprinted by it."""
    fingerprint = artifact.metadata.get("fingerprint") or fingerprints.json_digest(dict(artifact.metadata))
    return {"uri": artifact.uri, "fingerprint": fingerprint}


class StageRecord:
    """The record of one stage run in the directory of its `outputs`, for the inputs it was given.

    Args:
      stage: the stage's name.
      outputs: its output artifacts {name: artifact}.
      inputs: everything that decides its outputs (parameters, resolved configs, input fingerprints).
      sources: the input artifacts (or {"uri", "fingerprint"} of files) among `inputs`, by the same names; the
        other inputs are the manifest's config. A stage with a "job" input runs where its "tpu" section says.
    """

    def __init__(
        self,
        stage: str,
        outputs: Mapping[str, Artifact],
        inputs: Mapping[str, Any],
        sources: Mapping[str, Artifact | Mapping[str, Any]] | None = None,
    ):
        self.stage = stage
        self.outputs = dict(outputs)
        text = json.dumps(inputs, sort_keys=True, separators=(",", ":"), default=str)
        self.inputs = hashlib.sha256(text.encode("utf-8")).hexdigest()
        self.task_dir = task_dir(next(iter(self.outputs.values())).uri)
        self.layout = METADATA_LAYOUTS.get(stage, 1)
        self.path = storage.join(self.task_dir, RECORD_FILE)
        self._given = dict(inputs)
        self._sources = {name: _source(s) for name, s in (sources or {}).items()}
        self._started = _now()

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
        if record.get("layout", 1) != self.layout:
            print(f"{self.stage}: its outputs were described by another version; running it again", flush=True)
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
        self._started = _now()
        self._write({"state": STARTED, "stage": self.stage, "inputs": self.inputs, "started_at": self._started})

    def adopt_interrupted(self) -> str | None:
        """When this task directory has no record yet, copies into its outputs what the newest attempt of this
        stage on the same inputs, in another task directory of the same run, left in its outputs (a retry given
        fresh directories then continues that attempt's training; an attempt that finished, in a task that failed
        after it, leaves nothing to train). Call it before `begin`.

        Returns:
          The task directory adopted from; None when there was none to adopt (or this directory has a record).
        """
        if self._read() is not None:
            return None
        attempts = self._attempts_in_run()
        if not attempts:
            return None
        source = attempts[-1]
        for artifact in self._files():
            copy_tree(storage.join(source, _basename(artifact.uri)), artifact.uri)
        print(f"{self.stage}: continuing the interrupted attempt in {source}", flush=True)
        return source

    def _attempts_in_run(self) -> list[str]:
        """Task directories of this run holding a record of this stage on these inputs, oldest first."""
        run_dir = _parent(self.task_dir)
        found = []
        for path in storage.glob(storage.join(run_dir, "*", RECORD_FILE)):
            if path == self.path:
                continue
            try:
                record = json.loads(storage.read_text(path))
            except (FileNotFoundError, ValueError):  # gone since the listing, or cut short by the interruption
                continue
            if (record.get("stage"), record.get("inputs")) == (self.stage, self.inputs):
                found.append((str(record.get("started_at", "")), _parent(path)))
        return [task for _, task in sorted(found)]

    def finish(self, sources: Mapping[str, Artifact | Mapping[str, Any]] | None = None) -> None:
        """Writes the stage's manifest, then records, last, that the outputs are complete, with their metadata.

        Args:
          sources: inputs known only once the stage ran (the data files prepare read, with their sha256).
        """
        self._sources.update({name: _source(s) for name, s in (sources or {}).items()})
        outputs = {name: dict(a.metadata) for name, a in self.outputs.items()}
        finished = _now()
        self.write_manifest(finished)
        self._write(
            {
                "state": COMPLETE,
                "stage": self.stage,
                "inputs": self.inputs,
                "outputs": outputs,
                "layout": self.layout,
                "started_at": self._started,
                "finished_at": finished,
            }
        )

    def write_manifest(self, ended: str) -> str:
        """Writes the stage's manifest (`estimator_lib.manifest`) into its task directory; returns its URI."""
        config = {k: v for k, v in self._given.items() if k not in self._sources}
        tpu = self._given.get("job", {}).get("tpu", {}) if isinstance(self._given.get("job"), Mapping) else {}
        outputs = {name: _output(a) for name, a in self.outputs.items()}
        record = manifest.stage_manifest(
            self.stage, self._sources, config, outputs, environment(tpu), self._started, ended
        )
        return manifest.write_manifest(self.task_dir, record)

    def _write(self, record: Mapping[str, Any]) -> None:
        storage.write_text(self.path, json.dumps(record, indent=2, sort_keys=True, default=str) + "\n")
