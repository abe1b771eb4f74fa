"""`pipelines.reproduce` on hand-written records: reading a record, the settings that rerun it, the resubmission
of a Vertex AI run, and `diff`. Reruns of real runs are in tests/e2e/test_pipeline_reproduce.py."""

from __future__ import annotations

import json
import os

import pytest

from estimator_lib import manifest
from estimator_lib.config import JobConfig, RunConfig, resolve_configs
from estimator_lib.config import run as config_run
from pipelines import cli, local, reproduce
from pipelines.cli import settings as cli_settings

with open(os.path.join(os.path.dirname(__file__), "recorded_summary.json"), encoding="utf-8") as f:
    RECORDED = json.load(f)  # a real run's summary.json
VERSIONS = {"python": "3.11.7", "tensorflow": "2.15.1", "kfp": "2.13.0", "commit": "a" * 40, "image": None}
JOB = JobConfig().with_overrides({"tpu.use_tpu": False, "tpu.strict": True, "training.train_steps": 20})


def stage_configs(data: str, baseline: str | None, label: str = "species", job: JobConfig = JOB) -> dict[str, dict]:
    """Each stage's config as the components record it (see components/*.py)."""
    prepare = {"data": [data], "label": label, "task": None, "key_column": None, "eval_fraction": 0.2}
    return {
        "prepare": {"prepare": {**prepare, "num_shards": 3, "schema_uri": None}, "validation": {"on_breach": "warn"}},
        "train": {"job": job.to_dict()},
        "export": {"job": job.to_dict()},
        "batch_predict": {"job": job.to_dict(), "data": "eval"},
        "serving_check": {},
        "evaluate": {
            "job": job.to_dict(),
            "blessing_config": {"min_improvement": 0.01},
            "baseline": baseline,
            "based_on": "none",
        },
        "release": {"based_on": "none", "publish_root": "gs://bucket/published"},
    }


def write_stages(
    directory: str, fingerprints: dict[str, str], image: str | None = None, machine: dict | None = None, **kwargs
) -> dict:
    """A manifest per stage in directory/<task>/ (as KFP lays out task directories); {stage: manifest URI}."""
    uris = {}
    for stage, config in stage_configs(**kwargs).items():
        record = manifest.stage_manifest(
            stage,
            {"dataset": {"uri": "/d", "fingerprint": fingerprints.get("dataset", "d1")}},
            config,
            {"out": {"uri": "/o", "fingerprint": fingerprints.get(stage, f"{stage}-1")}},
            {"versions": {**VERSIONS, "image": image}, "machine": machine or {"kind": "CPU"}},
            "2026-01-01T00:00:00+00:00",
            "2026-01-01T00:01:00+00:00",
        )
        uris[stage] = manifest.write_manifest(os.path.join(directory, f"{stage}-task"), record)
    return uris


def write_run(output: str, run_id: str, fingerprints=None, metrics=None, status="ok", machine=None, **arguments) -> str:
    """OUTPUT/runs/<id>/summary.json of a finished local run, with its stages' manifests; its path."""
    folder = os.path.join(output, "runs", run_id)
    settings = RunConfig(publish_root=os.path.join(output, "published"), job=JOB, **arguments)
    manifests = write_stages(
        os.path.join(folder, "pipeline-root"),
        fingerprints or {},
        machine=machine,
        data=settings.data,
        baseline=None,
        label=settings.label,
    )
    summary = {
        **RECORDED,
        "status": status,
        "run": {**RECORDED["run"], "id": run_id, "dir": folder},
        "config": settings.arguments(),
        "metrics": metrics or {"accuracy": 0.9},
        "manifests": manifests,
    }
    os.makedirs(folder, exist_ok=True)
    path = os.path.join(folder, "summary.json")
    with open(path, "w", encoding="utf-8") as f:
        json.dump(summary, f)
    return path


# -- reading records -----------------------------------------------------------------------------------------
def test_a_record_is_found_from_its_summary_its_folder_or_its_output(tmp_path):
    path = write_run(str(tmp_path), "run-1")
    for given in (path, os.path.dirname(path)):
        record = reproduce.read_record(given)
        assert record.name == "run-1" and set(record.manifests) == set(reproduce.STAGES)
        assert record.manifests["train"]["config"]["job"] == JOB.to_dict()


def test_a_record_that_cannot_be_used_is_named_with_what_to_give(tmp_path):
    with pytest.raises(reproduce.RecordError, match=r"no summary.json and no stage manifest .* give a run's"):
        reproduce.read_record(str(tmp_path))
    failed = write_run(str(tmp_path / "a"), "run-2", status="failed")
    with pytest.raises(reproduce.RecordError, match=r"run run-2 ended 'failed'; only a run that ended ok"):
        reproduce.read_record(failed)
    old = tmp_path / "old.json"
    old.write_text(json.dumps({k: v for k, v in RECORDED.items() if k != "manifests"}))
    with pytest.raises(reproduce.RecordError, match="old.json: missing key manifests; not a run's summary"):
        reproduce.read_record(str(old))
    partial = tmp_path / "partial.json"
    partial.write_text(json.dumps({k: RECORDED[k] for k in ("status", "stage", "error", "run", "config")}))
    with pytest.raises(reproduce.RecordError, match="links no stage manifests .* run the pipeline again"):
        reproduce.read_record(str(partial))
    broken = tmp_path / "broken.json"
    broken.write_text("{")
    with pytest.raises(reproduce.RecordError, match="broken.json: not valid JSON"):
        reproduce.read_record(str(broken))


