"""The LATEST pointer checked when read, read without checking by a run that does not compare with it, and
rebuilt by `repair_latest` from the versions folder; local and gs://."""

from __future__ import annotations

import datetime
import hashlib
import json
import os

import pytest

from estimator_lib import fingerprints, release, storage
from estimator_lib.config import PrepareConfig

T0 = datetime.datetime(2025, 1, 2, 3, 4, 5, 600000, tzinfo=datetime.timezone.utc)
T1 = T0 + datetime.timedelta(hours=1)
T2 = T0 + datetime.timedelta(hours=2)


def make_saved_model(directory: str, weights: bytes = b"w1") -> str:
    """A directory shaped like a SavedModel (publishing copies bytes; it never parses them)."""
    os.makedirs(os.path.join(directory, "variables"), exist_ok=True)
    with open(os.path.join(directory, "saved_model.pb"), "wb") as f:
        f.write(b"graph")
    with open(os.path.join(directory, "variables", "variables.data-00000-of-00001"), "wb") as f:
        f.write(weights)
    return directory


def publish(tmp_path, root: str, weights: bytes, now: datetime.datetime) -> release.PublishedModel:
    return release.publish_model(make_saved_model(str(tmp_path / weights.decode()), weights), root, now=now)


def write_pointer(root: str, data: bytes) -> None:
    storage.write_bytes(storage.join(root, "LATEST"), data)


def pointer_json(model: release.PublishedModel, **changes) -> bytes:
    return json.dumps({**model.to_dict(), **changes}).encode()


def fix(root: str) -> str:
    return f"; rebuild it from {root}/versions with `tpu-pipeline release --repair --publish-root {root}`"


@pytest.fixture
def root(tmp_path):
    return str(tmp_path / "published")


def test_no_pointer_and_no_version_is_nothing_published(root):
    assert release.latest(root) is None
    assert release.resolve_model("latest", root) is None
    assert release.latest_version(root) == "none"
    os.makedirs(os.path.join(root, "versions", "20250101T000000000000Z-abandoned"))  # never committed
    assert release.latest(root) is None


def test_a_missing_pointer_beside_published_versions_is_damaged(root, tmp_path):
    publish(tmp_path, root, b"w1", T0)
    os.remove(os.path.join(root, "LATEST"))
    with pytest.raises(release.LatestPointerError) as error:
        release.resolve_model("latest", root)
    assert str(error.value) == f"{root}/LATEST is missing, but {root}/versions holds published versions" + fix(root)
    assert error.value.pointer == f"{root}/LATEST"


@pytest.mark.parametrize(
    "data, problem",
    [
        (b"", "is empty"),
        (b" \n", "is empty"),
        (b'{"version": "2025', 'is not JSON (it starts with b\'{"version": "2025\')'),
        (b"garbage", "is not JSON (it starts with b'garbage')"),
        (b"[1, 2]", "is not a JSON object (it starts with b'[1, 2]')"),
        (b'{"version": "v"}', "is partial: missing or malformed uri, fingerprint, published_at"),
        (
            b'{"version": "v", "uri": 3, "fingerprint": "f", "published_at": "t"}',
            "is partial: missing or malformed uri",
        ),
    ],
)
def test_an_empty_unparsable_or_partial_pointer_names_the_file_and_the_repair(root, tmp_path, data, problem):
    publish(tmp_path, root, b"w1", T0)
    write_pointer(root, data)
    with pytest.raises(release.LatestPointerError) as error:
        release.latest(root)
    assert str(error.value) == f"{root}/LATEST {problem}" + fix(root)
    assert isinstance(error.value, ValueError)


def test_a_pointer_that_is_not_utf8_must_be_deleted_first(root, tmp_path):
    publish(tmp_path, root, b"w1", T0)
    write_pointer(root, b"\xff\xfe\x00")
    message = (
        f"{root}/LATEST is not UTF-8 text (it starts with b'\\xff\\xfe\\x00'); delete it (nothing else reads it), "
        f"then run `tpu-pipeline release --repair --publish-root {root}`"
    )
    for read in (release.latest, release.repair_latest):
        with pytest.raises(release.LatestPointerError) as error:
            read(root)
        assert str(error.value) == message
    os.remove(os.path.join(root, "LATEST"))
    assert release.repair_latest(root).restored == release.latest(root)


