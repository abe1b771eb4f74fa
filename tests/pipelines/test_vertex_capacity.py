"""Where the TPU custom jobs' machines come from: the compiled YAML and the exact CustomJob requests.

Each test compiles the pipeline through the CLI and rebuilds, with google-cloud-pipeline-components' own
launcher functions, the `aiplatform_v1.CustomJob` a TPU task would create (`vertex_api.custom_job_request`):
Spot (`scheduling.strategy`), a reservation (`machine_spec.reservation_affinity`), the slice topology
(`machine_spec.tpu_topology`, which the custom-job wrapper has no parameter for), the PJRT environment of the
experimental v5e types, TensorBoard with its base output directory. Refused TPU types name the supported ones.
"""

from __future__ import annotations

import json

import pytest
from compiled import compiled_spec
from google.cloud import aiplatform_v1
from vertex_api import custom_job_request

from pipelines import cli, tpu

IMAGE = "us-central1-docker.pkg.dev/proj/repo/tpu-pipeline@sha256:" + "cd" * 32
TPU_TASKS = ("train-model", "evaluate-model", "batch-predict")
RESERVATION = "projects/my-project/zones/us-central1-a/reservations/tpu-v5e"
TENSORBOARD = "projects/my-project/locations/us-central1/tensorboards/42"
Strategy = aiplatform_v1.Scheduling.Strategy
Affinity = aiplatform_v1.ReservationAffinity.Type


def compile_spec(tmp_path, *flags: str) -> dict:
    return compiled_spec(str(tmp_path / "pipeline.yaml"), "--image", IMAGE, *flags)


def compile_error(tmp_path, capsys, *flags: str) -> str:
    output = str(tmp_path / "refused.yaml")
    assert cli.main(["compile", "--output", output, "--image", IMAGE, *flags]) == 2
    return capsys.readouterr().err


def test_a_supported_tpu_on_demand(tmp_path):
    spec = compile_spec(tmp_path, "--tpu", "v3-8")
    for task in TPU_TASKS:
        job = custom_job_request(spec, task)
        [pool] = job.job_spec.worker_pool_specs
        assert pool.machine_spec == aiplatform_v1.MachineSpec(
            machine_type="cloud-tpu", accelerator_type="TPU_V3", accelerator_count=8
        )
        assert pool.replica_count == 1 and pool.container_spec.image_uri == IMAGE
        # the stream-executor runtime needs nothing set; the TPU type is for the stages' manifests
        assert {e.name: e.value for e in pool.container_spec.env} == {"TPU_ACCELERATOR_TYPE": "v3-8"}
        assert job.job_spec.scheduling.strategy == Strategy.STANDARD
        assert job.job_spec.service_account == "{{$.pipeline_service_account}}"
        assert job.job_spec.tensorboard == "" and job.job_spec.base_output_directory.output_uri_prefix == ""
        assert job.display_name == f"{task}-v3-8"


def test_spot(tmp_path):
    spec = compile_spec(tmp_path, "--tpu", "v2-8", "--spot")
    params = spec["components"]["comp-train-model"]["inputDefinitions"]["parameters"]
    assert params["strategy"]["defaultValue"] == "SPOT"
    for task in TPU_TASKS:
        job = custom_job_request(spec, task)
        assert job.job_spec.scheduling.strategy == Strategy.SPOT
        assert "max_wait_duration" not in job.job_spec.scheduling  # only FLEX_START takes one
        [pool] = job.job_spec.worker_pool_specs
        assert pool.machine_spec.accelerator_type == aiplatform_v1.AcceleratorType.TPU_V2


def test_reservation_and_multi_host_topology(tmp_path):
    spec = compile_spec(tmp_path, "--tpu", "v5litepod-16", "--experimental-tpu", "--reservation", RESERVATION)
    [pool] = spec["components"]["comp-evaluate-model"]["inputDefinitions"]["parameters"]["worker_pool_specs"][
        "defaultValue"
    ]
    assert pool["machine_spec"]["tpu_topology"] == "4x4"  # patched in: the wrapper has no such parameter
    for task in TPU_TASKS:
        job = custom_job_request(spec, task)
        [pool] = job.job_spec.worker_pool_specs
        assert pool.machine_spec == aiplatform_v1.MachineSpec(
            machine_type="ct5lp-hightpu-4t",
            accelerator_type="TPU_V5_LITEPOD",
            accelerator_count=4,
            tpu_topology="4x4",
            reservation_affinity=aiplatform_v1.ReservationAffinity(
                reservation_affinity_type=Affinity.SPECIFIC_RESERVATION,
                key="compute.googleapis.com/reservation-name",
                values=[RESERVATION],
            ),
        )
        assert {e.name: e.value for e in pool.container_spec.env} == {
            "NEXT_PLUGGABLE_DEVICE_USE_C_API": "true",
            "TF_PLUGGABLE_DEVICE_LIBRARY_PATH": "/lib/libtpu.so",
            "TPU_ACCELERATOR_TYPE": "v5litepod-16",
        }
    tasks = spec["root"]["dag"]["tasks"]
    assert json.loads(tasks["train-model"]["inputs"]["parameters"]["tpu"]["runtimeValue"]["constant"]) == {
        "use_tpu": True,
        "tpu_name": "local",
        "num_cores": 16,
    }


