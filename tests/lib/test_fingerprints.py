"""`estimator_lib.export.fingerprint`: a SavedModel's fingerprint is its graphs (random table names numbered)
and its variables; hand-built SavedModel protos and files. Two real exports of one model: test_components.py."""

from __future__ import annotations

import os

from tensorflow.core.protobuf import saved_model_pb2

from estimator_lib.export.fingerprint import canonical_graphs, saved_model_fingerprint


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


def write_export(directory, graphs: bytes, variables: bytes, metadata: str) -> str:
    for relative, content in (
        ("saved_model.pb", graphs),
        ("variables/variables.index", variables),
        ("assets.extra/export_metadata.json", metadata.encode()),
    ):
        path = os.path.join(str(directory), relative)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "wb") as f:
            f.write(content)
    return str(directory)


UUIDS = ["f2da9574-da0c-44be-aad8-16dfbe4dbc28", "6b0b0375-e3c1-4e78-9793-29ccc78a0ed5"]
OTHER_UUIDS = ["a86dcd94-1640-4ab2-a696-5da4b44dca08", "67da8094-14fe-442c-a1f9-4815cc227e33"]


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
