"""Batch prediction on Beam's two local runners with real worker processes (the DirectRunner in multi-processing
mode, Beam's Dask runner on a local dask.distributed cluster), 2 workers each: the output is byte-identical to the
in-process engine's, file by file; the launcher's memory does not grow with the rows; a worker killed mid-run
commits nothing and the rerun gives the same bytes."""

from __future__ import annotations

import glob
import os
import threading
import time
import tracemalloc

import psutil
import pytest
import synthetic
from file_trees import tree

pytest.importorskip("apache_beam")
pytest.importorskip("distributed")

from test_batch import trained  # noqa: E402, F401  (the `trained` fixture)

from estimator_lib import storage  # noqa: E402
from estimator_lib.config.beam import BeamConfig  # noqa: E402
from estimator_lib.export import export_model  # noqa: E402
from estimator_lib.predict import beam as beam_predict  # noqa: E402
from estimator_lib.predict import predict_from_saved_model  # noqa: E402
from estimator_lib.predict.shards import PREDICTIONS_MANIFEST  # noqa: E402

ROWS, FILES, BATCH = 20_000, 5, 64
RUNNERS = {
    "direct-multi-process": dict(direct_num_workers=2),
    "dask": dict(runner="DaskRunner", dask_num_workers=2),
}
# How much more the launcher's Python allocations may peak (tracemalloc) for 20,000 rows than for 500: well
# below the rows it would hold if they crossed it (the input records alone are ~2.3 MB, the output ~4 MB). The
# peak of a run is about 9 MB whatever the rows (Beam's and gRPC's own work), and varies by ~0.2 MB.
LAUNCHER_GROWTH = 1_000_000


@pytest.fixture(scope="module")
def scored(trained, tmp_path_factory):  # noqa: F811 - the fixture imported from test_batch
    """The tiny linear model exported, 20,000 rows in 5 files, and the in-process output's files."""
    root = str(tmp_path_factory.mktemp("runners"))
    export = export_model(trained.job, trained.schema, trained.model_dir, os.path.join(root, "export"))
    rows = synthetic.make_rows(ROWS, seed=7, task="multiclass")
    pattern, _ = synthetic.write_dataset(os.path.join(root, "rows"), rows, trained.schema, shards=FILES)
    kwargs = dict(batch_size=BATCH, num_shards=3, passthrough=("colour",))
    predict_from_saved_model(export.export_dir, trained.schema, pattern, os.path.join(root, "inprocess"), **kwargs)
    few, _ = synthetic.write_dataset(
        os.path.join(root, "few"), synthetic.make_rows(500, seed=8, task="multiclass"), trained.schema, shards=1
    )
    return export.export_dir, trained.schema, pattern, kwargs, tree(os.path.join(root, "inprocess")), few


@pytest.mark.slow
@pytest.mark.parametrize("runner", RUNNERS)
def test_output_is_byte_identical_and_the_launcher_does_not_grow_with_the_rows(scored, tmp_path, runner):
    export_dir, schema, pattern, kwargs, expected, few = scored
    config = BeamConfig(**RUNNERS[runner], temp_location=str(tmp_path / "work"))

    def launcher_peak(data: str, out: str) -> int:
        tracemalloc.start()
        try:
            beam_predict.predict_from_saved_model(export_dir, schema, data, out, beam_config=config, **kwargs)
            return tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()

    small = launcher_peak(few, str(tmp_path / "few"))  # first: it also pays for the imports
    large = launcher_peak(pattern, str(tmp_path / "out"))

    assert tree(str(tmp_path / "out")) == expected  # every file, manifest.json included
    input_bytes = sum(os.path.getsize(f) for f in glob.glob(pattern))
    assert large - small < LAUNCHER_GROWTH < input_bytes / 2, f"the launcher peaked at {small} then {large} bytes"


@pytest.mark.slow
@pytest.mark.filterwarnings("ignore::pytest.PytestUnhandledThreadExceptionWarning")  # Beam's thread sees the kill
@pytest.mark.parametrize("runner", RUNNERS)
def test_a_worker_killed_mid_run_commits_nothing_and_the_rerun_gives_the_same_bytes(scored, tmp_path, runner):
    export_dir, schema, pattern, kwargs, expected, _ = scored
    config = BeamConfig(**RUNNERS[runner], temp_location=str(tmp_path / "work"))
    out = str(tmp_path / "out")
    killer = _WorkerKiller(str(tmp_path / "work"), runner)
    killer.start()
    try:
        beam_predict.predict_from_saved_model(export_dir, schema, pattern, out, beam_config=config, **kwargs)
    except RuntimeError:  # the DirectRunner fails the run ("Channel closed prematurely"): nothing is committed
        assert not storage.is_committed(out) and not os.path.exists(os.path.join(out, PREDICTIONS_MANIFEST))
        assert not glob.glob(os.path.join(out, "predictions-*"))
    else:  # Dask's nanny restarts the worker and its tasks run again: the output is complete and the same
        assert tree(out) == expected
    finally:
        killer.join()
    assert killer.killed, "no worker process was killed mid-run"

    beam_predict.predict_from_saved_model(export_dir, schema, pattern, out, beam_config=config, **kwargs)
    assert tree(out) == expected


class _WorkerKiller(threading.Thread):
    """Kills (SIGKILL) one worker process of the prediction pipeline once its first part file appears: mid-run,
    while files are being predicted, before any shard is written. The DirectRunner starts new workers for each
    pipeline (the counting pipeline's may linger): the newest one is the prediction pipeline's."""

    def __init__(self, work: str, runner: str):
        super().__init__(daemon=True)
        self._parts, self._runner, self.killed = os.path.join(work, "beam-predict-*", "parts", "*.part"), runner, None

    def run(self) -> None:
        deadline = time.monotonic() + 600
        while time.monotonic() < deadline and not glob.glob(self._parts):
            time.sleep(0.005)
        workers = sorted(self._workers(), key=lambda p: p.create_time())
        if workers and glob.glob(self._parts):
            workers[-1].kill()
            self.killed = workers[-1].pid

    def _workers(self) -> list:
        me = os.getpid()
        children = psutil.Process(me).children(recursive=True)
        if self._runner == "dask":  # the nannies run in this process, each worker in a process it spawned
            return [c for c in children if "spawn_main" in " ".join(c.cmdline())]
        return [c for c in children if "sdk_worker_main" in " ".join(c.cmdline())]
