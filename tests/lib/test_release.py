"""Versioned publishing: versions, the LATEST pointer, resolution of baselines and warm starts, local and gs://."""

from __future__ import annotations

import dataclasses
import datetime
import json
import os
import uuid

import numpy as np
import pytest
import tensorflow as tf

from estimator_lib import release, storage
from estimator_lib.config import PrepareConfig
from estimator_lib.evaluation import Blessing, Check, Evaluation
from estimator_lib.export.saved_model import METADATA_FILE
from estimator_lib.fingerprints import fingerprint_directory

T0 = datetime.datetime(2025, 1, 2, 3, 4, 5, 600000, tzinfo=datetime.timezone.utc)
T1 = T0 + datetime.timedelta(hours=1)


# A SavedModel proto with no meta graph (saved_model_schema_version=1): publishing copies bytes, and the release
# stage's comparison with LATEST reads the variables (`identical_weights`).
EMPTY_GRAPHS = b"\x08\x01"


def write_variables(prefix: str, values: dict) -> str:
    """A TensorFlow checkpoint at `prefix` holding `values` ({name: array}), as a Saver writes one."""
    os.makedirs(os.path.dirname(prefix), exist_ok=True)
    names = sorted(values)
    tensors = [tf.constant(values[name]) for name in names]
    tf.raw_ops.SaveV2(prefix=prefix, tensor_names=names, shape_and_slices=[""] * len(names), tensors=tensors)
    return prefix


def make_saved_model(directory: str, weights: bytes = b"w1", variables: dict = None) -> str:
    """A directory shaped like a SavedModel: an empty proto and its variables, by default one variable `w` whose
    bytes (the data file's) are `weights`."""
    write_variables(
        os.path.join(directory, "variables", "variables"), variables or {"w": np.frombuffer(weights, np.uint8)}
    )
    with open(os.path.join(directory, "saved_model.pb"), "wb") as f:
        f.write(EMPTY_GRAPHS)
    return directory


def blessing(blessed: bool) -> Blessing:
    check = Check("threshold", "accuracy", 0.9, 0.8 if blessed else 0.95, blessed, "threshold: ...")
    return Blessing(blessed, (check,), {"accuracy": 0.9}, "accuracy", 10)


def test_publish_copies_the_export_and_points_latest_at_it(tmp_path):
    export = make_saved_model(str(tmp_path / "export"))
    root = str(tmp_path / "published")
    model = release.publish_model(export, root, metadata={"run": "a"}, now=T0)

    assert model.version == f"20250102T030405600000Z-{model.fingerprint[:12]}"
    assert model.uri == os.path.join(root, "versions", model.version)
    assert model.fingerprint == fingerprint_directory(export)
    with open(os.path.join(model.uri, "variables", "variables.data-00000-of-00001"), "rb") as f:
        assert f.read() == b"w1"
    assert storage.is_committed(model.uri)
    with open(os.path.join(model.uri, release.RECORD), encoding="utf-8") as f:
        assert json.load(f)["metadata"] == {"run": "a"}
    assert release.latest(root) == model
    assert sorted(os.listdir(root)) == ["LATEST", "versions"]  # no staging left behind


def test_a_second_publish_moves_latest_and_keeps_the_first_version(tmp_path):
    root = str(tmp_path / "published")
    first = release.publish_model(make_saved_model(str(tmp_path / "e1"), b"w1"), root, now=T0)
    second = release.publish_model(make_saved_model(str(tmp_path / "e2"), b"w2"), root, now=T1)

    assert release.latest(root).version == second.version
    assert sorted(os.listdir(os.path.join(root, "versions"))) == [first.version, second.version]
    assert first.fingerprint != second.fingerprint
    assert release.resolve_model("latest", root) == second.uri
    assert release.resolve_model(first.uri, root) == first.uri


def test_fingerprint_depends_on_content_and_names_only(tmp_path):
    a = make_saved_model(str(tmp_path / "a"), b"same")
    b = make_saved_model(str(tmp_path / "b"), b"same")
    c = make_saved_model(str(tmp_path / "c"), b"other")
    assert fingerprint_directory(a) == fingerprint_directory(b) != fingerprint_directory(c)
    with pytest.raises(FileNotFoundError, match="holds no file"):
        fingerprint_directory(str(tmp_path / "empty"))


