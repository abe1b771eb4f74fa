"""Local and Cloud Storage (gs://) I/O through google-cloud-storage, with retries and atomic publishing.

Everything that reads users' files or publishes outputs goes through here, so the same code is tested
against local directories and against a real Cloud Storage emulator server (`STORAGE_EMULATOR_HOST`, read
by google-cloud-storage itself). TensorFlow's own gs:// file system (used by TPUEstimator for model
directories and by tf.data for TFRecords) cannot be pointed at an emulator.

Publishing is atomic:
  * local: files are written into a staging directory beside the destination and renamed into place;
  * gs://: objects are uploaded, then a commit marker object is written last. Readers treat a gs:// output
    without its marker as absent (`is_committed`), and a rerun deletes such leftovers first.
"""

from __future__ import annotations

import fnmatch
import glob as glob_lib
import os
import shutil
import uuid
from typing import IO, Callable, List, Optional, Tuple, TypeVar

COMMIT_MARKER = "_COMMITTED"
T = TypeVar("T")
_client_instance = None


def is_gcs(uri: str) -> bool:
    return uri.startswith("gs://")


def split_gcs(uri: str) -> Tuple[str, str]:
    """ "gs://bucket/a/b" -> ("bucket", "a/b")."""
    if not is_gcs(uri):
        raise ValueError(f"{uri!r} is not a gs:// URI")
    bucket, _, name = uri[len("gs://") :].partition("/")
    if not bucket:
        raise ValueError(f"{uri!r} has no bucket name; expected gs://BUCKET/PATH")
    return bucket, name


def join(base: str, *parts: str) -> str:
    """Joins path parts with "/" for gs:// and os.path.join for local paths."""
    if is_gcs(base):
        return "/".join([base.rstrip("/")] + [p.strip("/") for p in parts])
    return os.path.join(base, *parts)


def _client():
    """The google-cloud-storage client (created on first use, never at import)."""
    global _client_instance
    if _client_instance is None:
        from google.cloud import storage as gcs

        _client_instance = gcs.Client()
    return _client_instance


def reset_client() -> None:
    """Forgets the cached client (tests that start a new emulator call this)."""
    global _client_instance
    _client_instance = None


def _retry():
    from google.cloud.storage.retry import DEFAULT_RETRY

    return DEFAULT_RETRY.with_deadline(300.0)


def _blob(uri: str):
    bucket, name = split_gcs(uri)
    return _client().bucket(bucket).blob(name)


# -- reading -------------------------------------------------------------------------------------------------
def exists(uri: str) -> bool:
    if is_gcs(uri):
        return _blob(uri).exists(retry=_retry())
    return os.path.exists(uri)


def read_bytes(uri: str) -> bytes:
    if is_gcs(uri):
        return _blob(uri).download_as_bytes(retry=_retry())
    with open(uri, "rb") as f:
        return f.read()


def read_text(uri: str) -> str:
    return read_bytes(uri).decode("utf-8")


def open_read(uri: str) -> IO[bytes]:
    """A binary stream over a file or object, read in chunks (never loaded whole)."""
    if is_gcs(uri):
        return _blob(uri).open("rb", chunk_size=8 * 1024 * 1024, retry=_retry())
    return open(uri, "rb")


def _has_magic(pattern: str) -> bool:
    return any(c in pattern for c in "*?[")


def glob(pattern: str) -> List[str]:
    """Sorted matches of a local or gs:// pattern ("*", "?", "[...]"); a plain path matches itself if it exists."""
    if not is_gcs(pattern):
        return sorted(glob_lib.glob(pattern)) if _has_magic(pattern) else ([pattern] if os.path.exists(pattern) else [])
    bucket, name = split_gcs(pattern)
    if not _has_magic(name):
        return [pattern] if exists(pattern) else []
    prefix = name[: min(name.index(c) for c in "*?[" if c in name)]
    blobs = _client().list_blobs(bucket, prefix=prefix, retry=_retry())
    return sorted(f"gs://{bucket}/{b.name}" for b in blobs if fnmatch.fnmatchcase(b.name, name))


