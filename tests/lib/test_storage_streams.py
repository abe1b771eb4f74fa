"""storage's streamed writes (`open_write`) and commits with members stored elsewhere, on local directories and
on a real Cloud Storage emulator server: whole or absent, and no member's bytes through the committing process
when it is already on Cloud Storage."""

from __future__ import annotations

import os
import uuid

import pytest

from estimator_lib import storage

PIECE = bytes(range(256)) * 1024  # 256 KiB: the smallest upload request, so 3 pieces take several requests


@pytest.fixture(params=["local", "gcs"])
def root(request, tmp_path):
    if request.param == "local":
        return str(tmp_path)
    return f"{request.getfixturevalue('gcs_emulator')}/streams-{uuid.uuid4().hex[:8]}"


@pytest.fixture(autouse=True)
def small_upload_requests(monkeypatch):
    monkeypatch.setattr(storage, "_STREAM_CHUNK", len(PIECE))


def test_a_streamed_write_is_published_whole_on_a_clean_exit(root):
    uri = storage.join(root, "d", "shard.bin")
    with storage.open_write(uri) as f:
        for k in range(3):
            f.write(PIECE[k:] + PIECE[:k])
        assert not storage.exists(uri)  # nothing visible before the end
    assert storage.read_bytes(uri) == b"".join(PIECE[k:] + PIECE[:k] for k in range(3))
    assert storage.list_files(storage.join(root, "d")) == [uri]


def test_a_streamed_write_that_fails_publishes_nothing_and_keeps_the_previous_file(root):
    uri = storage.join(root, "d", "shard.bin")
    with pytest.raises(RuntimeError, match="the third piece is unreadable"):
        with storage.open_write(uri) as f:
            f.write(PIECE)
            f.write(PIECE)
            raise RuntimeError("the third piece is unreadable")
    assert not storage.exists(uri) and storage.list_files(storage.join(root, "d")) == []
    storage.write_bytes(uri, b"previous")
    with pytest.raises(RuntimeError, match="stop"):
        with storage.open_write(uri) as f:
            f.write(PIECE * 2)
            raise RuntimeError("stop")
    assert storage.read_bytes(uri) == b"previous" and storage.list_files(storage.join(root, "d")) == [uri]


def no_reads_here(monkeypatch):
    """Makes every read of a file's bytes through storage fail in this process."""
    for name in ("read_bytes", "open_read", "download_file"):
        monkeypatch.setattr(storage, name, lambda *args, name=name: pytest.fail(f"storage.{name}{args} was called"))


def test_the_commit_brings_in_members_stored_elsewhere(root, tmp_path, monkeypatch):
    stored = storage.join(root, "work", "train", "part-0.tfrecord")  # where a worker wrote it
    storage.write_bytes(stored, b"train records")
    local = str(tmp_path / "elsewhere" / "eval.tfrecord")  # a local member, for any destination
    os.makedirs(os.path.dirname(local))
    with open(local, "wb") as f:
        f.write(b"eval records")
    destination = storage.join(root, "out")
    elsewhere = {"train/part-0.tfrecord": stored, "eval/part-0.tfrecord": local}
    no_reads_here(monkeypatch)
    storage.commit_staged(
        destination, lambda staging: storage.write_text(os.path.join(staging, "m.json"), "{}"), elsewhere
    )
    monkeypatch.undo()
    names = [n[len(destination) + 1 :] for n in storage.list_files(destination)]
    assert names == ["_COMMITTED", "eval/part-0.tfrecord", "m.json", "train/part-0.tfrecord"]
    assert storage.read_bytes(storage.join(destination, "train", "part-0.tfrecord")) == b"train records"
    assert storage.read_bytes(storage.join(destination, "eval", "part-0.tfrecord")) == b"eval records"
    assert storage.exists(stored) == storage.is_gcs(root)  # locally moved in; on Cloud Storage copied


def test_a_commit_whose_member_is_missing_publishes_nothing(root):
    destination = storage.join(root, "out")
    missing = storage.join(root, "work", "gone.tfrecord")
    with pytest.raises(FileNotFoundError, match="gone.tfrecord"):
        storage.commit_staged(
            destination, lambda staging: storage.write_text(os.path.join(staging, "m.json"), "{}"), {"a": missing}
        )
    assert not storage.is_committed(destination)  # on Cloud Storage its readers treat what was uploaded as absent
    assert storage.is_gcs(root) or not os.path.exists(destination)
