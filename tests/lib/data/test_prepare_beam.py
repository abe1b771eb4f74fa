"""Preparation on Apache Beam (DirectRunner): every output file byte-identical to the in-process engine's,
the same errors, and BeamConfig's refusals. Tiny real files; many small chunks so the merge order matters."""

from __future__ import annotations

import glob
import json
import os
import signal
import threading
import time

import pytest

pytest.importorskip("apache_beam")

from file_trees import tree  # noqa: E402
from test_prepare import awkward_rows, write_csv  # noqa: E402

from estimator_lib import storage  # noqa: E402
from estimator_lib.config import ConfigError, PrepareConfig  # noqa: E402
from estimator_lib.config.beam import BeamConfig, check_engine  # noqa: E402
from estimator_lib.data.beam import beam_passes, prepare_on_beam  # noqa: E402
from estimator_lib.data.common import DataError  # noqa: E402
from estimator_lib.data.embedded import default_dataset  # noqa: E402
from estimator_lib.data.prepare import encode_for_scoring, prepare  # noqa: E402
from estimator_lib.data.read import iter_chunks, resolve_inputs  # noqa: E402

AWKWARD = ["id", "bill length (mm)", "Île / région", "a,b;c!", "größe", "label"]


def both_engines(tmp_path, config: PrepareConfig):
    """(in-process tree, Beam tree) of the same preparation."""
    prepare(config, str(tmp_path / "inprocess"))
    prepare_on_beam(config, str(tmp_path / "beam"), BeamConfig())
    return tree(str(tmp_path / "inprocess")), tree(str(tmp_path / "beam"))


def test_penguins_in_many_chunks_are_byte_identical(tmp_path):
    d = default_dataset()
    config = PrepareConfig(data=(d.path,), label=d.label, chunk_bytes=1024, num_shards=3, test_fraction=0.1)
    here, there = both_engines(tmp_path, config)
    assert sorted(here) == sorted(there) and "test/part-00002-of-00003.tfrecord" in here
    assert here == there  # shards, schema.json, manifest.json (fingerprints), _COMMITTED


def test_several_files_quarantine_and_duplicate_keys_are_byte_identical(tmp_path):
    rows = awkward_rows(150)
    rows[7][1] = "abc"  # a bad numeric value
    rows[90][0] = rows[20][0]  # a duplicate key (in the second file)
    write_csv(tmp_path / "a.csv", AWKWARD, rows[:80])
    write_csv(tmp_path / "b.csv", AWKWARD, rows[80:])
    config = PrepareConfig(
        data=(str(tmp_path / "*.csv"),),
        label="label",
        key_column="id",
        bad_rows="quarantine",
        max_bad_fraction=0.1,
        chunk_bytes=1024,
    )
    here, there = both_engines(tmp_path, config)
    assert "quarantine.jsonl" in here and here == there
    manifest = json.loads(there["manifest.json"])
    assert manifest["rows"]["quarantined"] == 2 and [i["rows"] for i in manifest["inputs"]] == [80, 70]


def test_unlabelled_rows_in_several_files_are_byte_identical(tmp_path):
    rows = awkward_rows(150)
    for i in (4, 33, 81, 120):
        rows[i][5] = "NA" if i % 2 else ""
    rows[60][1] = "abc"  # a bad row beside them
    write_csv(tmp_path / "a.csv", AWKWARD, rows[:80])
    write_csv(tmp_path / "b.csv", AWKWARD, rows[80:])
    config = PrepareConfig(
        data=(str(tmp_path / "*.csv"),), label="label", bad_rows="quarantine", max_bad_fraction=0.1, chunk_bytes=1024
    )
    here, there = both_engines(tmp_path, config)
    assert "unlabelled.jsonl" in here and here == there
    manifest = json.loads(there["manifest.json"])
    assert manifest["rows"]["unlabelled"] == 4 and manifest["rows"]["bad"] == 1
    assert sorted(manifest["unlabelled_lines"]) == ["a.csv", "b.csv"]


def test_jsonl_with_content_keys_and_repeated_rows_is_byte_identical(tmp_path):
    lines = [{"x": i % 7, "c": ["u", "v", None][i % 3], "y": ["a", "b"][i % 2]} for i in range(120)]
    lines += lines[:10]  # identical rows: their content keys differ by occurrence
    (tmp_path / "rows.jsonl").write_text("".join(json.dumps(r) + "\n" for r in lines))
    config = PrepareConfig(data=(str(tmp_path / "rows.jsonl"),), label="y", chunk_bytes=1024)
    here, there = both_engines(tmp_path, config)
    assert here == there


