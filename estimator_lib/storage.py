"""Local and Cloud Storage (gs://) I/O through google-cloud-storage, with retries and atomic commits.

Everything that reads users' files or commits outputs goes through here, so the same code is tested
against local directories and against a real Cloud Storage emulator server (`STORAGE_EMULATOR_HOST`, read
by google-cloud-storage itself). TensorFlow's own gs:// file system (used by TPUEstimator for model
directories and by tf.data for TFRecords) cannot be pointed at an emulator.

Publishing is atomic:
  * local: files are written into a staging directory beside the destination and renamed into place (an
    existing output is swapped out in the same step where Linux allows it: renameat2 RENAME_EXCHANGE). A
    staging directory records its owner process beside it (`.staging-<name>-<id>.owner`); a later staging
    for the same destination deletes those whose owner is gone (killed mid-run), on the same host;
  * gs://: objects are uploaded, then a commit marker object is written last. Readers treat a gs:// output
    without its marker as absent (`is_committed`), and a rerun deletes such leftovers first.
A commit may include members stored outside staging (files that workers wrote, `commit_directory`'s
`elsewhere`): they are renamed in locally and copied on the server from gs:// to gs://, so their bytes need not
pass through the committing process. A large file is written by streaming it (`open_write`), whole or absent.

A local write the disk refuses (full, read-only) raises an OSError that names the file being written (not its
temporary), and deletes that temporary; what a killed writer left, `remove_temporaries_under` deletes.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import fcntl
import fnmatch
import glob as glob_lib
import hashlib
import json
import os
import re
import shutil
import socket
import tempfile
import uuid
from typing import IO, Callable, Dict, Iterator, List, Mapping, Optional, Tuple, TypeVar

COMMIT_MARKER = "_COMMITTED"
# Files a writer renames into place once written, left behind when it was killed or its disk refused them:
# `write_bytes`' "<name>.tmp-<32 hex>"; TensorFlow's atomic writes (tf.io.gfile, the checkpoint state file,
# graph.pbtxt) "<name>.tmp<32 hex>" and its tensor bundles' "<prefix>.data-...tempstate<digits>".
_TEMPORARY = re.compile(r"\.tmp-?[0-9a-f]{32}$|\.tempstate\d+$")
# TensorFlow writes a sharded checkpoint into "<prefix>_temp/" and moves it out: "model.ckpt-20_temp".
_TEMPORARY_DIRECTORY = re.compile(r"\.ckpt-\d+_temp$")
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


@contextlib.contextmanager
def _named_errors(uri: str) -> Iterator[None]:
    """Permanent Cloud Storage errors (no retry helps) as errors that name the bucket and object."""
    from google.api_core import exceptions as api

    bucket, name = split_gcs(uri)
    try:
        yield
    except (api.Forbidden, api.Unauthorized) as e:
        raise PermissionError(
            f"{uri}: access denied ({e.code}) to object {name!r} of bucket {bucket!r}; give the account this runs "
            f"as access to the bucket (e.g. roles/storage.objectAdmin on gs://{bucket})"
        ) from None
    except api.NotFound:
        raise FileNotFoundError(f"{uri} does not exist (bucket {bucket!r}, object {name!r})") from None


def _blob(uri: str):
    bucket, name = split_gcs(uri)
    return _client().bucket(bucket).blob(name)


# -- reading -------------------------------------------------------------------------------------------------
def exists(uri: str) -> bool:
    if is_gcs(uri):
        with _named_errors(uri):
            return _blob(uri).exists(retry=_retry())
    return os.path.exists(uri)


def read_bytes(uri: str) -> bytes:
    if is_gcs(uri):
        with _named_errors(uri):
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


def file_version(uri: str) -> str:
    """A token that changes whenever the file is written: "<bytes>-g<generation>" for a Cloud Storage object (its
    content version, `fingerprints.content_version`); "<bytes>-<mtime ns>" locally, which is not one: an edit that
    keeps the size and mtime (`cp -p`, `rsync -t`) keeps it. Cheap: the content is not read."""
    if is_gcs(uri):
        with _named_errors(uri):
            blob = _blob(uri)
            blob.reload(retry=_retry())
        return f"{blob.size}-g{blob.generation}"
    stat = os.stat(uri)
    return f"{stat.st_size}-{stat.st_mtime_ns}"


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
    with _named_errors(pattern):
        blobs = list(_client().list_blobs(bucket, prefix=prefix, retry=_retry()))
    return sorted(f"gs://{bucket}/{b.name}" for b in blobs if fnmatch.fnmatchcase(b.name, name))


def list_files(directory: str) -> List[str]:
    """Every file under `directory`, recursively, as full paths/URIs, sorted."""
    if is_gcs(directory):
        bucket, prefix = split_gcs(directory.rstrip("/") + "/")
        with _named_errors(directory):
            blobs = list(_client().list_blobs(bucket, prefix=prefix, retry=_retry()))
        return sorted(f"gs://{bucket}/{b.name}" for b in blobs)
    out = []
    for root, _, files in os.walk(directory):
        out.extend(os.path.join(root, f) for f in files)
    return sorted(out)


# -- writing -------------------------------------------------------------------------------------------------
def write_bytes(uri: str, data: bytes) -> None:
    """Writes a whole file atomically (local: temp file + rename; gs://: one object upload)."""
    if is_gcs(uri):
        with _named_errors(uri):
            _blob(uri).upload_from_string(data, retry=_retry())
        return
    with open_write(uri) as f:
        f.write(data)


_STREAM_CHUNK = 16 * 1024 * 1024  # a streamed upload's request size (a multiple of 256 KiB)


@contextlib.contextmanager
def open_write(uri: str) -> Iterator[IO[bytes]]:
    """A binary file object whose bytes become `uri` only when the block exits cleanly: whole or absent, never
    held in memory whole. Local: a temporary file beside `uri`, fsynced and renamed into place. gs://: a
    streamed resumable upload (one request per `_STREAM_CHUNK` bytes) that Cloud Storage turns into the object
    only when it is finalized, on a clean exit. On an error (or a kill) nothing is published: the temporary
    file is deleted (or left to `remove_temporaries_under`), the upload cancelled (or left unfinished), and the
    error raised.
    """
    if is_gcs(uri):
        with _named_errors(uri):
            writer = _blob(uri).open("wb", chunk_size=_STREAM_CHUNK, ignore_flush=True, retry=_retry())
        try:
            yield writer
        except BaseException:
            with contextlib.suppress(Exception):  # an unfinished upload never becomes an object anyway
                writer.terminate()
            raise
        with _named_errors(uri):
            writer.close()
        return
    os.makedirs(os.path.dirname(os.path.abspath(uri)), exist_ok=True)
    tmp = temporary_path(uri)
    try:
        with _naming(uri, tmp):
            with open(tmp, "wb") as f:
                yield f
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, uri)
    except BaseException:
        with contextlib.suppress(OSError):  # absent; or the disk refuses this too (`remove_temporaries_under`)
            os.remove(tmp)
        raise