# -- the settings of a rerun ---------------------------------------------------------------------------------
def test_the_rerun_has_the_recorded_settings_and_a_publish_root_of_its_own(tmp_path):
    path = write_run(str(tmp_path), "run-1", data="/data/rows.csv", label="y", predict_data="eval")
    settings = reproduce.recorded_settings(reproduce.read_record(path), "/elsewhere/published")
    assert settings.publish_root == "/elsewhere/published"
    assert (settings.data, settings.label, settings.predict_data) == ("/data/rows.csv", "y", "eval")
    assert settings.job == JOB and settings.blessing.min_improvement == 0.01
    assert settings.baseline == "none" and settings.warm_start == "none"


def test_the_rerun_reads_the_recorded_specs_not_todays_defaults_nor_the_summarys_view(tmp_path, monkeypatch):
    path = write_run(str(tmp_path), "run-1")
    with open(path, encoding="utf-8") as f:
        summary = json.load(f)
    summary["config"]["seed"] = 7  # the summary's view of the settings: nothing reads it back
    with open(path, "w", encoding="utf-8") as f:
        json.dump(summary, f)
    # The CLI's defaults change after the run: run-local's job defaults and a flag's default.
    changed = {"tpu.strict": False, "training.seed": 7, "training.train_steps": 99}
    monkeypatch.setattr(local, "local_job_defaults", lambda: changed)
    monkeypatch.setattr(config_run, "LOCAL_JOB_DEFAULTS", changed)

    def resolve_run(*args, **kwargs):
        raise AssertionError("reproduce resolved the settings again")

    monkeypatch.setattr(config_run, "resolve_run", resolve_run)
    monkeypatch.setattr(cli_settings, "resolve_run", resolve_run)
    rerun = {}

    def run_local(settings, output, verbose=False, resume=None):
        rerun["settings"] = settings
        raise RuntimeError("stop here")

    monkeypatch.setattr(local, "run_local", run_local)
    assert cli.main(["reproduce", path, "--output", str(tmp_path / "rerun")]) == 1
    settings = rerun["settings"]
    assert settings.job == JOB and settings.job.training.seed == 42 and settings.job.tpu.strict is True
    assert settings.eval_fraction == 0.2 and settings.prepare_options == {"num_shards": 3}
    assert settings.validation.on_breach == "warn" and settings.blessing.min_improvement == 0.01
    assert settings.stage_specs().train.job == JOB


# -- a Vertex AI run -----------------------------------------------------------------------------------------
def test_a_vertex_run_is_written_out_for_a_resubmission(tmp_path, capsys):
    image = "us-docker.pkg.dev/p/r/tpu-pipeline@sha256:" + "0" * 64
    run_dir = tmp_path / "123" / "tpu-estimator-pipeline-20260101"
    write_stages(str(run_dir), {}, image=image, data="gs://bucket/rows.csv", baseline="gs://bucket/published/v1")
    output = tmp_path / "resubmit"
    assert cli.main(["reproduce", str(tmp_path / "123"), "--output", str(output)]) == 0
    out = capsys.readouterr().out
    assert out.startswith(f"Vertex AI run {tmp_path / '123'}: not re-run here")
    assert f"tpu-pipeline submit --image {image} --data gs://bucket/rows.csv --label species --task auto" in out
    assert "--baseline gs://bucket/published/v1" in out and "--publish-root gs://bucket/published" in out
    with open(output / reproduce.RESUBMIT_CONFIG, encoding="utf-8") as f:
        configs = resolve_configs(json.load(f), [])
    assert configs["job"] == JOB and configs["blessing"].min_improvement == 0.01
    assert configs["prepare"] == {"num_shards": 3} and configs["validation"].on_breach == "warn"


def test_a_resubmission_scores_the_files_the_run_scored():
    scored = {"inputs": {"data": {"uri": ["gs://b/new.csv", "gs://b/new.csv/*"], "fingerprint": "f"}}, "config": {}}
    assert reproduce._predict_data(scored) == "gs://b/new.csv"
    assert reproduce._predict_data({"inputs": {}, "config": {"data": "test"}}) == "test"


