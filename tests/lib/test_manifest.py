"""`estimator_lib.manifest`: what a stage manifest holds, and how a recorded stage and its rerun compare."""

from __future__ import annotations

import os
import platform

import pytest

from estimator_lib import manifest

VERSIONS = {"python": "3.11.7", "tensorflow": "2.15.1", "commit": "a" * 40, "modified": False, "image": None}
CPU_MACHINE = {"kind": "CPU", "type": "x86_64", "cores": 2, "cpu": "Xeon", "isa": ["avx2", "avx512f"], "kernels": {}}


def stage(name="train", inputs=None, config=None, outputs=None, versions=None, machine=None) -> dict:
    return manifest.stage_manifest(
        name,
        inputs if inputs is not None else {"dataset": {"uri": "/run-1/dataset", "fingerprint": "d1"}},
        config if config is not None else {"job": {"training": {"seed": 42, "train_steps": 20}}},
        outputs if outputs is not None else {"model": {"uri": "/run-1/model", "fingerprint": "m1"}},
        {"versions": versions or VERSIONS, "machine": machine or CPU_MACHINE},
        "2026-01-01T00:00:00+00:00",
        "2026-01-01T00:01:00+00:00",
    )


def test_a_manifest_holds_inputs_config_seeds_versions_machine_outputs_and_times():
    record = stage()
    assert record == {
        "format_version": 1,
        "stage": "train",
        "inputs": {"dataset": {"uri": "/run-1/dataset", "fingerprint": "d1"}},
        "config": {"job": {"training": {"seed": 42, "train_steps": 20}}},
        "seeds": {"job.training.seed": 42},
        "versions": VERSIONS,
        "machine": CPU_MACHINE,
        "outputs": {"model": {"uri": "/run-1/model", "fingerprint": "m1"}},
        "started": "2026-01-01T00:00:00+00:00",
        "ended": "2026-01-01T00:01:00+00:00",
    }


def test_seeds_are_found_at_any_depth_by_their_key():
    config = {"job": {"training": {"seed": 7}}, "split_seed": 3, "other": {"seeds": {"a": 1}}, "steps": 5}
    assert manifest.seeds_in(config) == {"job.training.seed": 7, "split_seed": 3, "other.seeds.a": 1}


def test_versions_name_python_the_deciding_packages_and_the_code():
    found = manifest.versions("b" * 40, True, "repo@sha256:" + "0" * 64)
    assert found["python"] == platform.python_version()
    assert found["tensorflow"].startswith("2.15.") and found["tensorflow-estimator"] == "2.15.0"
    assert found["kfp"].startswith("2.13.") and found[manifest.PACKAGE]
    assert (found["commit"], found["modified"], found["image"]) == ("b" * 40, True, "repo@sha256:" + "0" * 64)


def test_the_machine_is_a_tpu_of_its_type_or_the_host_cpu():
    assert manifest.machine({"use_tpu": True, "num_cores": 8}, "v3-8") == {"kind": "TPU", "type": "v3-8", "cores": 8}
    assert manifest.machine({"use_tpu": True, "num_cores": 8}, None)["type"] == "unknown"
    host = manifest.machine({}, "v3-8", {"TF_ENABLE_ONEDNN_OPTS": "0"})
    assert {k: host[k] for k in ("kind", "type", "cores")} == {
        "kind": "CPU",
        "type": platform.machine(),
        "cores": os.cpu_count(),
    }
    assert (host["cpu"], host["isa"]) == manifest.processor() and host["kernels"] == {"TF_ENABLE_ONEDNN_OPTS": "0"}
    assert manifest.machine({}, None)["kernels"] == {}


def test_the_processor_is_its_model_and_the_isa_flags_that_pick_kernels(tmp_path):
    cpuinfo = tmp_path / "cpuinfo"
    core = (
        "processor\t: {n}\nmodel name\t: AMD EPYC 9B14\n"
        "flags\t\t: fpu sse4_2 avx avx2 fma avx512f avx512_bf16 rdtscp\n\n"
    )
    cpuinfo.write_text(core.format(n=0) + core.format(n=1))
    assert manifest.processor(str(cpuinfo)) == (
        "AMD EPYC 9B14",
        ["sse4_2", "avx", "avx2", "fma", "avx512f", "avx512_bf16"],
    )
    arm = tmp_path / "arm"
    arm.write_text("processor\t: 0\nFeatures\t: fp asimd\n")
    assert manifest.processor(str(arm)) == (None, [])
    assert manifest.processor(str(tmp_path / "absent")) == (None, [])


def test_git_commit_and_modified_outside_a_checkout_are_none(tmp_path):
    assert manifest.git_commit(str(tmp_path)) is None and manifest.git_modified(str(tmp_path)) is None