def temporary_path(path: str) -> str:
    """A fresh name beside `path` for a file that becomes `path` by a rename (`remove_temporaries_under` knows
    the pattern)."""
    return f"{path}.tmp-{uuid.uuid4().hex}"


@contextlib.contextmanager
def _naming(path: str, temporary: Optional[str] = None) -> Iterator[None]:
    """Write errors name `path`, the file being written: also those that name no file (a write or fsync into an
    open file: a full disk, an I/O error) or only the `temporary` file that becomes `path`."""
    try:
        yield
    except OSError as e:
        if e.errno is None or e.filename not in (None, temporary):
            raise
        raise OSError(e.errno, e.strerror, path) from None


def remove_temporaries_under(root: str) -> List[str]:
    """Deletes the temporary files and directories that writers (`write_bytes`, TensorFlow's checkpoints and
    atomic writes) left anywhere under the local directory `root` when they were killed or their disk refused
    them, and returns them; staging directories are `remove_abandoned_staging_under`'s. Temporaries record no
    owner: call it only while no process writes under `root` (a local run holding the lock on its output)."""
    removed = []
    for parent, directories, files in os.walk(root):
        for name in files + directories:  # a symbolic link to a directory is listed as a directory
            path = os.path.join(parent, name)
            if _TEMPORARY.search(name) and (name in files or os.path.islink(path)):
                with contextlib.suppress(FileNotFoundError):
                    os.remove(path)
                removed.append(path)
            elif _TEMPORARY_DIRECTORY.search(name) and name in directories and not os.path.islink(path):
                shutil.rmtree(path)
                removed.append(path)
        kept = [d for d in directories if os.path.isdir(os.path.join(parent, d))]  # not what was just deleted
        directories[:] = [d for d in kept if not d.startswith(".staging-")]
    return removed


