"""The serving check's child process: an exported SavedModel loaded and called as a model server would.

`estimator_lib.predict.serving_check` runs this file as `python -I serving_child.py REQUEST_DIR` in a fresh
process, from a temporary working directory and without PYTHONPATH: the CPU `serve` meta graph loaded into a new
session (as TensorFlow Serving loads it), only the serving signatures the request names called, on the host CPU.
The file is standalone on purpose: it imports the standard library, NumPy and TensorFlow, and refuses every
import of the packages the request names (the project's own, which an installed image holds in its
site-packages), so an export that needed the project's code to serve fails here.

REQUEST_DIR holds request.json:
  {"export_dir": str, "tags": [str], "blocked": [package names],
   "signatures": [{"name": str, "inputs": "<file>.npz", "outputs": "<file>.npz"}]}
Arrays travel in .npz files written by `write_arrays` and read by `read_arrays`: numbers as they are, strings
(serialized Examples, categorical features, string outputs) as their bytes and lengths, exactly, without pickle.
The child writes each signature's outputs into its "outputs" file and exits 0; any failure exits non-zero with
the traceback on stderr. Either way it writes `STATUS_FILE` ({"ok": bool}) last, so that a caller that cannot
wait for it (`serving_check.prestart`'s child, started by another process) knows it finished.

`python -I serving_child.py --wait` starts the same child ahead of its request: it imports TensorFlow, reads one
REQUEST_DIR line from its standard input and serves it as above; at end of input it exits 0 having served
nothing.
"""

import json
import os
import sys

import numpy as np
import tensorflow as tf
from tensorflow.core.protobuf import rewriter_config_pb2

REQUEST_FILE = "request.json"
STATUS_FILE = "status.json"
WAIT_FLAG = "--wait"
INDEX_KEY = "__index__"  # the .npz entry naming each array: {name: {"kind": "number" | "strings", ...}}


class RefuseImports:
    """A `sys.meta_path` finder that refuses the named top-level packages (and their submodules)."""

    def __init__(self, packages):
        self.packages = frozenset(packages)

    def find_spec(self, name, path=None, target=None):
        if name.partition(".")[0] in self.packages:
            raise ModuleNotFoundError(f"No module named {name!r} (the serving check runs without project code)")
        return None


def write_arrays(path, arrays):
    """Writes {name: array} to `path` (.npz): numeric arrays as they are, arrays of bytes or str as the
    concatenated UTF-8 bytes and each value's length (exact, NUL bytes included), with an index."""
    entries, index = {}, {}
    for i, (name, value) in enumerate(sorted(arrays.items())):
        value = np.asarray(value)
        if value.dtype.kind in "OSU":
            items = [v if isinstance(v, bytes) else str(v).encode("utf-8") for v in value.reshape(-1).tolist()]
            entries[f"b{i}"] = np.frombuffer(b"".join(items), dtype=np.uint8)
            entries[f"n{i}"] = np.array([len(v) for v in items], dtype=np.int64)
            index[name] = {"kind": "strings", "entry": i, "shape": list(value.shape)}
        else:
            entries[f"a{i}"] = value
            index[name] = {"kind": "number", "entry": i}
    entries[INDEX_KEY] = np.frombuffer(json.dumps(index).encode("utf-8"), dtype=np.uint8)
    np.savez(path, **entries)


def read_arrays(path):
    """The {name: array} `write_arrays` wrote; strings come back as an object array of bytes."""
    with np.load(path, allow_pickle=False) as data:
        index = json.loads(data[INDEX_KEY].tobytes().decode("utf-8"))
        arrays = {}
        for name, entry in index.items():
            i = entry["entry"]
            if entry["kind"] == "number":
                arrays[name] = data[f"a{i}"]
                continue
            blob, lengths = data[f"b{i}"].tobytes(), data[f"n{i}"].tolist()
            ends = np.cumsum([0] + lengths).tolist()
            items = [blob[ends[j] : ends[j + 1]] for j in range(len(lengths))]
            arrays[name] = np.array(items, dtype=object).reshape(entry["shape"])
    return arrays


def _call(session, meta_graph, name, feeds):
    """Runs the signature `name` of the loaded meta graph on `feeds` {input name: array}."""
    if name not in meta_graph.signature_def:
        raise KeyError(f"the meta graph has no signature {name!r}; it has {sorted(meta_graph.signature_def)}")
    signature = meta_graph.signature_def[name]
    unknown = sorted(set(feeds) - set(signature.inputs))
    if unknown:
        raise KeyError(f"signature {name!r} has no input(s) {unknown}; it takes {sorted(signature.inputs)}")
    feed_dict = {signature.inputs[key].name: value for key, value in feeds.items()}
    fetches = {key: info.name for key, info in signature.outputs.items()}
    return session.run(fetches, feed_dict)


def serve(request_dir):
    """Loads the export the request names and writes each requested signature's outputs."""
    with open(os.path.join(request_dir, REQUEST_FILE), encoding="utf-8") as f:
        request = json.load(f)
    sys.meta_path.insert(0, RefuseImports(request["blocked"]))
    # Without grappler's remapper, as export verification runs it (`export.saved_model.CHECK_SESSION`, which this
    # standalone script cannot import): with oneDNN on it aborts the process on some graphs.
    config = tf.compat.v1.ConfigProto()
    config.graph_options.rewrite_options.remapping = rewriter_config_pb2.RewriterConfig.OFF
    with tf.Graph().as_default() as graph, tf.compat.v1.Session(graph=graph, config=config) as session:
        meta_graph = tf.compat.v1.saved_model.loader.load(session, request["tags"], request["export_dir"])
        for call in request["signatures"]:
            feeds = read_arrays(os.path.join(request_dir, call["inputs"]))
            outputs = _call(session, meta_graph, call["name"], feeds)
            write_arrays(os.path.join(request_dir, call["outputs"]), outputs)


def main(argv):
    """Serves the request in `argv[0]`, or with `WAIT_FLAG` the one its standard input names; records the end."""
    request_dir = sys.stdin.readline().strip() if argv[0] == WAIT_FLAG else argv[0]
    if not request_dir:
        return
    ok = False
    try:
        serve(request_dir)
        ok = True
    finally:
        with open(os.path.join(request_dir, STATUS_FILE), "w", encoding="utf-8") as f:
            json.dump({"ok": ok}, f)
    sys.exit(0)


if __name__ == "__main__":
    main(sys.argv[1:])
