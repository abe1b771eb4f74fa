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
(`latest_version`), unless it holds the weights of the model LATEST names (`identical_weights`). `resolve_model`
turns what users pass as a baseline or warm-start source ("none", "auto", "latest", a publish root or a
SavedModel directory) into a SavedModel directory; `resolve_sources` keeps a run to its lineage (its publish root,
label and task). Nothing here reads flags or the environment.
"""

from __future__ import annotations

import dataclasses
import datetime
import hashlib
import json
import os
import posixpath
import shlex
from typing import Any, Dict, List, Mapping, Optional, Tuple

import numpy as np
import tensorflow as tf

from estimator_lib import fingerprints, storage, strict
from estimator_lib.config import JobConfig, PrepareConfig
from estimator_lib.config.run import AUTO_MODEL, LATEST_MODEL, NO_MODEL
from estimator_lib.evaluation import Blessing, Evaluation
from estimator_lib.evaluation.blessing import identical_message
from estimator_lib.export import ExportResult, export_model, read_export_metadata
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


# -- publishing ----------------------------------------------------------------------------------------------
def _relative(path: str, directory: str) -> str:
    return path[len(directory.rstrip("/")) + 1 :].replace(os.sep, "/")


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
    remove_leftovers(root)
    current, token = _read_versioned_pointer(root)  # a damaged pointer is replaced (see `latest_version`)
    _check_based_on(pointer, current, based_on)
    if not _is_saved_model(export_dir):
        raise FileNotFoundError(f"{export_dir!r} is not a SavedModel directory (no saved_model.pb); export first")
    now = now or datetime.datetime.now(datetime.timezone.utc)
    digest = fingerprints.fingerprint_directory(export_dir)
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
    return pointer_identity(None if pointer_text is None else pointer_text.encode("utf-8"))


def _check_based_on(pointer: str, current: Optional[str], based_on: Optional[str]) -> None:
    if based_on is None or _version_of(current) == based_on:
        return
    raise PublishConflictError(
        f"{pointer} names {_version_of(current)!r}, but this run was evaluated against {based_on!r}: another run "
        "published in between; this model was not published: rerun to evaluate against the new LATEST"
    )


# -- reading and checking LATEST -----------------------------------------------------------------------------
class LatestPointerError(ValueError):
    """ROOT/LATEST is damaged: missing while versions are published, empty, not JSON, partial, pointing outside
    its publish root, or at a version whose folder is missing or whose files do not match its fingerprint.

    The message names the file, what is wrong and the repair (`repair_command`).

    Attributes:
      pointer: the LATEST file (path or gs:// URI).
      problem: what is wrong with it, as the message says it.
    """

    def __init__(self, root: str, problem: str, fix: str = ""):
        self.pointer = storage.join(root, POINTER)
        self.problem = problem
        fix = fix or f"rebuild it from {storage.join(root, VERSIONS)} with `{repair_command(root)}`"
        super().__init__(f"{self.pointer} {problem}; {fix}")


class MissingVersionError(LatestPointerError, FileNotFoundError):
    """LATEST names a version whose folder is missing or was not completely published."""


class _Damaged(ValueError):
    """What is wrong with a pointer or a version's record (a phrase that follows the file's name)."""


class _Missing(_Damaged):
    """The version named is missing or incomplete."""


def repair_command(root: str) -> str:
    return f"tpu-pipeline release --repair --publish-root {shlex.quote(root)}"


REQUIRED = ("version", "uri", "fingerprint", "published_at")  # what publish_model writes; "root" is the reader's


def _record_json(data: bytes) -> Dict[str, Any]:
    """The JSON object of a pointer or publish.json; `_Damaged` when empty, not JSON or partial."""
    if not data.strip():
        raise _Damaged("is empty")
    try:
        record = json.loads(data)
    except ValueError:  # JSONDecodeError, UnicodeDecodeError
        raise _Damaged(f"is not JSON (it starts with {data[:40]!r})") from None
    if not isinstance(record, dict):
        raise _Damaged(f"is not a JSON object (it starts with {data[:40]!r})")
    bad = [name for name in REQUIRED if not isinstance(record.get(name), str) or not record[name]]
    bad += ["metadata"] if not isinstance(record.get("metadata", {}), dict) else []
    if bad:
        raise _Damaged(f"is partial: missing or malformed {', '.join(bad)}")
    return record


def _normal(uri: str) -> str:
    return uri.rstrip("/") if storage.is_gcs(uri) else os.path.realpath(uri)


def _verified(root: str, record: Mapping[str, Any]) -> PublishedModel:
    """The version `record` names, checked: a folder of ROOT/versions/, completely published, its files hashing
    to the recorded fingerprint (every file is read once: the cost of one download of the model). Its uri may name
    it under the root it was published to (the record's "root": the root moved or was restored from a copy), or
    under `root` by another path to the same folder (a symbolic link)."""
    version, uri = record["version"], record["uri"]
    if version in (".", "..") or "/" in version or "\\" in version:
        raise _Damaged(f"names version {version!r}, which is not a folder name under {storage.join(root, VERSIONS)}")
    expected = storage.join(root, VERSIONS, version)
    published_under = str(record.get("root") or root)
    if _normal(uri) not in (_normal(expected), _normal(storage.join(published_under, VERSIONS, version))):
        where = "another folder" if _normal(uri).startswith(_normal(root) + "/") else "outside its publish root"
        raise _Damaged(f"names version {version!r} but points {where}: {uri} (expected {expected})")
    if not storage.is_committed(expected):
        raise _Missing(
            f"names version {version!r}, but {expected} is missing or incomplete (no {storage.COMMIT_MARKER})"
        )
    try:
        actual = fingerprints.fingerprint_directory(expected)
    except FileNotFoundError:
        actual = "no files"
    if actual != record["fingerprint"]:
        raise _Damaged(
            f"names version {version!r} with fingerprint {record['fingerprint'][:12]}, but its files at {expected} "
            f"hash to {actual[:12]}: they changed after publishing"
        )
    fields = {name: record[name] for name in ("version", "fingerprint", "published_at")}
    return PublishedModel(root, uri=expected, metadata=dict(record.get("metadata", {})), **fields)


def published_versions(root: str) -> List[str]:
    """Names of the folders under ROOT/versions/ (complete or not), newest first (names start with the time)."""
    base = storage.join(root, VERSIONS)
    return sorted({_relative(path, base).split("/")[0] for path in storage.list_files(base)}, reverse=True)


def _read_pointer(root: str) -> Optional[bytes]:
    try:
        return storage.read_bytes(storage.join(root, POINTER))
    except FileNotFoundError:
        return None


def _pointed(root: str, data: Optional[bytes]) -> Optional[PublishedModel]:
    """The checked version that pointer bytes `data` name (None: no pointer and nothing published)."""
    if data is None:
        if any(storage.is_committed(storage.join(root, VERSIONS, v)) for v in published_versions(root)):
            raise LatestPointerError(root, f"is missing, but {storage.join(root, VERSIONS)} holds published versions")
        return None
    _check_utf8(root, data)
    try:
        return _verified(root, _record_json(data))
    except _Missing as e:
        raise MissingVersionError(root, str(e)) from None
    except _Damaged as e:
        raise LatestPointerError(root, str(e)) from None


def _check_utf8(root: str, data: bytes) -> None:
    """`storage.read_versioned` (the compare-and-swap read) reads text: a pointer that is not UTF-8 must be
    deleted before it can be replaced."""
    try:
        data.decode("utf-8")
    except UnicodeDecodeError:
        fix = f"delete it (nothing else reads it), then run `{repair_command(root)}`"
        raise LatestPointerError(root, f"is not UTF-8 text (it starts with {data[:40]!r})", fix) from None


def _read_versioned_pointer(root: str) -> Tuple[Optional[str], str]:
    """`storage.read_versioned` of ROOT/LATEST, a pointer that is not UTF-8 named as damaged."""
    pointer = storage.join(root, POINTER)
    try:
        return storage.read_versioned(pointer)
    except UnicodeDecodeError:
        _check_utf8(root, storage.read_bytes(pointer))
        raise


def latest(root: str) -> Optional[PublishedModel]:
    """The version ROOT/LATEST points at, checked, or None when nothing was published under `root` yet.

    Every read checks the pointer: complete JSON naming a folder of ROOT/versions/ that was completely published
    and whose files still hash to the recorded fingerprint (reading the whole model once; a SavedModel of a few
    MB takes well under a second, locally or from Cloud Storage).

    Raises:
      LatestPointerError: the pointer is missing while versions are published, empty, not JSON, partial, points
        outside ROOT/versions/ or at files that do not match its fingerprint; the message names the file and
        the repair.
      MissingVersionError (a LatestPointerError and a FileNotFoundError): the version it names is missing or was
        not completely published.
    """
    return _pointed(root, _read_pointer(root))


def pointer_identity(data: Optional[bytes]) -> str:
    """What a verdict is decided against: the version a pointer's bytes name, "none" without a pointer, and
    "damaged-" + the first 12 hex digits of their sha256 when they name no version. Never checks the version:
    a run that does not compare with LATEST (baseline "none") is not blocked by a damaged one."""
    if data is None:
        return NO_MODEL
    try:
        version = json.loads(data).get("version")
    except (ValueError, AttributeError):
        version = None
    if isinstance(version, str) and version:
        return version
    return f"damaged-{hashlib.sha256(data).hexdigest()[:12]}"


def resolve_model(spec: str, publish_root: str) -> Optional[str]:
    """Resolves a baseline or warm-start source to a SavedModel directory.

    Args:
      spec: "none" (no model), "latest" or "auto" (the last version published under `publish_root`, None when
        there is none yet), a publish root (its latest version) or a SavedModel directory.
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
    if spec in (LATEST_MODEL, AUTO_MODEL):
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
      data_version: `fingerprints.content_token` of the data: it changes whenever a file's content does.
      warm_start: the SavedModel directory the run warm-starts from, "none" for a cold start.
      reference: the SavedModel directory of the published model the run continues (its warm-start source, else
        its baseline), "none" when there is none.
      baseline: what the evaluate stage compares with (resolved when it runs): the run's baseline, or "none"
        when "auto" found a model of another lineage.
      notes: one line for each "auto" source left out as of another lineage.
      lineage: why the model left out is of another lineage (`other_lineage`), "" when none was.
    A version directory never changes, so its URI names its content.
    """

    data_version: str
    warm_start: str
    reference: str
    baseline: str
    notes: Tuple[str, ...]
    lineage: str = ""


def other_lineage(model_dir: str, label: str, task: Optional[str]) -> Optional[str]:
    """Why the model in `model_dir` does not continue a run of `label` and `task` (None: not known yet, the label
    alone is compared), e.g. "predicts 'species' (classification); this run's label is 'target'", from its export
    metadata (a built-in model's schema, a user model_fn's label); None when it does, or records neither."""
    try:
        metadata = read_export_metadata(model_dir)
    except FileNotFoundError:
        return None  # not this pipeline's export: the stages that read it say what they need
    predicted = metadata["schema"]["label"] if "schema" in metadata else {"name": metadata.get("label")}
    name, its_task = predicted.get("name"), predicted.get("task")
    if name == label and (task is None or its_task in (None, task)):
        return None
    return f"predicts {_labelled(name, its_task)}; this run's label is {_labelled(label, task)}"


def _labelled(label: Optional[str], task: Optional[str]) -> str:
    return f"{label!r}" + (f" ({task})" if task else "")


def _of_lineage(flag: str, spec: str, publish_root: str, config: PrepareConfig) -> Tuple[Optional[str], str, str]:
    """The SavedModel directory `spec` names if the run may continue it, and the note and `other_lineage`'s reason
    when "auto" leaves out a model of another lineage.

    Raises:
      ValueError: `spec` names a model of another lineage explicitly.
    """
    spec = spec.strip()
    model = resolve_model(spec, publish_root)
    other = model and other_lineage(model, config.label, config.task)
    if not other:
        return model, "", ""
    root = publish_root if spec in (AUTO_MODEL, LATEST_MODEL) else spec if model != spec else ""
    named = f"the published model under {root}" if root else f"the model {model}"
    if spec == AUTO_MODEL:
        what = flag.lstrip("-").replace("-", " ")
        return None, f"{what}: none ({named} {other}: a new lineage, nothing to compare with or continue)", other
    elsewhere = "another --publish-root" if root == publish_root else f"a model that predicts {config.label!r}"
    raise ValueError(f"{flag} {spec}: {named} {other}; give {flag} none, or {elsewhere}")


def resolve_sources(config: PrepareConfig, warm_start: str, baseline: str, publish_root: str) -> ResolvedRun:
    """The content token of what preparation reads (`config.reads()`), the warm-start source and the reference
    model, resolved now (see `resolve_model`), each of the run's lineage: a model that predicts another label, or
    the same label as another task (`config.task` None: the label alone is compared), is not continued: left out
    when its source is "auto" (`ResolvedRun.notes` says so), refused when named.

    Raises:
      ValueError: `warm_start` or `baseline` names a model of another lineage ("latest", a publish root or a
        SavedModel directory); the message gives the fix.
    """
    source, skipped, other = _of_lineage("--warm-start", warm_start, publish_root, config)
    compared, left_out, other_baseline = _of_lineage("--baseline", baseline, publish_root, config)
    token = fingerprints.content_token(config.reads())
    notes = tuple(note for note in (skipped, left_out) if note)
    reference = source or compared or NO_MODEL
    baseline = NO_MODEL if left_out else baseline
    return ResolvedRun(token, source or NO_MODEL, reference, baseline, notes, other or other_baseline)


def latest_version(root: str) -> str:
    """The version ROOT/LATEST names now ("none": no pointer), what a verdict is decided against, passed back to
    `publish_model(based_on=...)` when the verdict is acted on (see `pointer_identity`).

    The pointer is read, not checked: a damaged one gives "damaged-<hash>", so a run with baseline "none" still
    runs, and its publish replaces the damaged pointer only if it is still the same bytes.
    """
    return pointer_identity(_read_pointer(root))


# -- repairing LATEST ----------------------------------------------------------------------------------------
@dataclasses.dataclass(frozen=True)
class Repair:
    """What `repair_latest` did.

    Attributes:
      pointer: the LATEST file.
      damage: what was wrong with it ("" when it was intact or nothing is published).
      restored: the version LATEST now names (None when nothing was written).
      skipped: (version, why) of newer versions that are not intact, newest first.
      kept: intact versions newer than the intact one LATEST names, newest first: kept, never deleted.
    """

    pointer: str
    damage: str
    restored: Optional[PublishedModel]
    skipped: Tuple[Tuple[str, str], ...] = ()
    kept: Tuple[str, ...] = ()

    def lines(self) -> List[str]:
        """For people: one line per skipped or kept version, then what was done."""
        out = [f"skipped version {version}: {why}" for version, why in self.skipped]
        out += [
            f"kept version {version}: intact, newer than the version LATEST names (a publish stopped before it "
            "moved LATEST, or a rollback); delete it if nobody needs it"
            for version in self.kept
        ]
        if not self.damage:
            state = f"names version {self.restored.version}" if self.restored else "is absent: nothing is published"
            return out + [f"{self.pointer} {state} and is intact; nothing to repair"]
        model = self.restored
        return out + [
            f"{self.pointer} {self.damage}",
            f"pointed {self.pointer} at version {model.version} (fingerprint {model.fingerprint[:12]} verified), "
            "the newest intact version",
        ]


class NoIntactVersionError(RuntimeError):
    """`repair_latest` found no intact version to point LATEST at."""


def intact_version(root: str, version: str) -> PublishedModel:
    """The version from its own record (publish.json), checked like a pointer; a ValueError (naming the file) when
    it is not intact. Its record names where it was published; the pointer names where it is now."""
    uri = storage.join(root, VERSIONS, version)
    if not storage.is_committed(uri):
        raise _Damaged(f"{uri} is incomplete (no {storage.COMMIT_MARKER}): its publish did not finish")
    record_path = storage.join(uri, RECORD)
    try:
        record = _record_json(storage.read_bytes(record_path))
        if record["version"] != version:
            raise _Damaged(f"names version {record['version']!r}")
        return _verified(root, {**record, "uri": uri})
    except FileNotFoundError:
        raise _Damaged(f"{record_path} is missing") from None
    except _Damaged as e:
        raise _Damaged(f"{record_path} {e}") from None


def _is_intact(root: str, version: str) -> bool:
    try:
        return bool(intact_version(root, version))
    except _Damaged:
        return False


def remove_leftovers(root: str) -> None:
    """Deletes what publishes killed half-way left under a local root: staging folders whose owner process is gone
    and LATEST's temporaries (`storage.remove_temporaries_of`). A complete version LATEST never named is kept."""
    if not storage.is_gcs(root) and os.path.isdir(root):
        storage.remove_abandoned_staging_under(storage.join(root, VERSIONS))
        storage.remove_temporaries_of(storage.join(root, POINTER))


def repair_latest(root: str) -> Repair:
    """Points a damaged ROOT/LATEST at the newest intact version under ROOT/versions/; an intact one is kept, and
    the intact versions newer than the one it names are reported (`Repair.kept`). What killed publishes left
    is deleted first (`remove_leftovers`).

    Newest is by version name (they start with the UTC publishing time); a version is intact when it was
    completely published and its files hash to the fingerprint in its own publish.json. Each candidate costs
    one read of its files. The pointer is written by compare-and-swap, as a publish writes it.

    Raises:
      NoIntactVersionError: no version is intact (the message lists why each was skipped).
      PublishConflictError: LATEST changed during the repair (another run published or repaired); nothing was
        written.
      LatestPointerError: the pointer is not UTF-8 text (delete it first).
    """
    pointer = storage.join(root, POINTER)
    remove_leftovers(root)
    text, token = _read_versioned_pointer(root)
    try:
        model = _pointed(root, None if text is None else text.encode("utf-8"))
        newer = [v for v in published_versions(root) if model and v > model.version]
        return Repair(pointer, "", model, kept=tuple(v for v in newer if _is_intact(root, v)))
    except LatestPointerError as e:
        damage = e.problem
    skipped = []
    for version in published_versions(root):
        try:
            model = intact_version(root, version)
        except _Damaged as e:
            skipped.append((version, str(e)))
            continue
        try:
            storage.replace_if_unchanged(pointer, json.dumps(model.to_dict(), indent=2, sort_keys=True), token)
        except storage.ConcurrentUpdateError:
            raise PublishConflictError(
                f"{pointer} changed while it was being repaired; nothing was written: run `{repair_command(root)}` "
                "again"
            ) from None
        return Repair(pointer, damage, model, tuple(skipped))
    reasons = "".join(f"; {version}: {why}" for version, why in skipped) or f"; {storage.join(root, VERSIONS)} is empty"
    raise NoIntactVersionError(
        f"{pointer} {damage}, and no version under {storage.join(root, VERSIONS)} is intact{reasons}. Publish a "
        "model with `--baseline none` (its publish replaces the damaged pointer)"
    )


# -- the export and release stages ---------------------------------------------------------------------------
def export_verified(
    job: "JobConfig",
    schema: "Schema",
    model_dir: str,
    export_base: str,
    verify_files: Optional[str] = None,
    data_profile: Optional[Dict[str, Any]] = None,
    row_rules: Optional[Dict[str, Any]] = None,
) -> ExportResult:
    """The export stage: exports the model to `export_base` and verifies the export; never publishes.

    `export_model` checks that both meta graphs load and that the fresh CPU graph predicts what the estimator
    predicts for the first rows of `verify_files`; in TPU-strict mode (`job.tpu.strict`) the `serve,tpu` graph
    must also run the model through `TPUPartitionedCall` (`strict.check_export`).

    Args:
      job, schema, model_dir: the trained model (see `estimator_lib.export.export_model`).
      export_base: where the pipeline run keeps its export.
      verify_files: prepared TFRecords whose first rows verify the export.
      data_profile, row_rules: the training data's profile (a later run validates its data against it) and how
        its rows were read (new rows are scored the same way), carried in the export's metadata.
    """
    export = export_model(
        job, schema, model_dir, export_base, verify_rows=verify_files, data_profile=data_profile, row_rules=row_rules
    )
    if job.tpu.strict:
        strict.check_export(export.export_dir)
    return export


def _export_folder(metadata: Optional[Mapping[str, Any]]) -> Optional[str]:
    """The folder of the export a version's publisher recorded as its source (`metadata["source"]["export_dir"]`):
    the run's export stage output, where each attempt of the run exports into a new time-stamped folder."""
    source = (metadata or {}).get("source")
    export_dir = source.get("export_dir") if isinstance(source, Mapping) else None
    return posixpath.dirname(export_dir.rstrip("/")) if isinstance(export_dir, str) and export_dir else None


def _published_by_this_run(export_dir: str, metadata: Optional[Mapping[str, Any]], published: PublishedModel) -> bool:
    """Whether an earlier attempt of the run whose export is `export_dir` (its source in `metadata`) published
    `published`: an export into the same folder (`_export_folder`) of the same model
    (`fingerprints.saved_model_fingerprint`: its graphs and weights, not its paths)."""
    folder = _export_folder(metadata)
    if folder is None or folder != _export_folder(published.metadata):
        return False
    return fingerprints.saved_model_fingerprint(export_dir) == fingerprints.saved_model_fingerprint(published.uri)


# Checkpoint entries that are no model variable: Adam's accumulators (slots are named `<variable>/<slot>`), the
# step, an object-based checkpoint's object graph.
_TRAINING_STATE = ("beta1_power", "beta2_power", "global_step", "_CHECKPOINTABLE_OBJECT_GRAPH")


def identical_weights(checkpoint: str, published_uri: str) -> bool:
    """Whether `checkpoint` (a prefix: a training checkpoint, or an export's variables/variables) holds the weights
    of the SavedModel `published_uri`: each of its variables (the step included when it holds one) with the same
    dtype, shape and bytes, and no other model variable (the checkpoint's other entries are optimizer slots,
    `<variable>/<slot>`, Adam's `beta1_power`, `beta2_power` and the step, which a SavedModel does not hold).
    Reads each of the SavedModel's variables once from both (local or gs://)."""
    ours = tf.train.load_checkpoint(checkpoint)
    theirs = tf.train.load_checkpoint(storage.join(published_uri, "variables", "variables"))
    ours_types, types = ours.get_variable_to_dtype_map(), theirs.get_variable_to_dtype_map()
    ours_shapes, shapes = ours.get_variable_to_shape_map(), theirs.get_variable_to_shape_map()
    slots = tuple(f"{name}/" for name in types)
    others = [name for name in ours_types if name not in types and name not in _TRAINING_STATE]
    if any(not name.startswith(slots) for name in others):
        return False  # a model variable the published model does not have
    if any(ours_types.get(name) != dtype or ours_shapes.get(name) != shapes[name] for name, dtype in types.items()):
        return False
    return all(_same_values(ours.get_tensor(name), theirs.get_tensor(name)) for name in types)


def _same_values(a: np.ndarray, b: np.ndarray) -> bool:
    """Bitwise equal (NaN equals NaN, 0.0 differs from -0.0); a string tensor by its values."""
    return a.tolist() == b.tolist() if a.dtype == object else a.tobytes() == b.tobytes()


def _recorded_version(directory: str) -> Optional[str]:
    """The version a published version's folder records in its publish.json; None for another folder."""
    try:
        return _record_json(storage.read_bytes(storage.join(directory, RECORD)))["version"]
    except (FileNotFoundError, _Damaged):
        return None


def checked_identity(evaluation: Evaluation, baseline_dir: Optional[str]) -> Evaluation:
    """`evaluation`, its verdict "identical to version V; nothing to publish" (`Blessing.identical_to`) when its
    baseline is the published version V and the evaluated checkpoint holds V's weights (`identical_weights`)."""
    version = _recorded_version(baseline_dir) if baseline_dir else None
    if version is None or not identical_weights(evaluation.checkpoint, baseline_dir):
        return evaluation
    return dataclasses.replace(evaluation, blessing=evaluation.blessing.identical_to(version))


@dataclasses.dataclass(frozen=True)
class Release:
    """What the release stage did: the published version, or why there is none.

    Attributes:
      published: the new version; None when the model was not blessed or is the published one.
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
    with the version. It runs last in the pipeline, so a run that failed anywhere publishes nothing. A blessed
    model with the weights of the one LATEST names (`identical_weights`) is not published again: LATEST stays, and the
    reason is "not published: identical to version V; nothing to publish", as for a verdict that found the
    candidate identical to its baseline (`checked_identity`). A rerun whose earlier attempt published this model
    and was stopped before it recorded that (`_published_by_this_run`) reports that version, whatever its verdict
    (evaluated against LATEST, that is against itself, it is "identical to version V").

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
    try:
        published = latest(root)
    except LatestPointerError:
        published = None  # a damaged pointer names no model to compare with: a publish replaces it
    if published is not None and _published_by_this_run(export_dir, metadata, published):
        done = f"published version {published.version} at {published.uri}"
        return Release(published, f"{done} (by an earlier attempt of this run)")
    if not blessing.blessed:
        return Release(None, f"not published: {blessing.summary()}")
    if published is not None and identical_weights(storage.join(export_dir, "variables", "variables"), published.uri):
        return Release(None, f"not published: {identical_message(published.version)}")
    metadata = {"blessing": blessing.to_dict(), **dict(metadata or {})}
    model = publish_model(export_dir, root, metadata=metadata, based_on=based_on)
    return Release(model, f"published version {model.version} at {model.uri}")