def write_text(uri: str, text: str) -> None:
    write_bytes(uri, text.encode("utf-8"))


def upload_file(local_path: str, uri: str) -> None:
    """Copies a local file to a local path or gs:// object."""
    if is_gcs(uri):
        with _named_errors(uri):
            _blob(uri).upload_from_filename(local_path, retry=_retry())
        return
    os.makedirs(os.path.dirname(os.path.abspath(uri)), exist_ok=True)
    shutil.copyfile(local_path, uri)


def download_file(uri: str, local_path: str) -> None:
    if is_gcs(uri):
        with _named_errors(uri):
            _blob(uri).download_to_filename(local_path, retry=_retry())
    else:
        shutil.copyfile(uri, local_path)


class ConcurrentUpdateError(RuntimeError):
    """A conditional write found the file changed since it was read: another writer got there first."""


ABSENT = "absent"  # the version token of a file that does not exist


def read_versioned(uri: str) -> Tuple[Optional[str], str]:
    """(text or None when absent, version token) of a small file, for a later `replace_if_unchanged`.

    The token is the object generation on Cloud Storage and the content's sha256 locally; `ABSENT` when the
    file does not exist.
    """
    if is_gcs(uri):
        bucket, name = split_gcs(uri)
        blob = _client().bucket(bucket).get_blob(name, retry=_retry())
        if blob is None:
            return None, ABSENT
        return blob.download_as_bytes(if_generation_match=blob.generation, retry=_retry()).decode(), str(
            blob.generation
        )
    try:
        with open(uri, "rb") as f:
            data = f.read()
    except FileNotFoundError:
        return None, ABSENT
    return data.decode("utf-8"), hashlib.sha256(data).hexdigest()


def replace_if_unchanged(uri: str, text: str, token: str) -> None:
    """Writes `text` to `uri` only if it still has version `token` (from `read_versioned`): compare-and-swap.

    Cloud Storage checks the generation on the server (`ifGenerationMatch`, 0 for "must not exist"); locally
    an exclusive lock on the file's directory makes the compare and the atomic rename one step for every writer
    that goes through here.

    Raises:
      ConcurrentUpdateError: the file changed (or appeared) since `token` was read; nothing was written.
    """
    if is_gcs(uri):
        from google.api_core.exceptions import PreconditionFailed

        generation = 0 if token == ABSENT else int(token)
        try:
            _blob(uri).upload_from_string(text.encode("utf-8"), if_generation_match=generation, retry=_retry())
        except PreconditionFailed:
            raise ConcurrentUpdateError(f"{uri} changed since it was read (generation {token})") from None
        return
    with _directory_lock(uri):
        if read_versioned(uri)[1] != token:
            raise ConcurrentUpdateError(f"{uri} changed since it was read")
        write_text(uri, text)


@contextlib.contextmanager
def _directory_lock(uri: str) -> Iterator[None]:
    """An exclusive lock on the local file `uri`'s directory (on its inode: every path to it shares the lock)."""
    directory = os.path.dirname(os.path.abspath(uri))
    os.makedirs(directory, exist_ok=True)
    lock = os.open(directory, os.O_RDONLY)
    try:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield
    finally:
        os.close(lock)  # releases the lock


def remove_temporaries_of(uri: str) -> None:
    """Deletes the temporaries (`temporary_path`) that writers of the local file `uri` left when they were killed
    before their rename. Only for a file written by `replace_if_unchanged` alone: its lock, held here, tells that
    no writer is using one."""
    with _directory_lock(uri):
        for path in glob_lib.glob(glob_lib.escape(uri) + ".tmp-*"):
            if _TEMPORARY.search(path):
                with contextlib.suppress(FileNotFoundError):
                    os.remove(path)


def delete_tree(uri: str) -> None:
    """Deletes a directory (local) or every object under a prefix (gs://); no error when absent."""
    if is_gcs(uri):
        for name in list_files(uri):
            _blob(name).delete(retry=_retry())
    elif os.path.isdir(uri):
        shutil.rmtree(uri)


# -- atomic commits ---------------------------------------------------------------------------------------
_OWNER_SUFFIX = ".owner"
_GCS_STAGING_ROOT = "estimator-lib-staging"  # under the temp dir: gs:// outputs are staged here


