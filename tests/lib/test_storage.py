"""storage on local directories and on a real Cloud Storage emulator server."""

from __future__ import annotations

import pytest
from repo import ROOT

from estimator_lib import fingerprints, storage


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


def test_the_content_token_changes_with_the_content_only(root):
    pattern = storage.join(root, "data", "*.csv")
    storage.write_text(storage.join(root, "data", "a.csv"), "x\n1\n")
    storage.write_text(storage.join(root, "data", "b.csv"), "x\n2\n")
    token = fingerprints.content_token([pattern])
    assert fingerprints.content_token([pattern]) == token and len(token) == 64
    storage.write_text(storage.join(root, "data", "b.csv"), "x\n3\n")  # same size, same name, new content
    changed = fingerprints.content_token([pattern])
    assert changed != token
    storage.write_text(storage.join(root, "data", "c.csv"), "x\n4\n")  # a new file matches the glob
    assert fingerprints.content_token([pattern]) not in (token, changed)
    with pytest.raises(FileNotFoundError, match=r"matches no file; check the data path"):
        fingerprints.content_token([storage.join(root, "none", "*.csv")])


def test_publish_directory_is_all_or_nothing_and_replaces(root, tmp_path):
    destination = storage.join(root, "published")
    for content in ("first", "second"):
        staging = storage.local_staging_dir(destination, local_root=str(tmp_path))
        with open(f"{staging}/file.txt", "w") as f:
            f.write(content)
        assert not storage.is_committed(destination) or content == "second"
        storage.commit_directory(staging, destination)
        assert storage.is_committed(destination)
        assert storage.read_text(storage.join(destination, "file.txt")) == content
    names = [p.rsplit("/", 1)[-1] for p in storage.list_files(destination)]
    assert sorted(names) == [storage.COMMIT_MARKER, "file.txt"]


_ABANDON = """
import sys
from estimator_lib import storage
staging = storage.local_staging_dir(sys.argv[1])
open(staging + "/part-0.txt", "w").write("half written")
print(staging, flush=True)
import os, signal
os.kill(os.getpid(), signal.SIGKILL)
"""


def _abandoned_staging(destination: str) -> str:
    """A staging directory for `destination` whose owner was killed (SIGKILL, so no cleanup ran)."""
    import os
    import subprocess
    import sys

    repo = ROOT
    proc = subprocess.run(
        [sys.executable, "-c", _ABANDON, destination],
        env=dict(os.environ, PYTHONPATH=repo),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == -9, proc.stderr
    staging = proc.stdout.strip()
    assert os.path.isdir(staging) and os.path.exists(staging + ".owner")
    return staging


def test_a_new_staging_deletes_the_ones_killed_owners_left_and_keeps_the_rest(tmp_path):
    import os

    destination = str(tmp_path / "out")
    dead = _abandoned_staging(destination)
    other_destination = _abandoned_staging(str(tmp_path / "other"))  # another destination's: not ours to judge
    live = storage.local_staging_dir(destination)  # this process's own, still in use
    unowned = tmp_path / ".staging-out-0123456789ab"  # no owner record (e.g. an older version's): kept
    unowned.mkdir()
    foreign = tmp_path / ".staging-out-feedfacecafe"  # owned by another host: cannot tell, kept
    foreign.mkdir()
    (tmp_path / ".staging-out-feedfacecafe.owner").write_text('{"host": "elsewhere", "pid": 1, "started": "x"}')
    assert not os.path.exists(dead)  # creating `live` already deleted it: its owner is gone

    fresh = storage.local_staging_dir(destination)

    names = sorted(os.listdir(tmp_path))
    expected = [os.path.basename(p) for p in (live, fresh, other_destination, str(unowned), str(foreign))]
    expected += [os.path.basename(p) + ".owner" for p in (live, fresh, other_destination, str(foreign))]
    assert names == sorted(expected)
    storage.discard_staging(live)
    storage.discard_staging(fresh)
    assert not os.path.exists(live) and not os.path.exists(live + ".owner")


def test_gcs_outputs_stage_locally_and_a_killed_owners_staging_is_deleted(tmp_path, monkeypatch):
    import os
    import tempfile

    monkeypatch.setenv("TMPDIR", str(tmp_path))  # the killed subprocess's temp dir
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))  # and this process's (cached by tempfile)
    root = tmp_path / "estimator-lib-staging"
    dead = _abandoned_staging("gs://bucket/run-1/predictions")
    assert os.path.dirname(dead) == str(root)
    live = storage.local_staging_dir("gs://bucket/run-2/predictions")  # another gs:// output's, in use

    assert not os.path.exists(dead) and not os.path.exists(dead + ".owner")
    assert sorted(os.listdir(root)) == sorted([os.path.basename(live), os.path.basename(live) + ".owner"])
    storage.discard_staging(live)
    assert os.listdir(root) == []


def test_publish_swaps_the_previous_output_out_and_leaves_nothing_beside_it(tmp_path, monkeypatch):
    import os

    destination = str(tmp_path / "published")
    for atomic_swap in (True, False):  # False: a file system without RENAME_EXCHANGE (two renames)
        if not atomic_swap:
            monkeypatch.setattr(storage, "_exchange", lambda a, b: False)
        for content in ("first", "second"):
            staging = storage.local_staging_dir(destination)
            with open(f"{staging}/file.txt", "w") as f:
                f.write(content + str(atomic_swap))
            storage.commit_directory(staging, destination)
            assert storage.read_text(os.path.join(destination, "file.txt")) == content + str(atomic_swap)
            assert sorted(os.listdir(tmp_path)) == ["published"]  # no staging, owner record or old copy
            assert sorted(os.listdir(destination)) == [storage.COMMIT_MARKER, "file.txt"]


def test_exchange_swaps_two_directories():
    import os
    import tempfile

    with tempfile.TemporaryDirectory() as root:
        a, b = os.path.join(root, "a"), os.path.join(root, "b")
        os.makedirs(a)
        os.makedirs(b)
        open(os.path.join(a, "from-a"), "w").close()
        if not storage._exchange(a, b):
            pytest.skip("this system has no renameat2 RENAME_EXCHANGE")
        assert os.listdir(b) == ["from-a"] and os.listdir(a) == []
        with pytest.raises(FileNotFoundError):
            storage._exchange(a, os.path.join(root, "missing"))
