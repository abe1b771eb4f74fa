"""`estimator_lib.fingerprints`: every recipe pinned to its hex value on a tiny fixed input (manifests, stage
records and published versions hold these strings: a changed recipe fails here), and a SavedModel's fingerprint
is its graphs (random table names numbered) and its variables; hand-built SavedModel protos and files. Two real
exports of one model: test_components.py."""

from __future__ import annotations

import hashlib
import os

import pytest
from tensorflow.core.protobuf import saved_model_pb2

from estimator_lib import fingerprints, release
from estimator_lib.fingerprints import canonical_graphs, saved_model_fingerprint


def saved_model(*tables: str, in_function: str = "", value: int = 1) -> bytes:
    """A SavedModel proto with a HashTableV2 node per shared name (and one inside a library function)."""
    proto = saved_model_pb2.SavedModel()
    graph = proto.meta_graphs.add().graph_def
    for i, name in enumerate(tables):
        node = graph.node.add(name=f"table_{i}", op="HashTableV2")
        node.attr["shared_name"].s = name.encode()
    if in_function:
        node = graph.library.function.add().node_def.add(name="inner", op="HashTableV2")
        node.attr["shared_name"].s = in_function.encode()
    graph.node.add(name="const", op="Const").attr["value"].i = value
    return proto.SerializeToString()


def write(directory, files: dict) -> str:
    for relative, content in files.items():
        path = os.path.join(str(directory), *relative.split("/"))
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "wb") as f:
            f.write(content)
    return str(directory)


def write_export(directory, graphs: bytes, variables: bytes, metadata: str) -> str:
    return write(
        directory,
        {
            "saved_model.pb": graphs,
            "variables/variables.index": variables,
            "assets.extra/export_metadata.json": metadata.encode(),
        },
    )


UUIDS = ["f2da9574-da0c-44be-aad8-16dfbe4dbc28", "6b0b0375-e3c1-4e78-9793-29ccc78a0ed5"]
OTHER_UUIDS = ["a86dcd94-1640-4ab2-a696-5da4b44dca08", "67da8094-14fe-442c-a1f9-4815cc227e33"]
BIG = bytes(range(256)) * 5000  # more than one 1 MiB block
DATA = {"a.csv": b"x,y\n1,2\n", "sub/b.bin": BIG, "_COMMITTED": b"", "publish.json": b"{}"}


# -- the recipes, pinned (values computed with the code these functions replaced) ---------------------------------
def test_the_json_digest_is_the_canonical_text_s_sha256():
    value = {"b": [1, 2], "a": "é", "n": None, "f": 0.1}
    digest = "726b45e04a2217085e9a1197db12ff41a2d88761d4abcfe3ef554222353ef5b7"
    assert fingerprints.json_digest(value) == digest == fingerprints.json_digest(dict(reversed(value.items())))
    assert digest == hashlib.sha256('{"a":"é","b":[1,2],"f":0.1,"n":null}'.encode()).hexdigest()
    assert fingerprints.json_digest({"a": "é", "b": [2, 1]}) != fingerprints.json_digest({"a": "é", "b": [1, 2]})


def test_a_file_s_sha256_is_read_in_blocks(tmp_path):
    path = write(tmp_path, DATA) + "/sub/b.bin"
    digest = "7d471e4af16db5a30ce10aebbc29f5178b2edbad6c7dc2e8ff8ee6e4848a726f"
    assert fingerprints.file_sha256(path) == digest == hashlib.sha256(BIG).hexdigest()


def test_a_content_token_is_over_the_paths_and_the_contents(tmp_path, monkeypatch):
    write(tmp_path / "data", DATA)
    monkeypatch.chdir(tmp_path)
    assert fingerprints.content_version("data/a.csv") == f"8-{hashlib.sha256(DATA['a.csv']).hexdigest()}"
    token = "acbc33bd28aa2f43a51134b4ebdce960d418b2983f9e85d43563e0cd3f8ace21"
    assert fingerprints.content_token(["data/*.csv", "data/sub/*"]) == token