def _process_start(pid: int) -> Optional[str]:
    """'<boot id>/<start time in clock ticks>' of a local process: None if it is not running (or if this
    system has no /proc to tell)."""
    try:
        with open(f"/proc/{pid}/stat", encoding="utf-8") as f:
            stat = f.read()
        with open("/proc/sys/kernel/random/boot_id", encoding="utf-8") as f:
            boot = f.read().strip()
    except OSError:
        return None
    return f"{boot}/{stat[stat.rindex(')') + 2 :].split()[19]}"  # field 22 of stat: the start time


def _owner_record() -> Optional[Dict[str, object]]:
    started = _process_start(os.getpid())
    return None if started is None else {"host": socket.gethostname(), "pid": os.getpid(), "started": started}


def _owner_is_gone(owner_path: str) -> bool:
    """True only when the owner record names a process on this host that is no longer running (pid gone,
    or reused by a process started later). Unreadable records and other hosts' are never judged gone."""
    try:
        with open(owner_path, encoding="utf-8") as f:
            owner = json.load(f)
        host, pid, started = owner["host"], int(owner["pid"]), owner["started"]
    except (OSError, ValueError, KeyError, TypeError):
        return False
    if host != socket.gethostname() or _process_start(os.getpid()) is None:
        return False
    return _process_start(pid) != started


def _remove_abandoned_staging(parent: str, name: str = "") -> None:
    """Deletes `.staging-<name>-*` directories (every `.staging-*` one without a name) and their owner records
    whose owner process is gone."""
    prefix = f".staging-{name}-" if name else ".staging-"
    try:
        entries = os.listdir(parent)
    except OSError:
        return
    for entry in entries:
        if not (entry.startswith(prefix) and entry.endswith(_OWNER_SUFFIX)):
            continue
        owner_path = os.path.join(parent, entry)
        if _owner_is_gone(owner_path):
            staging = owner_path[: -len(_OWNER_SUFFIX)]
            shutil.rmtree(staging, ignore_errors=True)
            if not os.path.exists(staging):
                with contextlib.suppress(FileNotFoundError):
                    os.remove(owner_path)


def remove_abandoned_staging_under(root: str) -> None:
    """Deletes the staging directories anywhere under the local directory `root` whose owner process is gone
    (what killed runs left behind); those of running processes are kept."""
    for parent, directories, _ in os.walk(root):
        directories[:] = [d for d in directories if not d.startswith(".staging-")]  # never walk into one
        _remove_abandoned_staging(parent)


def local_staging_dir(destination: str, local_root: Optional[str] = None) -> str:
    """A fresh staging directory for `destination`.

    For a local destination it sits beside it (same file system, so the final rename is atomic); for gs://
    it is a local directory under `local_root` (default: `<temp dir>/estimator-lib-staging`) whose files
    `commit_directory` uploads. Either way it gets an owner record beside it, written before the directory,
    and staging directories left there by processes that are gone (killed: no cleanup ran) are deleted first:
    for a local destination those of the same destination, for gs:// every one under the root.
    """
    if is_gcs(destination):
        parent, name = local_root or os.path.join(tempfile.gettempdir(), _GCS_STAGING_ROOT), "gcs"
    else:
        parent, name = os.path.split(os.path.abspath(destination.rstrip("/")))
    os.makedirs(parent, exist_ok=True)
    _remove_abandoned_staging(parent, name)
    staging = os.path.join(parent, f".staging-{name}-{uuid.uuid4().hex[:12]}")
    owner = _owner_record()
    if owner is not None:  # whole or absent (a half-written record would never be judged gone)
        write_text(staging + _OWNER_SUFFIX, json.dumps(owner))
    try:
        os.makedirs(staging)
    except BaseException:
        discard_staging(staging)
        raise
    return staging


def discard_staging(staging: str) -> None:
    """Deletes a staging directory and its owner record as far as the disk lets (no error when either is absent,
    nor when a read-only disk keeps them: once their owner is gone, `remove_abandoned_staging_under` does), so
    that the error a cleanup follows is the one raised."""
    shutil.rmtree(staging, ignore_errors=True)
    with contextlib.suppress(OSError):
        os.remove(staging + _OWNER_SUFFIX)


