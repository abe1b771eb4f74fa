"""Preparation from and to gs:// on a real Cloud Storage emulator server: byte-identical to a local run."""

from __future__ import annotations

import os

from test_prepare import AWKWARD, awkward_rows, write_csv

from estimator_lib import storage
from estimator_lib.data.prepare import PrepareConfig, load_prepared, prepare


def _local_tree(root):
    out = {}
    for dirpath, _, files in os.walk(root):
        for name in files:
            path = os.path.join(dirpath, name)
            with open(path, "rb") as f:
                out[os.path.relpath(path, root).replace(os.sep, "/")] = f.read()
    return out


def _gcs_tree(prefix):
    return {uri[len(prefix) + 1 :]: storage.read_bytes(uri) for uri in storage.list_files(prefix)}


def test_gcs_run_gives_byte_identical_outputs_to_the_local_run(tmp_path, gcs_prefix):
    rows = awkward_rows(400)
    rows[17][1] = "abc"  # one quarantined row, so quarantine.jsonl is compared too
    local_in = tmp_path / "in"
    local_in.mkdir()
    write_csv(local_in / "a.csv", AWKWARD, rows[:250])
    write_csv(local_in / "b.csv", AWKWARD, rows[250:])
    for name in ("a.csv", "b.csv"):
        storage.upload_file(str(local_in / name), f"{gcs_prefix}/in/{name}")

    def config(pattern):
        return PrepareConfig(
            data=(pattern,),
            label="label",
            key_column="id",
            bad_rows="quarantine",
            test_fraction=0.1,
            chunk_bytes=4096,
            num_workers=1,
        )

    local = prepare(config(str(local_in / "*.csv")), str(tmp_path / "out"))
    remote = prepare(config(f"{gcs_prefix}/in/*.csv"), f"{gcs_prefix}/out")

    assert storage.is_committed(f"{gcs_prefix}/out")
    local_files, remote_files = _local_tree(tmp_path / "out"), _gcs_tree(f"{gcs_prefix}/out")
    assert sorted(local_files) == sorted(remote_files)
    assert "quarantine.jsonl" in local_files and "test/part-00001-of-00002.tfrecord" in local_files
    assert local_files == remote_files
    assert remote.manifest == local.manifest and remote.schema == local.schema
    loaded = load_prepared(f"{gcs_prefix}/out")
    assert loaded.counts == local.counts and loaded.files("train") == f"{gcs_prefix}/out/train/part-*.tfrecord"
