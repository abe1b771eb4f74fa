"""Versioned publishing of exported SavedModels under a root, with an atomically updated LATEST pointer.

Layout of a publish root (a local directory or a gs:// prefix):

    ROOT/versions/20250101T120000Z-3f2a9c1b0d4e/   a complete copy of one exported SavedModel, plus
                                                   publish.json and the _COMMITTED marker (written last)
    ROOT/LATEST                                    JSON: {"version", "uri", "published_at", "fingerprint", ...}

A version directory is published all or nothing (`storage.commit_directory`: a rename locally, a commit
marker last on Cloud Storage) and never changed afterwards. The pointer is one small file replaced in one step
(a rename locally, a single object upload on Cloud Storage), so a reader sees the old or the new version, never
a mix. The pointer moves by compare-and-swap (`storage.replace_if_unchanged`: an object generation precondition
on Cloud Storage, a lock and an atomic rename locally): a run whose view of LATEST is stale fails with
`PublishConflictError` instead of overwriting another run's publish, and its own version is removed.

`export_verified` and `release` are the pipeline's export and release stages: exporting never publishes; the
release stage, last in the pipeline, publishes a blessed model against the LATEST its evaluation saw
(`latest_version`). `resolve_model` turns what users pass as a baseline or warm-start source ("none",
"latest", a publish root or a SavedModel directory) into a SavedModel directory. Nothing here reads flags or
the environment.
"""

from __future__ import annotations

import dataclasses
import datetime
import hashlib
import json
import os
from typing import Any, Dict, Iterable, Mapping, Optional

from estimator_lib import storage, strict
from estimator_lib.config import JobConfig
from estimator_lib.config.run import LATEST_MODEL, NO_MODEL
from estimator_lib.evaluation import Blessing
from estimator_lib.export import ExportResult, export_model
from estimator_lib.schema import Schema

POINTER = "LATEST"
VERSIONS = "versions"
RECORD = "publish.json"


class PublishConflictError(RuntimeError):
    """LATEST moved after this run looked at it: another run published in between."""


@dataclasses.dataclass(frozen=True)
class PublishedModel:
    """One published version.

    Attributes:
      root: the publish root.
      version: the version name (UTC time of publishing, then the first 12 hex digits of the fingerprint).
      uri: the version's SavedModel directory.
      fingerprint: sha256 over the SavedModel's files (relative paths and contents).
      published_at: ISO 8601 UTC time.
      metadata: what the publisher recorded (metrics, blessing, training config, source run).
    """

    root: str
    version: str
    uri: str
    fingerprint: str
    published_at: str
    metadata: Mapping[str, Any] = dataclasses.field(default_factory=dict)

    def to_dict(self) -> Dict[str, Any]:
        return {**dataclasses.asdict(self), "metadata": dict(self.metadata)}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> "PublishedModel":
        return cls(**{f.name: data[f.name] for f in dataclasses.fields(cls) if f.name in data})


# -- fingerprints --------------------------------------------------------------------------------------------
def _relative(path: str, directory: str) -> str:
    return path[len(directory.rstrip("/")) + 1 :].replace(os.sep, "/")


def fingerprint_files(files: Iterable[str], base: str) -> str:
    """sha256 over (path relative to `base`, sha256 of contents) of `files`, in sorted order."""
    digest = hashlib.sha256()
    for path in sorted(files):
        content = hashlib.sha256(storage.read_bytes(path)).hexdigest()
        digest.update(f"{_relative(path, base)}\0{content}\n".encode())
    return digest.hexdigest()


BOOKKEEPING = (storage.COMMIT_MARKER, RECORD)


def fingerprint(directory: str) -> str:
    """Content hash of every file under a local or gs:// directory, bookkeeping files (the commit marker and
    publish.json) excluded: a published version has the fingerprint of the export it copies.

    Equal for two directories exactly when they hold the same files with the same bytes.
    """
    files = [f for f in storage.list_files(directory) if os.path.basename(f) not in BOOKKEEPING]
    if not files:
        raise FileNotFoundError(f"{directory!r} holds no file to fingerprint")
    return fingerprint_files(files, directory)


# -- publishing ----------------------------------------------------------------------------------------------
def _is_saved_model(directory: str) -> bool:
    return storage.exists(storage.join(directory, "saved_model.pb"))