def test_a_pointer_outside_its_publish_root_is_not_trusted(root, tmp_path):
    model = publish(tmp_path, root, b"w1", T0)
    elsewhere = make_saved_model(str(tmp_path / "elsewhere"))
    write_pointer(root, pointer_json(model, uri=elsewhere))
    with pytest.raises(release.LatestPointerError) as error:
        release.resolve_model("latest", root)
    problem = f"names version {model.version!r} but points outside its publish root: {elsewhere} (expected {model.uri})"
    assert str(error.value) == f"{root}/LATEST {problem}" + fix(root)
    write_pointer(root, pointer_json(model, version="../../elsewhere", uri=elsewhere))
    with pytest.raises(release.LatestPointerError, match=r"names version '\.\./\.\./elsewhere', which is not a folder"):
        release.latest(root)


def test_a_pointer_to_another_version_folder_is_damaged(root, tmp_path):
    first = publish(tmp_path, root, b"w1", T0)
    second = publish(tmp_path, root, b"w2", T1)
    write_pointer(root, pointer_json(second, uri=first.uri))
    with pytest.raises(release.LatestPointerError) as error:
        release.latest(root)
    assert error.value.problem == (
        f"names version {second.version!r} but points another folder: {first.uri} (expected {second.uri})"
    )


def test_a_pointer_to_a_missing_version_is_damaged_and_a_file_not_found(root, tmp_path):
    model = publish(tmp_path, root, b"w1", T0)
    storage.delete_tree(model.uri)
    with pytest.raises(release.MissingVersionError) as error:
        release.latest(root)
    assert str(error.value) == (
        f"{root}/LATEST names version {model.version!r}, but {model.uri} is missing or incomplete (no _COMMITTED)"
        + fix(root)
    )
    assert isinstance(error.value, FileNotFoundError) and isinstance(error.value, release.LatestPointerError)


def test_a_version_whose_files_changed_does_not_match_its_fingerprint(root, tmp_path):
    model = publish(tmp_path, root, b"w1", T0)
    with open(os.path.join(model.uri, "variables", "variables.data-00000-of-00001"), "wb") as f:
        f.write(b"tampered")
    actual = fingerprints.fingerprint_directory(model.uri)
    with pytest.raises(release.LatestPointerError) as error:
        release.latest(root)
    assert str(error.value) == (
        f"{root}/LATEST names version {model.version!r} with fingerprint {model.fingerprint[:12]}, but its files "
        f"at {model.uri} hash to {actual[:12]}: they changed after publishing" + fix(root)
    )


def test_an_intact_pointer_reads_as_before(root, tmp_path):
    model = publish(tmp_path, root, b"w1", T0)
    assert release.latest(root) == model
    relative = os.path.relpath(root)  # the same root spelled another way
    assert release.latest(relative).uri == os.path.join(relative, "versions", model.version)


# -- a run that does not compare with LATEST -----------------------------------------------------------------
@pytest.mark.parametrize("damage", [b"garbage", b"", None])
def test_baseline_none_is_not_blocked_and_its_publish_replaces_a_damaged_pointer(root, tmp_path, damage):
    publish(tmp_path, root, b"w1", T0)
    pointer = os.path.join(root, "LATEST")
    if damage is None:
        os.remove(pointer)
    else:
        write_pointer(root, damage)
    data = tmp_path / "data.csv"
    data.write_text("a,b\n1,2\n")
    resolved = release.resolve_sources(PrepareConfig(data=[str(data)], label="b"), "none", "none", root)  # resolve
    assert (resolved.warm_start, resolved.reference) == ("none", "none")
    assert release.resolve_model("none", root) is None  # train (warm start) and evaluate (baseline)
    based_on = release.latest_version(root)  # evaluate: what the release's compare-and-swap expects
    if damage is None:
        assert based_on == "none"
    else:
        assert based_on == "damaged-" + hashlib.sha256(damage).hexdigest()[:12]
    model = release.publish_model(make_saved_model(str(tmp_path / "new"), b"new"), root, now=T1, based_on=based_on)
    assert release.latest(root) == model


def test_a_publish_based_on_a_damaged_pointer_fails_when_it_was_repaired_since(root, tmp_path):
    first = publish(tmp_path, root, b"w1", T0)
    write_pointer(root, b"garbage")
    based_on = release.latest_version(root)
    release.repair_latest(root)
    with pytest.raises(release.PublishConflictError) as error:
        release.publish_model(make_saved_model(str(tmp_path / "new"), b"new"), root, now=T1, based_on=based_on)
    assert str(error.value).startswith(
        f"{root}/LATEST names {first.version!r}, but this run was evaluated against {based_on!r}"
    )


