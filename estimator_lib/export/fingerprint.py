"""The content fingerprint of an exported SavedModel: its graphs and its variables, nothing else.

Two exports of the same checkpoint with the same code differ byte for byte in three places, none of which is the
model: the export's folder is named after the time it was written; assets.extra/export_metadata.json records
the checkpoint's and the export's paths; and saved_model.pb names each lookup table's resource
"hash_table_<random uuid4>" (TensorFlow's `StaticHashTable` draws a fresh `shared_name` for every table built in
graph mode). `saved_model_fingerprint` hashes the SavedModel proto with those names replaced by their order of
first appearance, serialized deterministically, plus every file under variables/ and assets/ by its path
relative to the export. Host-side, reads local or gs:// files.
"""

from __future__ import annotations

import hashlib
import re

from tensorflow.core.protobuf import saved_model_pb2

from estimator_lib import storage

SAVED_MODEL_FILE = "saved_model.pb"
CONTENT_DIRS = ("variables", "assets")
# TensorFlow's random resource names: "hash_table_" + uuid4 (lookup_ops.StaticHashTable in graph mode).
_RANDOM_NAME = re.compile(rb"^(?P<prefix>[A-Za-z_]*?)_?[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$")


def _node_defs(saved_model: saved_model_pb2.SavedModel):
    """Every NodeDef of every meta graph: the graph's own and those inside its function library."""
    for meta_graph in saved_model.meta_graphs:
        yield from meta_graph.graph_def.node
        for function in meta_graph.graph_def.library.function:
            yield from function.node_def


def canonical_graphs(serialized: bytes) -> bytes:
    """A SavedModel proto with its random resource names numbered in order of first appearance, serialized
    deterministically (sorted map entries)."""
    saved_model = saved_model_pb2.SavedModel()
    saved_model.ParseFromString(serialized)
    renamed: dict[bytes, bytes] = {}
    for node in _node_defs(saved_model):
        if "shared_name" not in node.attr:
            continue
        name = node.attr["shared_name"].s
        match = _RANDOM_NAME.match(name)
        if match:
            stable = renamed.setdefault(name, b"%s_%d" % (match["prefix"], len(renamed)))
            node.attr["shared_name"].s = stable
    return saved_model.SerializeToString(deterministic=True)


def _relative(path: str, directory: str) -> str:
    return path[len(directory.rstrip("/")) + 1 :].replace("\\", "/")


def saved_model_fingerprint(export_dir: str) -> str:
    """sha256 over the SavedModel's canonical graphs (`canonical_graphs`) and the contents of its variables/
    and assets/ files: equal for two exports of the same weights by the same code, wherever and whenever they
    were written.

    Raises:
      FileNotFoundError: `export_dir` holds no saved_model.pb.
    """
    digest = hashlib.sha256()
    graphs = canonical_graphs(storage.read_bytes(storage.join(export_dir, SAVED_MODEL_FILE)))
    digest.update(b"saved_model.pb\0" + hashlib.sha256(graphs).hexdigest().encode() + b"\n")
    for path in storage.list_files(export_dir):
        relative = _relative(path, export_dir)
        if relative.split("/", 1)[0] in CONTENT_DIRS:
            content = hashlib.sha256(storage.read_bytes(path)).hexdigest()
            digest.update(f"{relative}\0{content}\n".encode())
    return digest.hexdigest()