def test_a_manifest_round_trips_through_its_file(tmp_path):
    path = manifest.write_manifest(str(tmp_path), stage())
    assert path == os.path.join(str(tmp_path), manifest.MANIFEST_FILE)
    assert manifest.read_manifest(path) == stage()


def test_a_missing_manifest_is_named():
    with pytest.raises(FileNotFoundError, match=r"/nowhere/stage_manifest.json: no stage manifest there"):
        manifest.read_manifest("/nowhere/stage_manifest.json")


def test_differences_are_dotted_keys_with_both_values():
    a = {"job": {"training": {"seed": 42, "steps": 20}}, "gone": 1}
    b = {"job": {"training": {"seed": 7, "steps": 20}}, "new": "x"}
    assert manifest.differences(a, b) == [
        "gone: 1 -> (absent)",
        "job.training.seed: 42 -> 7",
        'new: (absent) -> "x"',
    ]
    assert manifest.differences(a, a) == []


def test_same_outputs_are_identical_whatever_the_paths_and_times():
    rerun = stage(
        inputs={"dataset": {"uri": "/run-2/dataset", "fingerprint": "d1"}},
        outputs={"model": {"uri": "/run-2/model", "fingerprint": "m1"}},
    )
    rerun["started"] = "2027-01-01T00:00:00+00:00"
    assert manifest.compare_stage(stage(), rerun) == manifest.StageComparison("train", True, "", ())
    assert manifest.compare_stage(stage(), rerun).line() == "train: identical"


@pytest.mark.parametrize(
    "rerun, cause, first_detail",
    [
        (dict(inputs={"dataset": {"uri": "/d", "fingerprint": "d2"}}), "data", 'inputs.dataset: "d1" -> "d2"'),
        (dict(config={"job": {"training": {"seed": 7, "train_steps": 20}}}), "config", "job.training.seed: 42 -> 7"),
        (dict(versions={**VERSIONS, "tensorflow": "2.15.0"}), "versions", '"2.15.1" -> "2.15.0"'),
        (dict(machine={**CPU_MACHINE, "isa": ["avx2"]}), "machine", 'machine.isa: ["avx2", "avx512f"] -> ["avx2"]'),
        (dict(machine={**CPU_MACHINE, "kernels": {"TF_ENABLE_ONEDNN_OPTS": "0"}}), "machine", "machine.kernels."),
        ({}, "output", 'outputs.model: "m1" -> "m2"'),
    ],
)
def test_a_differing_output_is_explained_by_the_first_cause_found(rerun, cause, first_detail):
    other = stage(**rerun, outputs={"model": {"uri": "/run-2/model", "fingerprint": "m2"}})
    found = manifest.compare_stage(stage(), other)
    assert not found.same and found.differs == cause
    assert first_detail in found.details[0]
    assert found.details[-1] == 'outputs.model: "m1" -> "m2"'
    assert found.line().startswith(f"train: differs ({cause}")


def test_a_run_on_another_processor_is_named_a_machine_difference_not_a_data_or_code_change():
    """Same data, config and versions on another CPU: the report says the machine differs and why that moves
    bits, instead of calling the stage not repeatable."""
    epyc = {**CPU_MACHINE, "cpu": "AMD EPYC 9B14"}
    found = manifest.compare_stage(stage(), stage(machine=epyc, outputs={"model": {"uri": "/m", "fingerprint": "m2"}}))
    assert found.differs == "machine" and found.details[0] == 'machine.cpu: "Xeon" -> "AMD EPYC 9B14"'
    assert found.line().startswith("train: differs (machine: another processor or kernel setting, same data, config")
    assert "bitwise only on the same kind of machine" in found.line()
    assert manifest.compare_stage(stage(), stage(machine=epyc)).same  # the machine alone is no difference


def test_where_the_run_publishes_is_not_a_cause():
    recorded = stage("release", config={"publish_root": "/a/published", "based_on": "none"})
    rerun = stage(
        "release",
        config={"publish_root": "/b/published", "based_on": "v1"},
        outputs={"model": {"uri": "/b", "fingerprint": "m2"}},
    )
    assert manifest.compare_stage(recorded, rerun).differs == "output"


def test_compare_runs_goes_in_the_given_order_and_names_a_stage_one_run_lacks():
    recorded = {"prepare": stage("prepare"), "train": stage("train")}
    found = manifest.compare_runs(recorded, {"prepare": stage("prepare")}, ["prepare", "train", "export"])
    assert [(c.stage, c.same) for c in found] == [("prepare", True), ("train", False)]
    assert found[1].details == ("the rerun has no manifest of this stage",)