def test_single_host_v5e_takes_a_topology_only_when_asked(tmp_path):
    plain = custom_job_request(compile_spec(tmp_path, "--tpu", "v5litepod-8", "--experimental-tpu"), "train-model")
    assert plain.job_spec.worker_pool_specs[0].machine_spec.tpu_topology == ""
    given = compile_spec(tmp_path, "--tpu", "v5litepod-8", "--experimental-tpu", "--tpu-topology", "2x4")
    assert custom_job_request(given, "batch-predict").job_spec.worker_pool_specs[0].machine_spec.tpu_topology == "2x4"


def test_tensorboard_gets_a_base_output_directory_per_job(tmp_path):
    spec = compile_spec(tmp_path, "--tensorboard", TENSORBOARD, "--tensorboard-logs", "gs://bucket/logs/")
    for task in TPU_TASKS:
        job = custom_job_request(spec, task)
        assert job.job_spec.tensorboard == TENSORBOARD
        assert job.job_spec.base_output_directory.output_uri_prefix == (
            f"gs://bucket/logs/tensorboard/{{{{$.pipeline_job_uuid}}}}/{task}"
        )
        assert job.job_spec.service_account == "{{$.pipeline_service_account}}"


@pytest.mark.parametrize(
    "flags, message",
    [
        (
            ["--tpu", "v5litepod-4"],
            "--tpu 'v5litepod-4' is not supported: TensorFlow on TPU v5e needs the PJRT runtime, and TPUEstimator "
            "under PJRT fails on TPU v5 (tensorflow/tensorflow#90807); use one of ['v2-8', 'v3-8'], or pass "
            "--experimental-tpu to try it anyway",
        ),
        (
            ["--tpu", "v6e-8"],
            "--tpu 'v6e-8': Vertex AI offers no TensorFlow training on TPU v6e; use one of ['v2-8', 'v3-8']",
        ),
        (["--tpu", "v4-8"], "--tpu 'v4-8': Vertex AI custom training offers TPU v2, v3 and v5e, not v4; use one of"),
        (["--tpu", "v3-32"], "--tpu 'v3-32': it is not a known TPU type; use one of ['v2-8', 'v3-8']"),
        (["--tpu", "v3-8", "--tpu-topology", "2x2"], "runs on Vertex AI's 'cloud-tpu' machine, whose shape is fixed"),
        (
            ["--tpu", "v5litepod-16", "--experimental-tpu", "--tpu-topology", "2x4"],
            "--tpu-topology 2x4 does not describe --tpu v5litepod-16 (16 chips): use 4x4, or the preset of 8 chips",
        ),
        (["--tpu-topology", "four"], "--tpu-topology 'four' must look like 4x4"),
        (["--cpu", "--spot"], "--spot applies to the TPU custom jobs, and with --cpu no stage runs as one"),
        (["--spot", "--reservation", RESERVATION], "--spot and --reservation ask for different capacity"),
        (
            ["--tpu", "v5litepod-32", "--experimental-tpu", "--spot"],
            "--spot: Vertex AI does not run Spot VMs for TPU slices of several hosts (--tpu v5litepod-32 has 8)",
        ),
        (["--reservation", "tpu-v5e"], "--reservation 'tpu-v5e' must be the reservation's full name"),
        (["--tensorboard", "tb-42"], "--tensorboard 'tb-42' must be a TensorBoard resource name"),
        (["--tensorboard", TENSORBOARD], "--tensorboard needs a gs:// location for the jobs' logs"),
    ],
)
def test_refusals_name_the_fix(tmp_path, capsys, flags, message):
    assert message in compile_error(tmp_path, capsys, *flags)


def test_every_supported_preset_is_single_host_stream_executor():
    assert tpu.SUPPORTED == ("v2-8", "v3-8")
    for name in tpu.SUPPORTED:
        found = tpu.preset(name)
        assert found.machine_type == "cloud-tpu" and found.hosts == 1 and not found.env and found.topology is None
    for _name, found in tpu.PRESETS.items():
        if not found.supported:
            assert found.env == tpu.PJRT_ENV and found.accelerator_type == "TPU_V5_LITEPOD"
            assert found.num_cores == found.hosts * found.accelerator_count