def _copy_tree(source: str, staging: str) -> None:
    for path in storage.list_files(source):
        relative = _relative(path, source)
        if os.path.basename(relative) == storage.COMMIT_MARKER:
            continue
        local = os.path.join(staging, *relative.split("/"))
        os.makedirs(os.path.dirname(local), exist_ok=True)
        storage.download_file(path, local)


def publish_model(
    export_dir: str,
    root: str,
    metadata: Optional[Mapping[str, Any]] = None,
    now: Optional[datetime.datetime] = None,
    based_on: Optional[str] = None,
) -> PublishedModel:
    """Copies an exported SavedModel to a new version under `root`, then points ROOT/LATEST at it.

    Args:
      export_dir: a SavedModel directory (local or gs://).
      root: the publish root (local or gs://).
      metadata: JSON-serialisable facts to record with the version (metrics, blessing, config).
      now: the publishing time (UTC); the current time by default.
      based_on: the LATEST version the caller's decision was based on (its blessing compared against it), or
        "none" when nothing was published then; None checks only that LATEST does not move during this call.

    Returns:
      The new `PublishedModel`.

    Raises:
      FileNotFoundError: `export_dir` is not a SavedModel directory.
      PublishConflictError: LATEST is no longer `based_on`, or moved while this version was copied; nothing
        is published then.
    """
    pointer = storage.join(root, POINTER)
    current, token = storage.read_versioned(pointer)
    _check_based_on(pointer, current, based_on)
    if not _is_saved_model(export_dir):
        raise FileNotFoundError(f"{export_dir!r} is not a SavedModel directory (no saved_model.pb); export first")
    now = now or datetime.datetime.now(datetime.timezone.utc)
    digest = fingerprint(export_dir)
    version = f"{now.strftime('%Y%m%dT%H%M%S%fZ')}-{digest[:12]}"
    destination = storage.join(root, VERSIONS, version)
    model = PublishedModel(root, version, destination, digest, now.isoformat(), dict(metadata or {}))
    record = json.dumps(model.to_dict(), indent=2, sort_keys=True)  # kept with the version and in the pointer

    def fill(staging: str) -> None:
        _copy_tree(export_dir, staging)
        with open(os.path.join(staging, RECORD), "w", encoding="utf-8") as f:
            f.write(record)

    storage.commit_staged(destination, fill)
    try:
        storage.replace_if_unchanged(pointer, record, token)
    except storage.ConcurrentUpdateError:
        storage.delete_tree(destination)
        now_current, _ = storage.read_versioned(pointer)
        raise PublishConflictError(
            f"{pointer} moved while {version} was being published (now: {_version_of(now_current)}); "
            "this model was not published: rerun to evaluate against the new LATEST"
        ) from None
    return model


def _version_of(pointer_text: Optional[str]) -> str:
    return json.loads(pointer_text)["version"] if pointer_text else NO_MODEL


def _check_based_on(pointer: str, current: Optional[str], based_on: Optional[str]) -> None:
    if based_on is None or _version_of(current) == based_on:
        return
    raise PublishConflictError(
        f"{pointer} names {_version_of(current)!r}, but this run was evaluated against {based_on!r}: another run "
        "published in between; this model was not published: rerun to evaluate against the new LATEST"
    )


def latest(root: str) -> Optional[PublishedModel]:
    """The version ROOT/LATEST points at, or None when nothing was published under `root` yet.

    Raises:
      FileNotFoundError: the pointer names a version that is missing or was not completely published.
    """
    pointer = storage.join(root, POINTER)
    if not storage.exists(pointer):
        return None
    model = PublishedModel.from_dict(json.loads(storage.read_text(pointer)))
    if not storage.is_committed(model.uri):
        raise FileNotFoundError(
            f"{pointer} names version {model.version!r} but {model.uri} is missing or incomplete; "
            "re-publish a model or point LATEST at a complete version"
        )
    return model


def resolve_model(spec: str, publish_root: str) -> Optional[str]:
    """Resolves a baseline or warm-start source to a SavedModel directory.

    Args:
      spec: "none" (no model), "latest" (the last version published under `publish_root`, None when there is
        none yet), a publish root (its latest version) or a SavedModel directory.
      publish_root: the pipeline's publish root, used by "latest".

    Returns:
      A SavedModel directory, or None.

    Raises:
      ValueError: "latest" without a publish root.
      FileNotFoundError: `spec` is neither a publish root with a published version nor a SavedModel directory.
    """
    spec = spec.strip()
    if spec in ("", NO_MODEL):
        return None
    if spec == LATEST_MODEL:
        if not publish_root:
            raise ValueError("'latest' needs the publish root (publish_root) to look under; set it or give a URI")
        model = latest(publish_root)
        return model.uri if model else None
    published = latest(spec)
    if published is not None:
        return published.uri
    if _is_saved_model(spec):
        return spec
    raise FileNotFoundError(
        f"{spec!r} is neither a publish root (with a {POINTER} pointer) nor a SavedModel directory "
        "(with saved_model.pb); give one of those, 'latest' or 'none'"
    )