@pytest.mark.slow  # about 40 s here: each pipeline starts two worker processes that import TensorFlow
def test_worker_processes_write_the_shards_and_the_launcher_never_receives_a_row(tmp_path, monkeypatch):
    rows = awkward_rows(200)
    for i, row in enumerate(rows):
        row[0] = f"marker-{i}"  # every encoded row holds its key; nothing else the launcher may read does
    path = write_csv(tmp_path / "rows.csv", AWKWARD, rows)
    config = PrepareConfig(data=(path,), label="label", key_column="id", chunk_bytes=2048, num_shards=3)
    prepare(config, str(tmp_path / "inprocess"))
    read_here = []  # what this process (the launcher) reads from the work directory
    original = storage.read_bytes
    monkeypatch.setattr(storage, "read_bytes", lambda uri: read_here.append(original(uri)) or read_here[-1])
    prepare_on_beam(config, str(tmp_path / "beam"), BeamConfig(direct_num_workers=2))  # workers: subprocesses
    assert len(read_here) > 10 and not any(b"marker-" in data for data in read_here)
    here, there = tree(str(tmp_path / "inprocess")), tree(str(tmp_path / "beam"))
    assert here == there and b"marker-199" in b"".join(v for k, v in there.items() if k.endswith(".tfrecord"))


@pytest.mark.slow  # about 15 s: a dask.distributed cluster whose two worker processes import TensorFlow
def test_beams_dask_runner_on_a_local_cluster_of_two_workers_is_byte_identical(tmp_path):
    pytest.importorskip("distributed")
    rows = awkward_rows(300)
    rows[5][1] = "abc"  # a quarantined row
    path = write_csv(tmp_path / "rows.csv", AWKWARD, rows)
    config = PrepareConfig(
        data=(path,), label="label", chunk_bytes=2048, num_shards=3, bad_rows="quarantine", max_bad_fraction=0.1
    )
    prepare(config, str(tmp_path / "inprocess"))
    prepare_on_beam(config, str(tmp_path / "dask"), BeamConfig(runner="DaskRunner", dask_num_workers=2))
    here, there = tree(str(tmp_path / "inprocess")), tree(str(tmp_path / "dask"))
    assert "quarantine.jsonl" in there and here == there


def kill_an_encoding_worker(work: str, psutil) -> list:
    """Starts a thread that SIGKILLs one worker process of the encode pass (started as its facts are
    stored) once a few chunks' pieces are stored; returns the list it appends (pid, chunks encoded) to."""
    killed: list = []

    def watch() -> None:
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline:
            facts = glob.glob(os.path.join(work, "*", "facts.pkl"))
            if facts and len(glob.glob(os.path.join(work, "*", "pieces", "*", "*"))) >= 3:
                since = os.path.getmtime(facts[0]) - 5  # its workers start as its facts are stored
                for child in psutil.Process().children(recursive=True):
                    if "sdk_worker_main" in " ".join(child.cmdline()) and child.create_time() >= since:
                        encoded = len(glob.glob(os.path.join(work, "*", "encode", "*")))
                        child.send_signal(signal.SIGKILL)
                        killed.append((child.pid, encoded))
                        return
            time.sleep(0.02)

    threading.Thread(target=watch, daemon=True).start()
    return killed


@pytest.mark.slow  # about a minute: two multi-process pipelines, maybe a rerun
def test_a_worker_killed_mid_run_commits_nothing_partial_and_a_rerun_succeeds(tmp_path):
    psutil = pytest.importorskip("psutil")
    path = write_csv(tmp_path / "rows.csv", AWKWARD, awkward_rows(400))
    config = PrepareConfig(data=(path,), label="label", key_column="id", chunk_bytes=2048, num_shards=3)
    prepare(config, str(tmp_path / "inprocess"))
    out, work = str(tmp_path / "beam"), str(tmp_path / "work")
    killed = kill_an_encoding_worker(work, psutil)
    try:  # Beam may finish the killed worker's bundles on the other worker, or fail the run
        prepare_on_beam(config, out, BeamConfig(direct_num_workers=2, temp_location=work))
    except Exception:
        assert not os.path.exists(out)  # nothing published, not even in part
        prepare_on_beam(config, out, BeamConfig(direct_num_workers=2))
    chunks = len(list(iter_chunks(resolve_inputs(config.data, "auto"), config.chunk_bytes, [])))
    assert len(killed) == 1 and killed[0][1] < chunks  # killed while chunks were still being encoded
    assert tree(out) == tree(str(tmp_path / "inprocess"))  # whole and exact, no temporary file


