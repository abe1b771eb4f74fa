"""storage on local directories and on a real Cloud Storage emulator server."""

from __future__ import annotations

import pytest

from estimator_lib import storage


@pytest.fixture(params=["local", "gcs"])
def root(request, tmp_path):
    if request.param == "local":
        return str(tmp_path)
    import uuid

    # Not gcs_prefix: the parametrized test name holds "[gcs]", which a glob would read as a character class.
    return f"{request.getfixturevalue('gcs_emulator')}/storage-{uuid.uuid4().hex[:8]}"


def test_write_read_glob_and_stream(root):
    storage.write_text(storage.join(root, "d", "a.csv"), "x\n1\n")
    storage.write_bytes(storage.join(root, "d", "b.csv"), b"y\n" * 5000)
    storage.write_text(storage.join(root, "d", "c.txt"), "other")
    assert storage.glob(storage.join(root, "d", "*.csv")) == [storage.join(root, "d", n) for n in ("a.csv", "b.csv")]
    assert storage.glob(storage.join(root, "d", "a.csv")) == [storage.join(root, "d", "a.csv")]
    assert storage.glob(storage.join(root, "d", "zzz.csv")) == []
    with storage.open_read(storage.join(root, "d", "b.csv")) as f:
        assert f.read(3) == b"y\ny" and len(f.read()) == 9997
    assert storage.read_text(storage.join(root, "d", "a.csv")) == "x\n1\n"
    assert storage.exists(storage.join(root, "d", "c.txt")) and not storage.exists(storage.join(root, "nope"))


def test_publish_directory_is_all_or_nothing_and_replaces(root, tmp_path):
    destination = storage.join(root, "published")
    for content in ("first", "second"):
        staging = storage.local_staging_dir(destination, local_root=str(tmp_path))
        with open(f"{staging}/file.txt", "w") as f:
            f.write(content)
        assert not storage.is_committed(destination) or content == "second"
        storage.publish_directory(staging, destination)
        assert storage.is_committed(destination)
        assert storage.read_text(storage.join(destination, "file.txt")) == content
    names = [p.rsplit("/", 1)[-1] for p in storage.list_files(destination)]
    assert sorted(names) == [storage.COMMIT_MARKER, "file.txt"]