def test_resolve_model_cases(tmp_path):
    root = str(tmp_path / "published")
    assert release.resolve_model("none", root) is None
    assert release.resolve_model("latest", root) is None  # nothing published yet: a first run
    export = make_saved_model(str(tmp_path / "export"))
    assert release.resolve_model(export, "") == export
    model = release.publish_model(export, root, now=T0)
    assert release.resolve_model(root, "") == model.uri  # a publish root given as the source
    with pytest.raises(ValueError, match="needs the publish root"):
        release.resolve_model("latest", "")
    with pytest.raises(FileNotFoundError, match="neither a publish root .* nor a SavedModel"):
        release.resolve_model(str(tmp_path / "nothing-here"), root)


def publish_predicting(tmp_path, root: str, metadata: dict) -> release.PublishedModel:
    """Publishes a tiny export whose metadata (`export.saved_model.METADATA_FILE`) is `metadata`."""
    export = make_saved_model(str(tmp_path / "export"))
    storage.write_text(os.path.join(export, METADATA_FILE), json.dumps(metadata))
    return release.publish_model(export, root, now=T0)


SPECIES = {"schema": {"label": {"name": "species", "task": "classification"}}}  # a built-in model's


def run(tmp_path, label: str, task=None) -> PrepareConfig:
    """A run's prepare config of `label` and `task` (None: inferred later) on a one-row CSV."""
    (tmp_path / "rows.csv").write_text(f"x,{label}\n1,a\n")
    return PrepareConfig(data=[str(tmp_path / "rows.csv")], label=label, task=task)


def test_auto_continues_the_published_model_of_the_runs_label_and_task(tmp_path):
    root = str(tmp_path / "published")
    first = release.resolve_sources(run(tmp_path, "species"), "none", "auto", root)
    # nothing published yet: evaluate still resolves "auto" when it runs
    assert (first.warm_start, first.reference, first.baseline, first.notes) == ("none", "none", "auto", ())
    model = publish_predicting(tmp_path, root, SPECIES)
    for task in (None, "classification"):  # no task given: the label alone is compared
        resolved = release.resolve_sources(run(tmp_path, "species", task), "none", "auto", root)
        assert (resolved.warm_start, resolved.reference, resolved.baseline, resolved.notes) == (
            "none",
            model.uri,
            "auto",
            (),
        )
    resolved = release.resolve_sources(run(tmp_path, "species"), "auto", "auto", root)
    assert (resolved.warm_start, resolved.reference) == (model.uri, model.uri)


@pytest.mark.parametrize(
    "label, task, this_run",
    [
        ("target", None, "'target'"),
        ("target", "classification", "'target' (classification)"),
        ("species", "regression", "'species' (regression)"),
    ],
)
def test_auto_starts_a_new_lineage_when_the_published_model_predicts_another_label_or_task(
    tmp_path, label, task, this_run
):
    root = str(tmp_path / "published")
    publish_predicting(tmp_path, root, SPECIES)
    resolved = release.resolve_sources(run(tmp_path, label, task), "auto", "auto", root)
    assert (resolved.warm_start, resolved.reference, resolved.baseline) == ("none", "none", "none")
    why = f"the published model under {root} predicts 'species' (classification); this run's label is {this_run}"
    ending = ": a new lineage, nothing to compare with or continue)"
    assert resolved.notes == (f"warm start: none ({why}{ending}", f"baseline: none ({why}{ending}")


def test_a_model_of_another_lineage_named_explicitly_is_refused_with_the_fix(tmp_path):
    root = str(tmp_path / "published")
    model = publish_predicting(tmp_path, root, SPECIES)
    why = "predicts 'species' (classification); this run's label is 'target'"
    with pytest.raises(ValueError) as e:
        release.resolve_sources(run(tmp_path, "target"), "none", "latest", root)
    assert str(e.value) == (
        f"--baseline latest: the published model under {root} {why}; give --baseline none, or another --publish-root"
    )
    with pytest.raises(ValueError) as e:
        release.resolve_sources(run(tmp_path, "target"), "latest", "none", root)
    assert str(e.value).startswith(f"--warm-start latest: the published model under {root} {why}; give --warm-start")
    with pytest.raises(ValueError) as e:
        release.resolve_sources(run(tmp_path, "target"), root, "auto", "")
    assert str(e.value) == (
        f"--warm-start {root}: the published model under {root} {why}; give --warm-start none, or a model that "
        "predicts 'target'"
    )
    with pytest.raises(ValueError) as e:
        release.resolve_sources(run(tmp_path, "target"), "none", model.uri, root)
    assert str(e.value) == (
        f"--baseline {model.uri}: the model {model.uri} {why}; give --baseline none, or a model that predicts 'target'"
    )