def test_files_and_a_directory_are_fingerprinted_by_relative_path_and_content(tmp_path):
    data = write(tmp_path / "data", DATA)
    files = [f"{data}/sub/b.bin", f"{data}/a.csv"]
    pinned = "0f8c36c5f90d2145b4b7dabaacafbf8d61c0ee6157957c741ae88ff7f3b3091c"
    assert fingerprints.fingerprint_files(files, data) == pinned
    assert fingerprints.fingerprint_directory(data) == pinned  # the commit marker and publish.json left out
    assert release.RECORD in fingerprints.BOOKKEEPING
    with pytest.raises(FileNotFoundError, match="holds no file to fingerprint"):
        fingerprints.fingerprint_directory(write(tmp_path / "empty", {"_COMMITTED": b""}))


def test_contents_are_fingerprinted_without_their_paths(tmp_path):
    data = write(tmp_path / "data", DATA)
    pinned = "b0a6c9bf8a677b7fcdd3718e08be7214479b7428ff25ff6f8a36085490d678ad"
    assert fingerprints.fingerprint_contents([f"{data}/sub/b.bin", f"{data}/a.csv"]) == pinned
    elsewhere = write(tmp_path / "elsewhere", {"1.csv": DATA["a.csv"], "2.bin": BIG})
    assert fingerprints.fingerprint_contents([f"{elsewhere}/1.csv", f"{elsewhere}/2.bin"]) == pinned


def test_a_saved_model_and_a_code_folder_are_pinned(tmp_path):
    export = write(
        tmp_path / "export",
        {
            "saved_model.pb": saved_model(f"hash_table_{UUIDS[0]}"),
            "variables/variables.index": b"index",
            "variables/variables.data-00000-of-00001": b"weights",
            "assets/vocab.txt": b"a\nb\n",
            "assets.extra/export_metadata.json": b'{"export_dir": "/x"}',
        },
    )
    assert saved_model_fingerprint(export) == "5e4b3986c6f5c9b9d27ca645d44b6fd6aef2b377c88f67e7b3579fb1712d8505"
    code = write(tmp_path / "code", {"pkg/__init__.py": b"", "pkg/model.py": b"def model_fn():\n    pass\n"})
    pinned = "7d5bb04d7aaca4e16a8f8ff3694781065d662c55482ed6d705f6da22df497b16"
    assert fingerprints.fingerprint_code(code, ["pkg/__init__.py", "pkg/model.py"]) == pinned


# -- a SavedModel's graphs ---------------------------------------------------------------------------------------
def test_random_table_names_are_numbered_in_order_of_first_appearance():
    first = saved_model(*(f"hash_table_{u}" for u in UUIDS), in_function=f"hash_table_{UUIDS[0]}")
    second = saved_model(*(f"hash_table_{u}" for u in OTHER_UUIDS), in_function=f"hash_table_{OTHER_UUIDS[0]}")
    assert first != second and canonical_graphs(first) == canonical_graphs(second)
    parsed = saved_model_pb2.SavedModel.FromString(canonical_graphs(first))
    names = [n.attr["shared_name"].s for n in parsed.meta_graphs[0].graph_def.node if "shared_name" in n.attr]
    assert names == [b"hash_table_0", b"hash_table_1"]
    assert parsed.meta_graphs[0].graph_def.library.function[0].node_def[0].attr["shared_name"].s == b"hash_table_0"


def test_which_table_is_which_and_named_tables_still_count():
    swapped = saved_model(f"hash_table_{UUIDS[0]}", f"hash_table_{UUIDS[0]}")
    distinct = saved_model(f"hash_table_{UUIDS[0]}", f"hash_table_{UUIDS[1]}")
    assert canonical_graphs(swapped) != canonical_graphs(distinct)
    assert canonical_graphs(saved_model("vocab_a")) != canonical_graphs(saved_model("vocab_b"))
    assert canonical_graphs(saved_model(value=1)) != canonical_graphs(saved_model(value=2))


def test_the_fingerprint_ignores_the_folder_and_the_export_metadata_but_not_the_variables(tmp_path):
    graphs = saved_model(f"hash_table_{UUIDS[0]}")
    a = write_export(tmp_path / "1700000000", graphs, b"weights", '{"export_dir": "/run-1/1700000000"}')
    renamed = saved_model(f"hash_table_{OTHER_UUIDS[0]}")
    b = write_export(tmp_path / "1800000000", renamed, b"weights", '{"export_dir": "/run-2/1800000000"}')
    c = write_export(tmp_path / "1900000000", graphs, b"other weights", '{"export_dir": "/run-1/1700000000"}')
    assert saved_model_fingerprint(a) == saved_model_fingerprint(b) != saved_model_fingerprint(c)