# -- diff ----------------------------------------------------------------------------------------------------
def test_diff_names_what_differs_between_two_runs(tmp_path, capsys):
    a = write_run(str(tmp_path / "a"), "run-a")
    b = write_run(str(tmp_path / "b"), "run-b", fingerprints={"train": "train-2"}, metrics={"accuracy": 0.8})
    found = reproduce.diff_records(reproduce.read_record(a), reproduce.read_record(b))
    assert found["data"] == [] and found["versions"] == [] and found["machine"] == []
    assert found["artifacts"] == ['out: "train-1" -> "train-2" (train)']
    assert found["metrics"] == ["accuracy: 0.9000 -> 0.8000 (-0.1000)"]
    assert found["config"] == [] and found["verdict"] == []
    assert cli.main(["diff", a, b]) == 1
    out = capsys.readouterr().out
    assert (
        out.splitlines()[0] == "run-a and run-b differ in metrics, artifacts (compared: data, config, versions, "
        "machine, metrics, verdict, artifact fingerprints)"
    )
    assert out.splitlines()[1:] == [
        "metrics:",
        "  accuracy: 0.9000 -> 0.8000 (-0.1000)",
        "artifacts:",
        '  out: "train-1" -> "train-2" (train)',
    ]
    assert cli.main(["diff", a, a]) == 0
    assert capsys.readouterr().out == (
        "run-a and run-a are equivalent: same data, config, versions, machine, metrics, verdict, artifact "
        "fingerprints\n"
    )


def test_diff_masks_each_runs_output_folder_and_run_id_in_settings(tmp_path):
    records = [reproduce.read_record(write_run(str(tmp_path / name), f"run-{name}")) for name in "ab"]
    settings = [{"baseline": str(tmp_path / name / "runs" / f"run-{name}" / "model"), "seed": 1} for name in "ab"]
    masked = [reproduce._run_neutral(r, c) for r, c in zip(records, settings)]
    assert masked[0] == masked[1] == {"baseline": "<output>/runs/<run>/model", "seed": 1}


def test_diff_rounds_metrics_and_their_deltas():
    a = {"auc": 1.0, "r2": 0.5, "auc/x": 0.5, "auc/y": 0.5}
    b = {"auc": 1.0000001, "r2": 0.5, "rmse": 3.25, "auc/x": 0.6, "auc/y": 0.4}
    assert reproduce.metric_differences(a, b) == [
        "auc: 1.000 -> 1.000 (+1.000e-07)",
        "rmse: (absent) -> 3.250",
        "and 2 per-class metrics (tpu-pipeline show lists them)",
    ]


def test_diff_names_another_processor_as_a_machine_difference(tmp_path, capsys):
    a = write_run(str(tmp_path / "a"), "run-a", machine={"kind": "CPU", "isa": ["avx2", "avx512f"]})
    b = write_run(str(tmp_path / "b"), "run-b", machine={"kind": "CPU", "isa": ["avx2"]})
    found = reproduce.diff_records(reproduce.read_record(a), reproduce.read_record(b))
    assert found["machine"] == ['isa: ["avx2", "avx512f"] -> ["avx2"] (every stage)']  # one line for 6 stages
    assert cli.main(["diff", a, b]) == 1
    out = capsys.readouterr().out
    assert "differ in machine (compared" in out


def test_diff_reads_the_specs_the_stages_recorded_not_todays_defaults(tmp_path, monkeypatch):
    """Run B was recorded after run-local's default of tpu.strict changed: diff shows what each stage ran."""
    a = write_run(str(tmp_path / "a"), "run-a")
    monkeypatch.setattr(config_run, "LOCAL_JOB_DEFAULTS", {"tpu.use_tpu": False, "tpu.strict": False})
    b_job = JOB.with_overrides({"tpu.strict": False})
    b_folder = tmp_path / "b" / "runs" / "run-b"
    manifests = write_stages(str(b_folder / "pipeline-root"), {}, data="embedded:penguins", baseline=None, job=b_job)
    with open(a, encoding="utf-8") as f:
        summary = json.load(f)
    summary.update(run={**summary["run"], "id": "run-b", "dir": str(b_folder)}, manifests=manifests)
    b = b_folder / "summary.json"
    b.write_text(json.dumps(summary), encoding="utf-8")
    found = reproduce.diff_records(reproduce.read_record(a), reproduce.read_record(str(b)))
    assert found["config"] == ["job.tpu.strict: true -> false (train, evaluate, batch_predict, export)"]
    assert reproduce.recorded_settings(reproduce.read_record(a), "/p").job.tpu.strict is True


def test_diff_of_something_that_is_no_record_is_a_command_line_error(tmp_path, capsys):
    assert cli.main(["diff", str(tmp_path), str(tmp_path)]) == 2
    assert "tpu-pipeline diff: error: " in capsys.readouterr().err


def test_a_rerun_never_publishes_where_the_recorded_run_publishes(tmp_path):
    path = write_run(str(tmp_path), "run-1")
    with pytest.raises(reproduce.RecordError, match=r"a rerun there would publish beside it; give the rerun another"):
        reproduce.reproduce(reproduce.read_record(path), str(tmp_path))