def _exchange(a: str, b: str) -> bool:
    """Swaps two existing paths in one atomic step (Linux renameat2 RENAME_EXCHANGE). False where the system
    or the file system cannot; other errors raise."""
    rename = getattr(ctypes.CDLL(None, use_errno=True), "renameat2", None)
    if rename is None:
        return False
    rename.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p, ctypes.c_uint]
    at_fdcwd, rename_exchange = -100, 2
    if rename(at_fdcwd, os.fsencode(a), at_fdcwd, os.fsencode(b), rename_exchange) == 0:
        return True
    code = ctypes.get_errno()
    if code in (errno.ENOSYS, errno.EINVAL, errno.EOPNOTSUPP, errno.ENOTSUP):
        return False
    raise OSError(code, os.strerror(code), a, None, b)


def is_committed(destination: str) -> bool:
    """True when `destination` was committed completely (its commit marker exists)."""
    return exists(join(destination, COMMIT_MARKER))


def copy_object(source: str, uri: str) -> None:
    """Copies the Cloud Storage object `source` to `uri` on the server (a rewrite, resumed until done): no byte
    of it passes through this process."""
    target = _blob(uri)
    token = None
    with _named_errors(source):
        while True:
            token, _, _ = target.rewrite(_blob(source), token=token, retry=_retry())
            if token is None:
                return


def _move_in(source: str, path: str) -> None:
    """Moves the local file `source` to `path` (a rename on the same file system, else a copy), or downloads
    the object `source` to it."""
    os.makedirs(os.path.dirname(path), exist_ok=True)
    if is_gcs(source):
        download_file(source, path)
        return
    try:
        os.replace(source, path)
    except OSError as e:
        if e.errno != errno.EXDEV:
            raise
        shutil.copyfile(source, path)


def _publish_elsewhere(elsewhere: Mapping[str, str], destination: str) -> None:
    """Copies members stored outside staging into the gs:// `destination`: on the server from gs://, uploaded
    from a local file."""
    for name, source in sorted(elsewhere.items()):
        target = join(destination, name)
        if is_gcs(source):
            copy_object(source, target)
        else:
            upload_file(source, target)


def commit_directory(staging: str, destination: str, elsewhere: Optional[Mapping[str, str]] = None) -> None:
    """Publishes the finished `staging` directory as `destination`, all or nothing.

    A previous output at `destination` is replaced. Local: staging is renamed into place (the old output is
    moved aside first and deleted after). gs://: leftovers are deleted, files uploaded, marker written last.
    `elsewhere` ({relative "/"-separated name: local path or gs:// URI}) names members stored outside staging
    (files workers wrote): for a local destination they are moved into staging before its rename; for a gs://
    one they are copied on the server (from gs://) or uploaded (from a local path) before the marker.
    """
    elsewhere = elsewhere or {}
    if not is_gcs(destination):
        for name, source in sorted(elsewhere.items()):
            _move_in(source, os.path.join(staging, *name.split("/")))
    marker = os.path.join(staging, COMMIT_MARKER)
    with _naming(marker), open(marker, "w", encoding="utf-8") as f:
        f.write("complete\n")
    if is_gcs(destination):
        delete_tree(destination)
        files = [p for p in list_files(staging) if os.path.basename(p) != COMMIT_MARKER]
        for path in files:
            upload_file(path, join(destination, os.path.relpath(path, staging).replace(os.sep, "/")))
        _publish_elsewhere(elsewhere, destination)
        upload_file(marker, join(destination, COMMIT_MARKER))
        discard_staging(staging)
        return
    destination = os.path.abspath(destination.rstrip("/"))
    if os.path.exists(destination) and _exchange(staging, destination):
        discard_staging(staging)  # it now holds the previous output
        return
    old = None
    if os.path.exists(destination):  # no atomic swap here: a kill between the two renames leaves `old`
        old = f"{destination}.old-{uuid.uuid4().hex[:12]}"
        os.rename(destination, old)
    os.rename(staging, destination)
    discard_staging(staging)  # the owner record
    if old:
        shutil.rmtree(old, ignore_errors=True)


def commit_staged(destination: str, fill: Callable[[str], T], elsewhere: Optional[Mapping[str, str]] = None) -> T:
    """Runs `fill(staging)` in a fresh local staging directory, then commits it as `destination`, with the
    members `elsewhere` names (`commit_directory`; read once `fill` returned, so `fill` may add to it).

    On any error (in `fill` or while committing) the staging directory is deleted and `destination` keeps
    its previous content. Returns what `fill` returned.
    """
    staging = local_staging_dir(destination)
    try:
        result = fill(staging)
        commit_directory(staging, destination, elsewhere)
    except BaseException:
        discard_staging(staging)
        raise
    return result