@dataclasses.dataclass(frozen=True)
class ResolvedRun:
    """What a run resolves before anything else runs, so the stages after it can be cached by content.

    Attributes:
      data_version: `storage.content_token` of the data: it changes whenever a file's content does.
      warm_start: the SavedModel directory the run warm-starts from, "none" for a cold start.
      reference: the SavedModel directory of the published model the run continues (its warm-start source, else
        its baseline), "none" when there is none.
    A version directory never changes, so its URI names its content.
    """

    data_version: str
    warm_start: str
    reference: str


def resolve_run(data: str, warm_start: str, baseline: str, publish_root: str) -> ResolvedRun:
    """The content token of `data` (a path, gs:// URI or glob), the warm-start source and the reference model,
    resolved now (see `resolve_model`)."""
    source = resolve_model(warm_start, publish_root)
    reference = source or resolve_model(baseline, publish_root)
    return ResolvedRun(storage.content_token([data]), source or NO_MODEL, reference or NO_MODEL)


def latest_version(root: str) -> str:
    """The version ROOT/LATEST names now, or "none" when nothing is published there: what a verdict is decided
    against, passed back to `publish_model(based_on=...)` when the verdict is acted on."""
    model = latest(root)
    return model.version if model else NO_MODEL


# -- the export and release stages ---------------------------------------------------------------------------
def export_verified(
    job: "JobConfig",
    schema: "Schema",
    model_dir: str,
    export_base: str,
    verify_files: Optional[str] = None,
    data_profile: Optional[Dict[str, Any]] = None,
) -> ExportResult:
    """The export stage: exports the model to `export_base` and verifies the export; never publishes.

    `export_model` checks that both meta graphs load and that the fresh CPU graph predicts what the estimator
    predicts for the first rows of `verify_files`; in TPU-strict mode (`job.tpu.strict`) the `serve,tpu` graph
    must also run the model through `TPUPartitionedCall` (`strict.check_export`).

    Args:
      job, schema, model_dir: the trained model (see `estimator_lib.export.export_model`).
      export_base: where the pipeline run keeps its export.
      verify_files: prepared TFRecords whose first rows verify the export.
      data_profile: the training data's profile, carried in the export's metadata (a later run validates its
        data against it).
    """
    export = export_model(job, schema, model_dir, export_base, verify_rows=verify_files, data_profile=data_profile)
    if job.tpu.strict:
        strict.check_export(export.export_dir)
    return export


@dataclasses.dataclass(frozen=True)
class Release:
    """What the release stage did: the published version, or why there is none.

    Attributes:
      published: the new version; None when the model was not blessed.
      reason: one sentence for people: "published version ... at ..." or "not published: ...".
    """

    published: Optional[PublishedModel]
    reason: str


def release(
    export_dir: str,
    blessing: "Blessing",
    root: str,
    metadata: Optional[Mapping[str, Any]] = None,
    based_on: Optional[str] = None,
) -> Release:
    """The release stage: publishes `export_dir` under `root` if `blessing` says so, recording the verdict
    with the version. It runs last in the pipeline, so a run that failed anywhere publishes nothing.

    Args:
      export_dir: the export stage's verified SavedModel.
      blessing: the evaluate stage's verdict.
      root: the publish root.
      metadata: more facts to record with the version (where the model and its export came from).
      based_on: the LATEST version the blessing was decided against (`latest_version` when evaluating); a
        publish in between makes this one fail (see `publish_model`).

    Raises:
      PublishConflictError: another run published after this one was evaluated; nothing is published.
    """
    if not root:
        raise ValueError("publish_root is empty; give the directory or gs:// prefix where blessed models go")
    if not blessing.blessed:
        return Release(None, f"not published: {blessing.summary()}")
    metadata = {"blessing": blessing.to_dict(), **dict(metadata or {})}
    model = publish_model(export_dir, root, metadata=metadata, based_on=based_on)
    return Release(model, f"published version {model.version} at {model.uri}")