def test_the_launcher_refuses_encoded_rows_when_workers_write_the_shards(tmp_path):
    with beam_passes(BeamConfig()) as passes:
        writers = passes.shard_writers(str(tmp_path), ["train"], 2)
    with pytest.raises(AssertionError, match="the launcher received 1 encoded train rows; with worker-written"):
        writers.write("train", [b"row"])


def test_scoring_encoding_is_byte_identical_also_after_a_preparation_on_the_same_passes(tmp_path):
    d = default_dataset()
    kwargs = dict(num_shards=2, chunk_bytes=2048)
    with beam_passes(BeamConfig()) as passes:
        prepared = prepare(PrepareConfig(data=(d.path,), label=d.label), str(tmp_path / "prepared"), passes=passes)
        encode_for_scoring(d.path, prepared.schema, str(tmp_path / "b"), passes=passes, **kwargs)
    encode_for_scoring(d.path, prepared.schema, str(tmp_path / "a"), **kwargs)
    assert tree(str(tmp_path / "a")) == tree(str(tmp_path / "b"))


def test_the_first_bad_row_in_input_order_fails_with_the_same_message(tmp_path):
    rows = awkward_rows(120)
    rows[100][1] = "late"
    rows[30][1] = "early"  # in an earlier chunk than "late"
    path = write_csv(tmp_path / "bad.csv", AWKWARD, rows)
    config = PrepareConfig(data=(path,), label="label", key_column="id", chunk_bytes=1024)
    messages = []
    for engine, run in (("inprocess", prepare), ("beam", prepare_on_beam)):
        with pytest.raises(DataError) as e:
            run(config, str(tmp_path / engine))
        messages.append(str(e.value))
    assert messages[0] == messages[1] and "'early' is not a number" in messages[1]
    assert not os.path.exists(tmp_path / "beam")


def test_header_errors_come_first_with_the_same_message(tmp_path):
    write_csv(tmp_path / "a.csv", ["x", "label"], [["1", "a"], ["2", "b"]])
    write_csv(tmp_path / "b.csv", ["x", "z", "label"], [["1", "3", "a"]])
    config = PrepareConfig(data=(str(tmp_path / "*.csv"),), label="label")
    with pytest.raises(DataError, match="b.csv line 1: the header's columns differ from a.csv's"):
        prepare_on_beam(config, str(tmp_path / "out"))


def test_engine_and_beam_settings_refuse_bad_values_naming_the_fix():
    with pytest.raises(ConfigError, match=r"engine='spark' must be one of \('inprocess', 'beam'\)"):
        check_engine("spark")
    with pytest.raises(ConfigError, match="beam.temp_location is not set; the DataflowRunner needs it"):
        BeamConfig(runner="DataflowRunner", project="p", region="us-central1", sdk_container_image="i@sha256:0")
    with pytest.raises(ConfigError, match="must be a gs:// prefix for the DataflowRunner"):
        BeamConfig(
            runner="DataflowRunner", project="p", region="r", temp_location="/tmp/x", sdk_container_image="i@sha256:0"
        )
    with pytest.raises(ConfigError, match="beam.runner='SparkRunner' must be one of"):
        BeamConfig(runner="SparkRunner")


def test_dataflow_settings_become_beam_options():
    config = BeamConfig(
        runner="DataflowRunner",
        project="p",
        region="europe-west4",
        temp_location="gs://b/tmp/",
        max_workers=50,
        machine_type="n2-standard-4",
        sdk_container_image="repo/img@sha256:abc",
    )
    args = config.pipeline_args("prepare-encode-1")
    assert "--runner=DataflowRunner" in args and "--region=europe-west4" in args
    assert "--temp_location=gs://b/tmp/" in args and "--staging_location=gs://b/tmp/staging" in args
    assert "--max_num_workers=50" in args and "--machine_type=n2-standard-4" in args
    assert "--sdk_container_image=repo/img@sha256:abc" in args and "--sdk_location=container" in args
    assert BeamConfig.from_dict(config.to_dict()) == config