def test_a_user_model_fns_export_is_of_the_lineage_of_its_label(tmp_path):
    root = str(tmp_path / "published")
    model = publish_predicting(tmp_path, root, {"model_fn": "m.model_fn", "label": "digit", "feature_spec": {}})
    assert release.resolve_sources(run(tmp_path, "digit"), "none", "auto", root).reference == model.uri
    resolved = release.resolve_sources(run(tmp_path, "target", "classification"), "none", "auto", root)
    assert resolved.reference == "none"
    assert resolved.notes == (
        f"baseline: none (the published model under {root} predicts 'digit'; this run's label is 'target' "
        "(classification): a new lineage, nothing to compare with or continue)",
    )


def test_latest_refuses_a_pointer_to_an_incomplete_version(tmp_path):
    root = str(tmp_path / "published")
    model = release.publish_model(make_saved_model(str(tmp_path / "export")), root, now=T0)
    os.remove(os.path.join(model.uri, storage.COMMIT_MARKER))
    with pytest.raises(FileNotFoundError, match="missing or incomplete"):
        release.latest(root)


def test_publish_needs_a_saved_model(tmp_path):
    os.makedirs(tmp_path / "not-a-model")
    with pytest.raises(FileNotFoundError, match="not a SavedModel directory"):
        release.publish_model(str(tmp_path / "not-a-model"), str(tmp_path / "published"))


def test_release_publishes_only_a_blessed_model(tmp_path):
    export = make_saved_model(str(tmp_path / "export"))
    root = str(tmp_path / "published")
    assert release.latest_version(root) == "none"
    refused = release.release(export, blessing(False), root, based_on="none")
    assert refused.published is None and refused.reason.startswith("not published: not blessed")
    assert not os.path.exists(root)  # an unblessed run writes nothing
    done = release.release(export, blessing(True), root, {"source": {"run": "r1"}}, based_on="none")
    model = done.published
    assert model is not None and release.latest(root) == model
    assert done.reason == f"published version {model.version} at {model.uri}"
    assert release.latest_version(root) == model.version
    assert model.metadata["blessing"]["blessed"] is True
    assert model.metadata["source"] == {"run": "r1"}
    other = make_saved_model(str(tmp_path / "other"), b"w2")
    with pytest.raises(release.PublishConflictError, match="this run was evaluated against 'none'"):
        release.release(other, blessing(True), root, based_on="none")  # another run published since
    with pytest.raises(ValueError, match="publish_root is empty"):
        release.release(export, blessing(True), "")


def test_a_model_identical_to_the_published_one_is_not_published_again(tmp_path):
    root = str(tmp_path / "published")
    export = make_saved_model(str(tmp_path / "export"))
    first = release.release(export, blessing(True), root, based_on="none").published
    # The same weights exported again elsewhere: other files (export_metadata.json names the paths), same model.
    again = make_saved_model(str(tmp_path / "again"))
    os.makedirs(os.path.join(again, "assets.extra"))
    with open(os.path.join(again, "assets.extra", "export_metadata.json"), "w") as f:
        f.write('{"export_dir": "again"}')
    assert fingerprint_directory(again) != first.fingerprint
    for source, based_on in ((export, first.version), (again, first.version), (export, "none")):
        outcome = release.release(source, blessing(True), root, based_on=based_on)
        assert outcome == release.Release(
            None, f"not published: identical to version {first.version}; nothing to publish"
        )
    assert release.latest(root) == first
    assert os.listdir(os.path.join(root, "versions")) == [first.version]
    different = make_saved_model(str(tmp_path / "different"), b"w2")
    assert release.release(different, blessing(True), root, based_on=first.version).published is not None


KERNEL = np.arange(6, dtype=np.float32).reshape(2, 3)
WEIGHTS = {"dense/kernel": KERNEL, "dense/bias": np.zeros(3, np.float32), "global_step": np.int64(40)}
# What a training checkpoint holds beside the weights, and a SavedModel does not: Adam's slots and accumulators.
TRAINING = {
    "dense/kernel/Adam": KERNEL,
    "dense/kernel/Adam_1": KERNEL,
    "dense/bias/Adam": np.ones(3, np.float32),
    "beta1_power": np.float32(0.9),
    "beta2_power": np.float32(0.99),
}


