"""Publishing after faults: a rerun of a run whose first attempt published and was killed, publish roots reached by
other paths (a symbolic link, a copy), and what a publish killed half-way leaves behind."""

from __future__ import annotations

import datetime
import os
import shlex
import shutil
import signal
import subprocess
import sys

import pytest

from estimator_lib import release, storage
from tests.lib.test_release import blessing, make_saved_model
from tests.repo import ROOT

T0 = datetime.datetime(2025, 1, 2, 3, 4, 5, 600000, tzinfo=datetime.timezone.utc)


def exported(base: str, attempt: str) -> str:
    """An export stage's output: the export folder `attempt` under `base`, whose assets.extra names its path (so
    its files' fingerprint differs between attempts; its weights and graph do not)."""
    export = make_saved_model(os.path.join(base, attempt))
    storage.write_text(os.path.join(export, "assets.extra", "export_metadata.json"), f'{{"export_dir": "{export}"}}')
    return export


def source(export: str) -> dict:
    return {"source": {"export_dir": export, "checkpoint": "model.ckpt-20", "global_step": 20}}


def test_a_rerun_reports_the_version_its_first_attempt_published_whatever_its_own_verdict(tmp_path):
    root, base = str(tmp_path / "published"), str(tmp_path / "run-1" / "exported")
    first_export = exported(base, "1700000000")
    first = release.release(first_export, blessing(True), root, source(first_export), based_on="none").published
    # Killed before it recorded that; the rerun exported the same model again and evaluated it against LATEST,
    # that is against itself: "identical to version V", not blessed.
    again = exported(base, "1700000040")
    identical = f"identical to version {first.version}; nothing to publish"
    for verdict in (blessing(False), blessing(True)):
        outcome = release.release(again, verdict, root, source(again), based_on=first.version)
        assert outcome == release.Release(
            first, f"published version {first.version} at {first.uri} (by an earlier attempt of this run)"
        )
    # The same model exported by another run is not this run's publication.
    other = exported(str(tmp_path / "run-2" / "exported"), "1700000099")
    assert release.release(other, blessing(True), root, source(other), based_on=first.version) == release.Release(
        None, f"not published: {identical}"
    )
    assert release.release(other, blessing(False), root, source(other), based_on=first.version).published is None
    assert os.listdir(os.path.join(root, "versions")) == [first.version]


def test_a_root_reached_through_a_symbolic_link_or_restored_from_a_copy_is_intact(tmp_path):
    target = tmp_path / "disk" / "published"
    target.parent.mkdir()
    link = tmp_path / "link"
    link.symlink_to(tmp_path / "disk")
    through_link = str(link / "published")
    model = release.publish_model(make_saved_model(str(tmp_path / "export")), through_link, now=T0)
    assert release.latest(str(target)).version == model.version
    pointer = storage.read_bytes(os.path.join(target, "LATEST"))
    repair = release.repair_latest(str(target))
    assert repair.damage == "" and repair.restored.version == model.version
    assert storage.read_bytes(os.path.join(target, "LATEST")) == pointer  # not rewritten: the link still reads it
    assert release.latest(through_link) == model
    copy = str(tmp_path / "restored")
    shutil.copytree(target, copy)
    assert release.latest(copy).uri == os.path.join(copy, "versions", model.version)
    assert release.repair_latest(copy).damage == ""


def test_the_repair_command_is_shell_quoted(tmp_path):
    root = str(tmp_path / "my models")
    release.publish_model(make_saved_model(str(tmp_path / "export")), root, now=T0)
    storage.write_bytes(os.path.join(root, "LATEST"), b"garbage")
    with pytest.raises(release.LatestPointerError) as error:
        release.latest(root)
    command = str(error.value).rsplit("`", 2)[1]
    assert shlex.split(command) == ["tpu-pipeline", "release", "--repair", "--publish-root", root]


_KILLED_PUBLISH = """
import os, signal, sys
from estimator_lib import storage
root = sys.argv[1]
staging = storage.local_staging_dir(os.path.join(root, "versions", "20250102T000000000000Z-0123456789ab"))
open(os.path.join(staging, "saved_model.pb"), "wb").write(b"half a model")
with storage.open_write(os.path.join(root, "LATEST")) as f:
    f.write(b'{"version": ')
    f.flush()
    os.kill(os.getpid(), signal.SIGKILL)
"""


def killed_publish(root: str) -> list[str]:
    """What a publish SIGKILLed while it copied a version and wrote LATEST leaves: its names under `root`."""
    command = [sys.executable, "-c", _KILLED_PUBLISH, root]
    proc = subprocess.run(command, env=dict(os.environ, PYTHONPATH=ROOT), capture_output=True, text=True, timeout=120)
    assert proc.returncode == -signal.SIGKILL, proc.stderr
    left = [name for name in os.listdir(root) if name.startswith("LATEST.tmp-")]
    left += [name for name in os.listdir(os.path.join(root, "versions")) if name.startswith(".staging-")]
    assert len(left) == 3  # LATEST's temporary, the staging folder and its owner record
    return left


def stopped_here(*args):
    raise KeyboardInterrupt


def test_what_a_killed_publish_left_is_cleaned_by_the_next_publish_and_by_repair(tmp_path, monkeypatch):
    root = str(tmp_path / "published")
    first = release.publish_model(make_saved_model(str(tmp_path / "e1"), b"w1"), root, now=T0)
    killed_publish(root)
    second = release.publish_model(make_saved_model(str(tmp_path / "e2"), b"w2"), root)
    assert sorted(os.listdir(root)) == ["LATEST", "versions"]
    assert sorted(os.listdir(os.path.join(root, "versions"))) == [first.version, second.version]

    killed_publish(root)
    # A publish stopped after its version was complete, before LATEST moved: the version is kept and reported.
    monkeypatch.setattr(storage, "replace_if_unchanged", stopped_here)
    with pytest.raises(KeyboardInterrupt):
        release.publish_model(make_saved_model(str(tmp_path / "e3"), b"w3"), root)
    monkeypatch.undo()
    (stopped,) = set(os.listdir(os.path.join(root, "versions"))) - {first.version, second.version}
    repair = release.repair_latest(root)
    assert repair.restored == second and repair.damage == ""
    assert sorted(os.listdir(root)) == ["LATEST", "versions"]
    assert sorted(os.listdir(os.path.join(root, "versions"))) == sorted([first.version, second.version, stopped])
    assert repair.lines() == [
        f"kept version {stopped}: intact, newer than the version LATEST names (a publish stopped before it "
        "moved LATEST, or a rollback); delete it if nobody needs it",
        f"{root}/LATEST names version {second.version} and is intact; nothing to repair",
    ]
