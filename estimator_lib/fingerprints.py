"""Content fingerprints (sha256 hex): of a JSON value, a file, a list of files, a directory, an exported
SavedModel and a code folder; one recipe each.

Manifests, stage records and published versions store these strings and compare them with fresh ones, so a
recipe never changes (tests/lib/test_fingerprints.py pins each one). Host-side; files are read through `storage`
(local or gs://), a block at a time. TensorFlow loads only to read a SavedModel's graphs (`canonical_graphs`).
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from typing import Any, Iterable, Sequence

from estimator_lib import storage

BLOCK = 1 << 20  # bytes read at a time
# Files in a directory that are not its content: the commit marker, a published version's record (release.RECORD).
BOOKKEEPING = (storage.COMMIT_MARKER, "publish.json")
SAVED_MODEL_FILE = "saved_model.pb"
SAVED_MODEL_CONTENT = ("variables", "assets")
# TensorFlow's random resource names: "hash_table_" + uuid4 (lookup_ops.StaticHashTable in graph mode).
_RANDOM_NAME = re.compile(rb"^(?P<prefix>[A-Za-z_]*?)_?[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$")


def json_digest(value: Any) -> str:
    """sha256 of a JSON value's canonical text: sorted keys, no spaces, UTF-8 (what is not JSON as its str)."""
    text = json.dumps(value, sort_keys=True, ensure_ascii=False, separators=(",", ":"), default=str)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def file_sha256(path: str) -> str:
    """sha256 of a local or gs:// file's bytes, read a block at a time."""
    digest = hashlib.sha256()
    with storage.open_read(path) as f:
        for block in iter(lambda: f.read(BLOCK), b""):
            digest.update(block)
    return digest.hexdigest()


def content_version(uri: str) -> str:
    """A token that changes exactly when the file's content changes, for cache keys: "<bytes>-g<generation>" for a
    Cloud Storage object (a new generation for every write), "<bytes>-<sha256>" for a local file (read once)."""
    if storage.is_gcs(uri):
        return storage.file_version(uri)
    return f"{os.path.getsize(uri)}-{file_sha256(uri)}"


def content_token(patterns: Sequence[str]) -> str:
    """sha256 over every file the patterns match (path and `content_version`): equal while the data is the same.

    Raises:
      FileNotFoundError: a pattern matches nothing.
    """
    digest = hashlib.sha256()
    for pattern in patterns:
        files = storage.glob(pattern)
        if not files:
            raise FileNotFoundError(f"{pattern!r} matches no file; check the data path")
        for path in files:
            digest.update(f"{path}\0{content_version(path)}\n".encode("utf-8"))
    return digest.hexdigest()


def _relative(path: str, directory: str) -> str:
    return path[len(directory.rstrip("/")) + 1 :].replace(os.sep, "/")


def fingerprint_files(files: Iterable[str], base: str) -> str:
    """sha256 over (path relative to `base`, sha256 of contents) of `files`, in sorted order."""
    digest = hashlib.sha256()
    for path in sorted(files):
        digest.update(f"{_relative(path, base)}\0{file_sha256(path)}\n".encode())
    return digest.hexdigest()


def fingerprint_directory(directory: str) -> str:
    """`fingerprint_files` of every file under a local or gs:// directory but the `BOOKKEEPING` ones: equal for two
    directories exactly when they hold the same files with the same bytes (a published version and its export).

    Raises:
      FileNotFoundError: the directory holds no such file.
    """
    files = [f for f in storage.list_files(directory) if os.path.basename(f) not in BOOKKEEPING]
    if not files:
        raise FileNotFoundError(f"{directory!r} holds no file to fingerprint")
    return fingerprint_files(files, directory)


def fingerprint_contents(files: Iterable[str]) -> str:
    """sha256 over the sha256 of each file's contents, in path order; the paths themselves left out (the same
    bytes elsewhere have the same fingerprint)."""
    digest = hashlib.sha256()
    for path in sorted(files):
        digest.update(f"{file_sha256(path)}\n".encode())
    return digest.hexdigest()


def canonical_graphs(serialized: bytes) -> bytes:
    """A SavedModel proto with its random resource names (in every graph and its function library) numbered in
    order of first appearance, serialized deterministically (sorted map entries)."""
    from tensorflow.core.protobuf import saved_model_pb2

    saved_model = saved_model_pb2.SavedModel.FromString(serialized)
    renamed: dict[bytes, bytes] = {}
    for meta_graph in saved_model.meta_graphs:
        functions = meta_graph.graph_def.library.function
        for node in [*meta_graph.graph_def.node, *(n for f in functions for n in f.node_def)]:
            match = _RANDOM_NAME.match(node.attr["shared_name"].s) if "shared_name" in node.attr else None
            if match:
                name = node.attr["shared_name"].s
                node.attr["shared_name"].s = renamed.setdefault(name, b"%s_%d" % (match["prefix"], len(renamed)))
    return saved_model.SerializeToString(deterministic=True)


def saved_model_fingerprint(export_dir: str) -> str:
    """sha256 over an exported SavedModel's canonical graphs (`canonical_graphs`) and its variables/ and assets/
    files: equal for two exports of the same weights by the same code, wherever and whenever they were written
    (not its time-stamped folder, not the paths in assets.extra).

    Raises:
      FileNotFoundError: `export_dir` holds no saved_model.pb.
    """
    digest = hashlib.sha256()
    graphs = canonical_graphs(storage.read_bytes(storage.join(export_dir, SAVED_MODEL_FILE)))
    digest.update(b"saved_model.pb\0" + hashlib.sha256(graphs).hexdigest().encode() + b"\n")
    for path in storage.list_files(export_dir):
        relative = _relative(path, export_dir).replace("\\", "/")
        if relative.split("/", 1)[0] in SAVED_MODEL_CONTENT:
            digest.update(f"{relative}\0{file_sha256(path)}\n".encode())
    return digest.hexdigest()


def fingerprint_code(code_dir: str, files: Sequence[str]) -> str:
    """sha256 over (path, NUL, the raw sha256 of its contents) of a local code folder's `files` (relative POSIX
    paths), in the order given."""
    digest = hashlib.sha256()
    for relative in files:
        content = bytes.fromhex(file_sha256(os.path.join(code_dir, relative)))
        digest.update(relative.encode("utf-8") + b"\0" + content)
    return digest.hexdigest()