def test_identical_weights_holds_for_the_published_variables_bitwise_beside_optimizer_state(tmp_path):
    published = make_saved_model(str(tmp_path / "published"), variables=WEIGHTS)
    checkpoint = write_variables(str(tmp_path / "model" / "model.ckpt-40"), {**WEIGHTS, **TRAINING})
    assert release.identical_weights(checkpoint, published)
    again = make_saved_model(str(tmp_path / "again"), variables=WEIGHTS)  # an export's variables/variables
    assert release.identical_weights(os.path.join(again, "variables", "variables"), published)
    no_step = make_saved_model(
        str(tmp_path / "no_step"), variables={k: WEIGHTS[k] for k in ("dense/kernel", "dense/bias")}
    )
    assert release.identical_weights(checkpoint, no_step)  # an export without the step: the rest is compared
    bias = WEIGHTS["dense/bias"]
    changes = {
        "a value one ulp apart": {"dense/bias": np.nextafter(bias, np.float32(1))},
        "-0.0 for 0.0": {"dense/bias": -bias},
        "another dtype": {"dense/bias": bias.astype(np.float64)},
        "another shape": {"dense/bias": np.zeros(4, np.float32)},
        "another step": {"global_step": np.int64(41)},
        "a model variable more": {"dense_1/kernel": KERNEL},
    }
    for why, change in changes.items():
        changed = write_variables(str(tmp_path / why.replace(" ", "_") / "ckpt"), {**WEIGHTS, **TRAINING, **change})
        assert not release.identical_weights(changed, published), why
    missing = write_variables(str(tmp_path / "missing" / "ckpt"), {"dense/kernel": KERNEL, "global_step": np.int64(40)})
    assert not release.identical_weights(missing, published)


def test_a_verdict_on_the_published_versions_own_weights_is_identical_to_it_blessed_or_not(tmp_path):
    root = str(tmp_path / "published")
    version = release.publish_model(make_saved_model(str(tmp_path / "export"), variables=WEIGHTS), root, now=T0)
    checkpoint = write_variables(str(tmp_path / "model" / "model.ckpt-40"), {**WEIGHTS, **TRAINING})
    message = f"identical to version {version.version}; nothing to publish"
    for passed in (True, False):  # its metrics, through another graph, differ by rounding either way
        check = Check("baseline", "accuracy", 0.9, 0.9, passed, "vs baseline 0.9000: difference +0.0000 ...")
        verdict = Blessing(passed, (check,), {"accuracy": 0.9}, "accuracy", 10, version.uri, {"accuracy": 0.9})
        evaluation = Evaluation({"accuracy": 0.9}, 40, checkpoint, verdict)
        judged = release.checked_identity(evaluation, version.uri).blessing
        assert judged.blessed is False and judged.summary() == message and judged.reasons == (message,)
        assert [(c.name, c.passed, c.message) for c in judged.checks] == [("identical", False, message)]
        assert Blessing.from_dict(json.loads(judged.to_json())) == judged
        outcome = release.release(str(tmp_path / "export"), judged, root, based_on=version.version)
        assert outcome == release.Release(None, f"not published: {message}")
        # Not the published version's folder, or other weights: the verdict stands.
        plain = make_saved_model(str(tmp_path / "plain"), variables=WEIGHTS)
        assert release.checked_identity(evaluation, plain) == evaluation
        assert release.checked_identity(evaluation, None) == evaluation
        other = write_variables(str(tmp_path / "other" / "ckpt"), {**WEIGHTS, "dense/bias": np.ones(3, np.float32)})
        assert (
            release.checked_identity(dataclasses.replace(evaluation, checkpoint=other), version.uri).blessing == verdict
        )
    assert release.latest(root) == version


def test_a_resumed_run_whose_earlier_attempt_published_its_export_reports_that_version(tmp_path):
    root = str(tmp_path / "published")
    export = make_saved_model(str(tmp_path / "export"))
    source = {"source": {"export_dir": export, "global_step": 20}}
    first = release.release(export, blessing(True), root, source, based_on="none").published
    resumed = release.release(export, blessing(True), root, source, based_on=first.version)
    done = f"published version {first.version} at {first.uri} (by an earlier attempt of this run)"
    assert resumed == release.Release(first, done)
    # The same model from another run's export is not this run's publication: not published again.
    other = {"source": {"export_dir": str(tmp_path / "run-2" / "export"), "global_step": 20}}
    assert release.release(export, blessing(True), root, other, based_on=first.version).published is None
    assert os.listdir(os.path.join(root, "versions")) == [first.version]