def list_files(directory: str) -> List[str]:
    """Every file under `directory`, recursively, as full paths/URIs, sorted."""
    if is_gcs(directory):
        bucket, prefix = split_gcs(directory.rstrip("/") + "/")
        return sorted(f"gs://{bucket}/{b.name}" for b in _client().list_blobs(bucket, prefix=prefix, retry=_retry()))
    out = []
    for root, _, files in os.walk(directory):
        out.extend(os.path.join(root, f) for f in files)
    return sorted(out)


# -- writing -------------------------------------------------------------------------------------------------
def write_bytes(uri: str, data: bytes) -> None:
    """Writes a whole file atomically (local: temp file + rename; gs://: one object upload)."""
    if is_gcs(uri):
        _blob(uri).upload_from_string(data, retry=_retry())
        return
    os.makedirs(os.path.dirname(os.path.abspath(uri)), exist_ok=True)
    tmp = f"{uri}.tmp-{uuid.uuid4().hex}"
    with open(tmp, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, uri)


def write_text(uri: str, text: str) -> None:
    write_bytes(uri, text.encode("utf-8"))


def upload_file(local_path: str, uri: str) -> None:
    """Copies a local file to a local path or gs:// object."""
    if is_gcs(uri):
        _blob(uri).upload_from_filename(local_path, retry=_retry())
        return
    os.makedirs(os.path.dirname(os.path.abspath(uri)), exist_ok=True)
    shutil.copyfile(local_path, uri)


def download_file(uri: str, local_path: str) -> None:
    if is_gcs(uri):
        _blob(uri).download_to_filename(local_path, retry=_retry())
    else:
        shutil.copyfile(uri, local_path)


def delete_tree(uri: str) -> None:
    """Deletes a directory (local) or every object under a prefix (gs://); no error when absent."""
    if is_gcs(uri):
        for name in list_files(uri):
            _blob(name).delete(retry=_retry())
    elif os.path.isdir(uri):
        shutil.rmtree(uri)


# -- atomic publishing ---------------------------------------------------------------------------------------
def local_staging_dir(destination: str, local_root: Optional[str] = None) -> str:
    """A fresh staging directory for `destination`.

    For a local destination it sits beside it (same file system, so the final rename is atomic); for gs://
    it is a local temp directory (under `local_root` if given) whose files `publish_directory` uploads.
    """
    if is_gcs(destination):
        import tempfile

        return tempfile.mkdtemp(prefix="staging-", dir=local_root)
    parent, name = os.path.split(os.path.abspath(destination.rstrip("/")))
    os.makedirs(parent, exist_ok=True)
    staging = os.path.join(parent, f".staging-{name}-{uuid.uuid4().hex[:12]}")
    os.makedirs(staging)
    return staging


def is_committed(destination: str) -> bool:
    """True when `destination` was published completely (its commit marker exists)."""
    return exists(join(destination, COMMIT_MARKER))


def publish_directory(staging: str, destination: str) -> None:
    """Publishes the finished `staging` directory as `destination`, all or nothing.

    A previous output at `destination` is replaced. Local: staging is renamed into place (the old output is
    moved aside first and deleted after). gs://: leftovers are deleted, files uploaded, marker written last.
    """
    marker = os.path.join(staging, COMMIT_MARKER)
    with open(marker, "w", encoding="utf-8") as f:
        f.write("complete\n")
    if is_gcs(destination):
        delete_tree(destination)
        files = [p for p in list_files(staging) if os.path.basename(p) != COMMIT_MARKER]
        for path in files:
            upload_file(path, join(destination, os.path.relpath(path, staging).replace(os.sep, "/")))
        upload_file(marker, join(destination, COMMIT_MARKER))
        shutil.rmtree(staging)
        return
    destination = os.path.abspath(destination.rstrip("/"))
    old = None
    if os.path.exists(destination):
        old = f"{destination}.old-{uuid.uuid4().hex[:12]}"
        os.rename(destination, old)
    os.rename(staging, destination)
    if old:
        shutil.rmtree(old, ignore_errors=True)


def publish_staged(destination: str, fill: Callable[[str], T]) -> T:
    """Runs `fill(staging)` in a fresh local staging directory, then publishes it as `destination`.

    On any error (in `fill` or while publishing) the staging directory is deleted and `destination` keeps
    its previous content. Returns what `fill` returned.
    """
    staging = local_staging_dir(destination)
    try:
        result = fill(staging)
        publish_directory(staging, destination)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    return result
