"""`estimator_lib.config.beam`: where the Beam engine runs; validation with the fix, and Beam's options."""

from __future__ import annotations

import pytest

from estimator_lib.config import ConfigError
from estimator_lib.config.beam import BeamConfig, check_engine

DATAFLOW = {
    "runner": "DataflowRunner",
    "project": "my-project",
    "region": "europe-west4",
    "temp_location": "gs://bucket/tmp/",
    "sdk_container_image": "repo/img@sha256:" + "a" * 64,
}


def test_the_direct_runner_runs_in_this_process_unless_given_workers():
    assert BeamConfig().is_local and BeamConfig().pipeline_args("job") == ["--runner=DirectRunner"]
    assert BeamConfig(direct_num_workers=4).pipeline_args("job") == [
        "--runner=DirectRunner",
        "--direct_running_mode=multi_processing",
        "--direct_num_workers=4",
    ]


def test_the_dask_runner_runs_a_local_cluster_of_two_workers_unless_told():
    config = BeamConfig(runner="DaskRunner")
    assert config.is_local and config.local_workers == 2
    assert BeamConfig(runner="DaskRunner", dask_num_workers=3).local_workers == 3
    assert config.pipeline_args("job") == ["--runner=DaskRunner", "--dask_npartitions=64"]
    with pytest.raises(ConfigError, match=r"beam.dask_num_workers=2 applies to runner='DaskRunner' only, not "):
        BeamConfig(dask_num_workers=2)
    with pytest.raises(ConfigError, match=r"beam.direct_num_workers=2 applies to runner='DirectRunner' only"):
        BeamConfig(runner="DaskRunner", direct_num_workers=2)


def test_dataflow_options_name_every_setting():
    config = BeamConfig(**DATAFLOW, max_workers=40, machine_type="n2-standard-4", service_account="sa@p.iam")
    assert not config.is_local
    assert config.pipeline_args("prepare-1") == [
        "--runner=DataflowRunner",
        "--project=my-project",
        "--region=europe-west4",
        "--temp_location=gs://bucket/tmp/",
        "--staging_location=gs://bucket/tmp/staging",
        f"--sdk_container_image={DATAFLOW['sdk_container_image']}",
        "--job_name=prepare-1",
        "--sdk_location=container",
        "--max_num_workers=40",
        "--machine_type=n2-standard-4",
        "--service_account_email=sa@p.iam",
    ]
    assert BeamConfig(**DATAFLOW).pipeline_args("j")[-1] == "--sdk_location=container"  # no optional flags


@pytest.mark.parametrize(
    "fields, message",
    [
        (
            {"runner": "SparkRunner"},
            "beam.runner='SparkRunner' must be one of ('DirectRunner', 'DaskRunner', 'DataflowRunner')",
        ),
        ({"direct_num_workers": 0}, "beam.direct_num_workers=0 must be None or a positive integer"),
        ({"max_workers": True}, "beam.max_workers=True must be None or a positive integer"),
        (
            {**DATAFLOW, "region": None},
            "beam.region is not set; the DataflowRunner needs it (e.g. us-central1), or use runner='DirectRunner'",
        ),
        (
            {**DATAFLOW, "temp_location": "/tmp/beam"},
            "beam.temp_location='/tmp/beam' must be a gs:// prefix for the DataflowRunner: Dataflow workers cannot "
            "see this machine's disk",
        ),
        (
            {**DATAFLOW, "direct_num_workers": 2},
            "beam.direct_num_workers=2 applies to runner='DirectRunner' only, not runner='DataflowRunner'; unset it "
            "and size Dataflow with max_workers",
        ),
    ],
)
def test_invalid_settings_are_refused_with_the_fix(fields, message):
    with pytest.raises(ConfigError) as e:
        BeamConfig(**fields)
    assert str(e.value) == message


def test_from_dict_checks_types_and_round_trips():
    config = BeamConfig(**DATAFLOW, max_workers=3)
    assert BeamConfig.from_json(config.to_json()) == config
    with pytest.raises(ConfigError) as e:
        BeamConfig.from_dict({"max_workers": 3.0}, "beam.")
    assert str(e.value) == "beam.max_workers=3.0 must be an integer or null"


def test_check_engine_names_the_choices():
    check_engine("beam")
    with pytest.raises(ConfigError) as e:
        check_engine("spark", "--engine")
    assert str(e.value) == "--engine='spark' must be one of ('inprocess', 'beam') ('beam' runs on Apache Beam)"
