"""`tpu-pipeline release --repair`: a damaged LATEST rebuilt from the versions folder, through `cli.main`."""

from __future__ import annotations

import datetime
import os

import pytest

from estimator_lib import fingerprints, release, storage
from pipelines import cli

T0 = datetime.datetime(2025, 1, 2, 3, 4, 5, 600000, tzinfo=datetime.timezone.utc)
T1 = T0 + datetime.timedelta(hours=1)


def make_saved_model(directory: str, weights: bytes) -> str:
    """A directory shaped like a SavedModel (publishing copies bytes; it never parses them)."""
    os.makedirs(os.path.join(directory, "variables"), exist_ok=True)
    with open(os.path.join(directory, "saved_model.pb"), "wb") as f:
        f.write(b"graph")
    with open(os.path.join(directory, "variables", "variables.data-00000-of-00001"), "wb") as f:
        f.write(weights)
    return directory


@pytest.fixture
def published(tmp_path):
    """A publish root with two versions, the newer one's files changed after publishing, and LATEST garbage."""
    root = str(tmp_path / "published")
    first = release.publish_model(make_saved_model(str(tmp_path / "e1"), b"w1"), root, now=T0)
    second = release.publish_model(make_saved_model(str(tmp_path / "e2"), b"w2"), root, now=T1)
    with open(os.path.join(second.uri, "saved_model.pb"), "wb") as f:
        f.write(b"changed")
    storage.write_bytes(os.path.join(root, "LATEST"), b"garbage")
    return root, first, second


def test_repair_rebuilds_latest_and_says_what_it_did(published, capsys):
    root, first, second = published
    assert cli.main(["release", "--repair", "--publish-root", root]) == 0
    changed = fingerprints.fingerprint_directory(second.uri)[:12]
    assert capsys.readouterr().out.splitlines() == [
        f"skipped version {second.version}: {second.uri}/publish.json names version {second.version!r} with "
        f"fingerprint {second.fingerprint[:12]}, but its files at {second.uri} hash to {changed}: they changed "
        "after publishing",
        f"{root}/LATEST is not JSON (it starts with b'garbage')",
        f"pointed {root}/LATEST at version {first.version} (fingerprint {first.fingerprint[:12]} verified), the "
        "newest intact version",
    ]
    assert release.latest(root) == first
    assert cli.main(["release", "--repair", "--publish-root", root]) == 0  # again: nothing to do
    assert capsys.readouterr().out == f"{root}/LATEST names version {first.version} and is intact; nothing to repair\n"


def test_repair_without_an_intact_version_exits_1(published, capsys):
    root, first, second = published
    os.remove(os.path.join(first.uri, storage.COMMIT_MARKER))
    assert cli.main(["release", "--repair", "--publish-root", root]) == 1
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err.startswith(
        f"tpu-pipeline release: error: {root}/LATEST is not JSON (it starts with b'garbage'), and no version under "
        f"{root}/versions is intact; {second.version}: "
    )
    assert captured.err.endswith(
        f"{first.version}: {first.uri} is incomplete (no _COMMITTED): its publish did not finish. Publish a model "
        "with `--baseline none` (its publish replaces the damaged pointer)\n"
    )
    assert storage.read_bytes(os.path.join(root, "LATEST")) == b"garbage"


def test_the_error_a_run_meets_names_the_command_that_repairs(published, capsys):
    root, first, _ = published
    with pytest.raises(release.LatestPointerError) as error:
        release.resolve_model("latest", root)
    command = str(error.value).split("`")[1]
    assert command == f"tpu-pipeline release --repair --publish-root {root}"
    assert cli.main(command.split()[1:]) == 0
    assert release.resolve_model("latest", root) == first.uri


def test_release_needs_repair_and_a_publish_root(capsys):
    for argv in (["release", "--publish-root", "/tmp/p"], ["release", "--repair"]):
        with pytest.raises(SystemExit) as exit_info:
            cli.main(argv)
        assert exit_info.value.code == 2
    assert "the following arguments are required: --publish-root" in capsys.readouterr().err