# -- repair ----------------------------------------------------------------------------------------------------
def test_repair_points_latest_at_the_newest_intact_version_and_says_what_it_skipped(root, tmp_path):
    first = publish(tmp_path, root, b"w1", T0)
    second = publish(tmp_path, root, b"w2", T1)
    third = publish(tmp_path, root, b"w3", T2)
    with open(os.path.join(third.uri, "saved_model.pb"), "wb") as f:
        f.write(b"changed")
    os.remove(os.path.join(second.uri, "publish.json"))
    os.makedirs(os.path.join(root, "versions", "20260101T000000000000Z-unfinished"))
    open(os.path.join(root, "versions", "20260101T000000000000Z-unfinished", "saved_model.pb"), "w").close()
    write_pointer(root, b"garbage")

    done = release.repair_latest(root)
    assert done.restored == first == release.latest(root)
    assert done.damage == "is not JSON (it starts with b'garbage')"
    assert [version for version, _ in done.skipped] == [
        "20260101T000000000000Z-unfinished",
        third.version,
        second.version,
    ]
    unfinished = f"{root}/versions/20260101T000000000000Z-unfinished"
    assert done.skipped[0][1] == f"{unfinished} is incomplete (no _COMMITTED): its publish did not finish"
    changed = fingerprints.fingerprint_directory(third.uri)[:12]
    assert done.skipped[1][1] == (
        f"{third.uri}/publish.json names version {third.version!r} with fingerprint {third.fingerprint[:12]}, but "
        f"its files at {third.uri} hash to {changed}: they changed after publishing"
    )
    assert done.skipped[2][1] == f"{second.uri}/publish.json is missing"
    assert done.lines()[-2:] == [
        f"{root}/LATEST is not JSON (it starts with b'garbage')",
        f"pointed {root}/LATEST at version {first.version} (fingerprint {first.fingerprint[:12]} verified), "
        "the newest intact version",
    ]


def test_repair_keeps_an_intact_pointer_even_to_an_older_version(root, tmp_path):
    first = publish(tmp_path, root, b"w1", T0)
    second = publish(tmp_path, root, b"w2", T1)
    write_pointer(root, pointer_json(first))  # a rollback: deliberate, intact
    done = release.repair_latest(root)
    assert (done.damage, done.restored, done.skipped, done.kept) == ("", first, (), (second.version,))
    assert done.lines()[1:] == [f"{root}/LATEST names version {first.version} and is intact; nothing to repair"]
    assert release.latest(root) == first
    assert release.repair_latest(str(tmp_path / "empty")).lines() == [
        f"{tmp_path}/empty/LATEST is absent: nothing is published and is intact; nothing to repair"
    ]


def test_repair_without_an_intact_version_fails_and_writes_nothing(root, tmp_path):
    model = publish(tmp_path, root, b"w1", T0)
    os.remove(os.path.join(model.uri, "_COMMITTED"))
    write_pointer(root, b"")
    with pytest.raises(release.NoIntactVersionError) as error:
        release.repair_latest(root)
    assert str(error.value) == (
        f"{root}/LATEST is empty, and no version under {root}/versions is intact; {model.version}: {model.uri} is "
        "incomplete (no _COMMITTED): its publish did not finish. Publish a model with "
        "`--baseline none` (its publish replaces the damaged pointer)"
    )
    assert storage.read_bytes(os.path.join(root, "LATEST")) == b""


def test_repair_that_loses_the_compare_and_swap_writes_nothing(root, tmp_path, monkeypatch):
    publish(tmp_path, root, b"w1", T0)
    write_pointer(root, b"garbage")
    intact_version = release.intact_version

    def another_run_publishes(*args):
        write_pointer(root, b"another")
        return intact_version(*args)

    monkeypatch.setattr(release, "intact_version", another_run_publishes)
    with pytest.raises(release.PublishConflictError, match="changed while it was being repaired; nothing was written"):
        release.repair_latest(root)
    assert storage.read_bytes(os.path.join(root, "LATEST")) == b"another"


def test_damage_and_repair_on_cloud_storage(gcs_prefix, tmp_path):
    root = f"{gcs_prefix}/published"
    first = publish(tmp_path, root, b"w1", T0)
    second = publish(tmp_path, root, b"w2", T1)
    storage.write_bytes(f"{second.uri}/saved_model.pb", b"changed")
    write_pointer(root, b"garbage")
    with pytest.raises(release.LatestPointerError) as error:
        release.resolve_model("latest", root)
    assert str(error.value) == f"{root}/LATEST is not JSON (it starts with b'garbage')" + fix(root)
    done = release.repair_latest(root)
    assert [v for v, _ in done.skipped] == [second.version]
    assert done.restored == first == release.latest(root)
    storage.write_bytes(f"{root}/LATEST", pointer_json(first, uri=f"{gcs_prefix}/elsewhere"))
    with pytest.raises(release.LatestPointerError, match="points outside its publish root"):
        release.latest(root)
