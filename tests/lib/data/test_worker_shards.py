"""Beam prepare into Cloud Storage with a gs:// work directory, as on Dataflow, on the real emulator server:
the output equals the in-process engine's local output file by file, and no shard's bytes pass through the
launcher (the workers stream the shards; the commit copies them on the server)."""

from __future__ import annotations

import contextlib
import os
import uuid

import pytest

pytest.importorskip("apache_beam")

from file_trees import tree  # noqa: E402
from test_prepare import awkward_rows, write_csv  # noqa: E402

from estimator_lib import fingerprints, storage  # noqa: E402
from estimator_lib.config import PrepareConfig  # noqa: E402
from estimator_lib.config.beam import BeamConfig  # noqa: E402
from estimator_lib.data import beam  # noqa: E402
from estimator_lib.data import prepare as prepare_module  # noqa: E402
from estimator_lib.data.beam import prepare_on_beam  # noqa: E402
from estimator_lib.data.prepare import prepare  # noqa: E402
from estimator_lib.data.stats import Totals  # noqa: E402

STORAGE_CALLS = ("read_bytes", "open_read", "download_file", "upload_file", "copy_object")
HEADER = ["id", "bill length (mm)", "Île / région", "a,b;c!", "größe", "label"]


def gcs_work_directory(root: str):
    """`beam.work_directory` under the gs:// `root`: the DirectRunner's work directory is always local."""

    @contextlib.contextmanager
    def work_directory(config: BeamConfig, purpose: str):
        remote = storage.join(root, f"{purpose}-{uuid.uuid4().hex}")
        try:
            yield remote
        finally:
            storage.delete_tree(remote)

    return work_directory


def record_calls(monkeypatch, calls: list) -> None:
    """Appends (function, first argument) to `calls` for every call that moves or reads a file's bytes (storage's,
    and the manifest's sha256 of a staged file)."""
    for module, name in [(storage, n) for n in STORAGE_CALLS] + [(fingerprints, "file_sha256")]:
        original = getattr(module, name)

        def recorded(*args, original=original, name=name):
            calls.append((name, args[0]))
            return original(*args)

        monkeypatch.setattr(module, name, recorded)


def test_a_beam_prepare_to_gcs_equals_the_local_output_and_no_shard_passes_through_the_launcher(
    tmp_path, gcs_prefix, monkeypatch
):
    path = write_csv(tmp_path / "rows.csv", HEADER, awkward_rows(120))
    config = PrepareConfig(data=(path,), label="label", key_column="id", chunk_bytes=2048, num_shards=2)
    prepare(config, str(tmp_path / "inprocess"))
    out, work = f"{gcs_prefix}/prepared", f"{gcs_prefix}/tmp"
    calls: list = []
    monkeypatch.setattr(beam, "work_directory", gcs_work_directory(work))
    record_calls(monkeypatch, calls)  # in this process: the launcher and Beam's in-process workers
    prepare_on_beam(config, out, BeamConfig())
    monkeypatch.undo()
    local = tree(str(tmp_path / "inprocess"))
    published = {uri[len(out) + 1 :]: storage.read_bytes(uri) for uri in storage.list_files(out)}
    assert published == local
    shards = [f"{split}/part-0000{k}-of-00002.tfrecord" for split in ("eval", "train", "valid") for k in (0, 1)]
    assert sorted(name for name in local if name.endswith(".tfrecord")) == shards and all(local[n] for n in shards)
    assert any(f == "file_sha256" and uri.endswith("schema.json") for f, uri in calls)  # the recording works
    touched = [(f, uri) for f, uri in calls if uri.endswith(".tfrecord")]
    assert sorted((f, uri.split("/shards/")[-1]) for f, uri in touched) == [("copy_object", n) for n in shards]
    assert all(uri.startswith(f"{work}/prepare-") for _, uri in touched)  # copied on the server, from the work
    assert storage.list_files(work) == []  # the work directory, shards included, is gone


def test_profile_json_read_back_from_the_shards_reads_them_where_the_workers_wrote_them(tmp_path, monkeypatch):
    path = write_csv(tmp_path / "rows.csv", HEADER, awkward_rows(120))
    config = PrepareConfig(data=(path,), label="label", key_column="id", chunk_bytes=2048, num_shards=2)
    # Counters of at most 2 values: the island column's (4 values) is cut short, so profile.json is read back
    # from the training shards (`prepare._training_profile`).
    monkeypatch.setattr(prepare_module, "Totals", lambda features, _: Totals(features, 2))
    read: list = []
    original = prepare_module.profile_split
    monkeypatch.setattr(prepare_module, "profile_split", lambda files, *a: read.append(files) or original(files, *a))
    prepare(config, str(tmp_path / "inprocess"))
    prepare_on_beam(config, str(tmp_path / "beam"), BeamConfig(temp_location=str(tmp_path / "work")))
    assert tree(str(tmp_path / "inprocess")) == tree(str(tmp_path / "beam"))
    names = ["train/part-00000-of-00002.tfrecord", "train/part-00001-of-00002.tfrecord"]
    assert [[f.split(os.sep, f.count(os.sep) - 1)[-1] for f in files] for files in read] == [names, names]
    assert all(f.startswith(str(tmp_path / "work")) and "/shards/" in f for f in read[1])  # not in staging