def test_publish_and_resolve_on_cloud_storage(gcs_prefix, tmp_path):
    export = make_saved_model(str(tmp_path / "export"))
    root = f"{gcs_prefix}/published"
    first = release.publish_model(export, root, now=T0)
    assert first.uri == f"{root}/versions/{first.version}"
    assert storage.is_committed(first.uri)
    assert storage.read_bytes(f"{first.uri}/variables/variables.data-00000-of-00001") == b"w1"
    assert fingerprint_directory(first.uri) == first.fingerprint
    second = release.publish_model(make_saved_model(str(tmp_path / "e2"), b"w2"), root, now=T1)
    assert release.resolve_model("latest", root) == second.uri
    # gs:// -> gs:// copy (a baseline published in one bucket, republished in another).
    again = release.publish_model(second.uri, f"{gcs_prefix}/mirror", now=T1)
    assert again.fingerprint == second.fingerprint


# -- compare-and-swap on LATEST ---------------------------------------------------------------------------------------
@pytest.fixture(params=["local", "gcs"])
def publish_root(request, tmp_path):
    if request.param == "local":
        return str(tmp_path / "published")
    # Not gcs_prefix: the test name holds "[gcs]", which a glob would read as a character class.
    return f"{request.getfixturevalue('gcs_emulator')}/release-{uuid.uuid4().hex[:8]}/published"


def test_a_publish_based_on_a_stale_latest_fails_and_leaves_the_other_runs_version(publish_root, tmp_path):
    first = release.publish_model(make_saved_model(str(tmp_path / "e1"), b"w1"), publish_root, now=T0)
    # Runs A and B both evaluated against `first`; B publishes first.
    b = release.publish_model(
        make_saved_model(str(tmp_path / "eb"), b"wb"), publish_root, now=T1, based_on=first.version
    )
    with pytest.raises(release.PublishConflictError) as error:
        release.publish_model(
            make_saved_model(str(tmp_path / "ea"), b"wa"), publish_root, now=T1, based_on=first.version
        )
    assert str(error.value).startswith(
        f"{storage.join(publish_root, 'LATEST')} names {b.version!r}, but this run was evaluated against "
        f"{first.version!r}: another run published in between"
    )
    assert release.latest(publish_root) == b
    assert len(storage.glob(storage.join(publish_root, "versions", "*", "saved_model.pb"))) == 2


def test_a_first_publish_expects_nothing_published(publish_root, tmp_path):
    model = release.publish_model(make_saved_model(str(tmp_path / "e1")), publish_root, now=T0, based_on="none")
    assert release.latest(publish_root) == model
    with pytest.raises(release.PublishConflictError, match="but this run was evaluated against 'none'"):
        release.publish_model(make_saved_model(str(tmp_path / "e2"), b"w2"), publish_root, now=T1, based_on="none")


def test_latest_moving_while_a_version_is_copied_fails_that_publish(publish_root, tmp_path, monkeypatch):
    other = make_saved_model(str(tmp_path / "other"), b"other")
    copy_tree = release._copy_tree
    winner = []

    def copy_while_another_run_publishes(source, staging):
        copy_tree(source, staging)
        if source != other and not winner:  # the other run publishes once, in the middle of this run's copy
            winner.append(release.publish_model(other, publish_root, now=T1))

    monkeypatch.setattr(release, "_copy_tree", copy_while_another_run_publishes)
    with pytest.raises(release.PublishConflictError, match=r"moved while .* was being published \(now: "):
        release.publish_model(make_saved_model(str(tmp_path / "mine"), b"mine"), publish_root, now=T0)
    assert release.latest(publish_root) == winner[0]
    versions = storage.glob(storage.join(publish_root, "versions", "*", "saved_model.pb"))
    assert versions == [storage.join(winner[0].uri, "saved_model.pb")]  # the losing version was removed


@pytest.mark.parametrize("where", ["local", "gcs"])
def test_replace_if_unchanged_is_a_compare_and_swap(where, tmp_path, request):
    base = (
        str(tmp_path) if where == "local" else f"{request.getfixturevalue('gcs_emulator')}/cas-{uuid.uuid4().hex[:8]}"
    )
    path = storage.join(base, "pointer")
    text, token = storage.read_versioned(path)
    assert (text, token) == (None, storage.ABSENT)
    storage.replace_if_unchanged(path, "one", token)
    text, token = storage.read_versioned(path)
    assert text == "one"
    with pytest.raises(storage.ConcurrentUpdateError):
        storage.replace_if_unchanged(path, "two", storage.ABSENT)  # it exists now
    storage.replace_if_unchanged(path, "two", token)
    with pytest.raises(storage.ConcurrentUpdateError):
        storage.replace_if_unchanged(path, "three", token)  # stale: "two" replaced "one"
    assert storage.read_versioned(path)[0] == "two"
