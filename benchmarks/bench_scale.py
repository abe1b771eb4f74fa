"""Benchmark: preparation at scale, in-process and on Apache Beam's two local runners, and a Dataflow estimate
for 1B rows; with `--predict`, batch prediction on the local runners and a projection for 1B rows on Dataflow.

    python benchmarks/bench_scale.py [--rows 500000 2000000 5000000] [--engines inprocess beam]
                                     [--runners direct dask] [--worker-counts 1 2] [--files 8] [--rounds 1]
                                     [--workdir DIR]
                                     [--vcpus-per-worker 4 --workers 100 --vcpu-hour 0.056 --gb-hour 0.003557]

The synthetic CSV is bench_prepare.py's (30 numeric columns, 3 categorical, a binary label), cut into `--files`
files. Every run is its own subprocess, so peak memory is that run's alone ("main MB": the launcher, the process
calling `prepare`, with the Dask scheduler inside on the Dask runner; "worker MB": the largest worker process);
times and "CPU s" (all the run's processes) cover the `prepare` call only; every run's full report is appended
to WORKDIR/runs.jsonl. Beam runs on the DirectRunner in multi-processing mode (`direct_num_workers`) and on a
local `dask.distributed` cluster (`dask_num_workers`), with each of `--worker-counts` worker processes; the
in-process engine runs once per round with the largest count. With `--rounds N` the variants take turns N times
at each size, so load from other work on the machine falls on all alike.

For the Beam runs the time inside the Beam pipelines (the work Dataflow spreads over workers) is measured apart
from the launcher's part (planning between the passes, merging the chunks' bounded results, writing the
manifest, committing). The 1B-row estimate divides the pipelines' CPU time over the workers' vCPUs and keeps the
launcher's part sequential (between its CPU time and its wall time here), from the DirectRunner runs (a Dask
worker's CPU is counted only once the cluster closes); prices are per vCPU-hour and GB-hour
of Dataflow batch workers (docs/scale.md says where they come from), memory assumed 4 GB per vCPU (n2-standard
machines).
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from statistics import median

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests"))
from bench_prepare import generate  # noqa: E402

RUNS_LOG = "runs.jsonl"
PREDICT_RUNNERS = ("direct", "dask")
PREDICT_FILES, PREDICT_BATCH = 8, 1024


def child(engine: str, path: str, out: str, runner: str = "direct", workers: str = "2") -> None:
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    from estimator_lib.config import PrepareConfig
    from estimator_lib.config.beam import BeamConfig
    from estimator_lib.data import beam as beam_engine
    from estimator_lib.data.prepare import prepare

    pipeline_seconds, pipeline_cpu = [], []
    run = beam_engine.run_pipeline

    def timed(*args, **kwargs):
        start, cpu = time.perf_counter(), _cpu_seconds()
        run(*args, **kwargs)
        pipeline_seconds.append(time.perf_counter() - start)
        pipeline_cpu.append(_cpu_seconds() - cpu)

    beam_engine.run_pipeline = timed
    n = int(workers)
    config = PrepareConfig(data=(path,), label="label", num_workers=n)
    start, start_cpu = time.perf_counter(), _cpu_seconds()
    if engine == "beam":
        temp = os.path.dirname(out)
        beam_config = (
            BeamConfig(direct_num_workers=n, temp_location=temp)
            if runner == "direct"
            else BeamConfig(runner="DaskRunner", dask_num_workers=n, temp_location=temp)
        )
        result = beam_engine.prepare_on_beam(config, out, beam_config)
    else:
        result = prepare(config, out)
    seconds = time.perf_counter() - start
    report = {
        "rows": result.manifest["rows"]["total"],
        "seconds": seconds,
        "pipelines": sum(pipeline_seconds),
        "pipelines_cpu": sum(pipeline_cpu),
        "cpu": _cpu_seconds(),  # the whole process, start-up and imports included
        "prepare_cpu": _cpu_seconds() - start_cpu,
        "main_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
        "worker_mb": resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024,
        "fingerprint": result.manifest["fingerprint"],
        "engine": engine,
        "runner": runner if engine == "beam" else "-",
        "workers": n,
        "finished": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }
    # Every run's full report is kept beside the data (WORKDIR/runs.jsonl): the table shows only part of it.
    with open(os.path.join(os.path.dirname(os.path.dirname(out)), RUNS_LOG), "a", encoding="utf-8") as f:
        f.write(json.dumps(report) + "\n")
    print(json.dumps(report))


def _cpu_seconds() -> float:
    """CPU time of this process and of its finished children (the DirectRunner's worker processes)."""
    own, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


def estimate(runs: list, args: argparse.Namespace, rows: int = 1_000_000_000) -> str:
    """Dataflow wall time and cost for `rows`, from the DirectRunner runs' measured rates (their medians)."""
    cpu_per_row = median(r["pipelines_cpu"] / r["rows"] for r in runs)  # CPU the pipelines used, all processes
    # The launcher's sequential part: its wall time here (waiting for CPU on a shared machine included) and its
    # CPU time (what a machine of its own would need at least).
    launcher_wall = median((r["seconds"] - r["pipelines"]) / r["rows"] for r in runs)
    launcher_cpu = median((r["prepare_cpu"] - r["pipelines_cpu"]) / r["rows"] for r in runs)
    vcpus = args.workers * args.vcpus_per_worker
    parallel_h = cpu_per_row * rows / vcpus / 3600
    worker_cost = parallel_h * vcpus * (args.vcpu_hour + 4 * args.gb_hour)
    low, high = launcher_cpu * rows / 3600, launcher_wall * rows / 3600
    return (
        f"1B rows on {args.workers} x {args.vcpus_per_worker} vCPU Dataflow workers: {cpu_per_row * 1e6:.1f} us of "
        f"worker CPU per row -> {parallel_h:.2f} h in the pipelines (cost ${worker_cost:.0f} at "
        f"${args.vcpu_hour}/vCPU-h + ${args.gb_hour}/GB-h x 4 GB/vCPU); the launcher's part "
        f"{launcher_cpu * 1e6:.1f} us CPU ({launcher_wall * 1e6:.1f} us wall here) per row -> {low:.2f}-{high:.2f} h "
        f"on one machine; total about {parallel_h + low:.1f}-{parallel_h + high:.1f} h plus the jobs' start-up"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, nargs="+", help="default: 0.5M 2M 5M")
    parser.add_argument("--engines", nargs="+", default=["inprocess", "beam"], choices=("inprocess", "beam"))
    parser.add_argument("--rounds", type=int, default=1, help="the engines take turns this many times per size")
    parser.add_argument("--workdir", default=os.path.join(tempfile.gettempdir(), "bench_scale"))
    parser.add_argument("--workers", type=int, default=100)
    parser.add_argument("--vcpus-per-worker", type=int, default=4)
    parser.add_argument("--vcpu-hour", type=float, default=0.056)
    parser.add_argument("--gb-hour", type=float, default=0.003557)
    parser.add_argument("--predict", action="store_true", help="batch prediction on the local runners instead")
    parser.add_argument("--runners", nargs="+", default=list(PREDICT_RUNNERS), choices=PREDICT_RUNNERS)
    parser.add_argument("--worker-counts", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--files", type=int, default=8, help="preparation: the input CSV cut into this many files")
    args = parser.parse_args()
    os.makedirs(args.workdir, exist_ok=True)
    if args.predict:
        args.rows = args.rows or [500_000, 2_000_000, 5_000_000]
        predict_main(args)
        return
    args.rows = args.rows or [500_000, 2_000_000, 5_000_000]
    prepare_main(args)


def prepare_data(workdir: str, rows: int, files: int) -> str:
    """bench_prepare.py's synthetic CSV, `rows` rows cut into `files` files (each its own seed and header); the
    glob of them."""
    directory = os.path.join(workdir, f"synthetic-{rows}-{files}")
    for i in range(files):
        path = os.path.join(directory, f"part-{i:03d}.csv")
        if not os.path.exists(path):
            os.makedirs(directory, exist_ok=True)
            generate(path, rows // files + (i < rows % files), seed=i)
    return os.path.join(directory, "part-*.csv")


def prepare_variants(args: argparse.Namespace) -> list:
    """(engine, runner, workers) of every measured variant: the in-process engine with the largest worker count;
    Beam on each runner with each worker count."""
    out = [("inprocess", "-", max(args.worker_counts))] if "inprocess" in args.engines else []
    if "beam" in args.engines:
        out += [("beam", runner, n) for runner in args.runners for n in args.worker_counts]
    return out


def prepare_measure(variant: tuple, path: str, workdir: str) -> dict:
    engine, runner, workers = variant
    out = tempfile.mkdtemp(prefix=f"{engine}-{runner}-{workers}-", dir=workdir)
    cmd = [sys.executable, __file__, "--child", engine, path, os.path.join(out, "out"), runner, str(workers)]
    env = dict(os.environ, PYTHONPATH=os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    done = subprocess.run(cmd, check=True, capture_output=True, text=True, env=env)
    shutil.rmtree(out)
    return json.loads(done.stdout.strip().splitlines()[-1])


def prepare_main(args: argparse.Namespace) -> None:
    print(
        f"{'rows':>10} {'engine':>9} {'runner':>6} {'workers':>7} {'seconds':>8} {'rows/s':>8} {'CPU s':>7} "
        f"{'pipelines s':>11} {'pipelines CPU s':>15} {'main MB':>8} {'worker MB':>9}"
    )
    beam_runs = []
    for n in args.rows:
        path = prepare_data(args.workdir, n, args.files)
        runs = []
        for _ in range(args.rounds):
            for variant in prepare_variants(args):
                r = prepare_measure(variant, path, args.workdir)
                runs.append(r)
                print(
                    f"{n:>10} {r['engine']:>9} {r['runner']:>6} {r['workers']:>7} {r['seconds']:>8.1f} "
                    f"{r['rows'] / r['seconds']:>8.0f} {r['prepare_cpu']:>7.0f} {r['pipelines']:>11.1f} "
                    f"{r['pipelines_cpu']:>15.1f} {r['main_mb']:>8.0f} {r['worker_mb']:>9.0f}",
                    flush=True,
                )
        if len({r["fingerprint"] for r in runs}) > 1:
            print("  FINGERPRINTS DIFFER between variants", flush=True)
        beam_runs += [r for r in runs if r["engine"] == "beam"]
    # The Dask workers are reaped only when the cluster closes, after the pipelines: their CPU is not counted.
    direct = [r for r in beam_runs if r["runner"] == "direct"]
    if direct:
        print("  " + estimate(direct, args), flush=True)


# -- batch prediction on the local runners -------------------------------------------------------------------
PREDICT_DOC = """Batch prediction (`--predict`): the tiny (64, 32) DNN of bench_predict.py, trained briefly and exported
once per workdir; N rows of TFRecords in 8 files; `predict.beam.predict_from_saved_model` (batch 1024, 4
shards) on the DirectRunner in multi-processing mode and on a local Dask cluster, with 1 and 2 worker processes.
Each run is a fresh process: "launcher MB" is its peak RSS (TensorFlow imported, the Dask scheduler inside),
"worker MB" the largest worker process's (RUSAGE_CHILDREN: every worker is a reaped child). rows/s covers the whole
call (counting pipeline, workers' start-up and model load, prediction, commit)."""


def predict_child(runner: str, workers: str, export_dir: str, data: str, out: str) -> None:
    import synthetic

    from estimator_lib.config.beam import BeamConfig
    from estimator_lib.predict import beam as beam_predict

    n = int(workers)
    config = (
        BeamConfig(direct_num_workers=n) if runner == "direct" else BeamConfig(runner="DaskRunner", dask_num_workers=n)
    )
    schema = synthetic.make_schema("multiclass")
    start, cpu = time.perf_counter(), _cpu_seconds()
    result = beam_predict.predict_from_saved_model(
        export_dir, schema, data, out, batch_size=PREDICT_BATCH, num_shards=4, beam_config=config
    )
    report = {
        "rows": result.count,
        "runner": runner,
        "workers": n,
        "seconds": time.perf_counter() - start,
        "cpu": _cpu_seconds() - cpu,
        "launcher_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
        "worker_mb": resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024,
        "finished": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }
    with open(os.path.join(os.path.dirname(os.path.dirname(out)), RUNS_LOG), "a", encoding="utf-8") as f:
        f.write(json.dumps(report) + "\n")
    print(json.dumps(report))


def predict_setup(workdir: str, rows: int) -> tuple:
    """The exported model (trained once per workdir) and `rows` rows of TFRecords in 8 files."""
    import bench_predict
    import synthetic

    from estimator_lib import estimator, export
    from estimator_lib.config import JobConfig, ModelConfig, TPUSettings, TrainingConfig

    schema = synthetic.make_schema("multiclass")
    root = os.path.join(workdir, "predict-model")
    if not os.path.exists(os.path.join(root, "export")):
        job = JobConfig(
            tpu=TPUSettings(iterations_per_loop=20),
            training=TrainingConfig(train_batch_size=64, train_steps=40, save_checkpoints_steps=40),
            model=ModelConfig(family="dnn", hidden_units=(64, 32)),
        )
        train, _ = synthetic.write_dataset(
            os.path.join(root, "train"), synthetic.make_rows(512, 3, "multiclass"), schema
        )
        estimator.train(job, schema, train, os.path.join(root, "model"))
        export.export_model(job, schema, os.path.join(root, "model"), os.path.join(root, "export"))
    export_dir = sorted(glob.glob(os.path.join(root, "export", "*")))[-1]
    data = os.path.join(workdir, f"predict-{rows}")
    if not os.path.exists(data):
        bench_predict.write_records(data, rows, schema, shards=PREDICT_FILES)
    return export_dir, os.path.join(data, "part-*.tfrecord")


def predict_measure(runner: str, workers: int, export_dir: str, data: str, workdir: str) -> dict:
    out = tempfile.mkdtemp(prefix=f"predict-{runner}-{workers}-", dir=workdir)
    cmd = [
        sys.executable,
        __file__,
        "--predict-child",
        runner,
        str(workers),
        export_dir,
        data,
        os.path.join(out, "out"),
    ]
    env = dict(os.environ, PYTHONPATH=os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    done = subprocess.run(cmd, check=True, capture_output=True, text=True, env=env)
    shutil.rmtree(out)
    return json.loads(done.stdout.strip().splitlines()[-1])


def projection(runs: list, args: argparse.Namespace, rows: int = 1_000_000_000) -> str:
    """1B rows on 10/100/1000 Dataflow workers from the median measured rows/s per worker process."""
    per_worker = median(r["rows"] / r["seconds"] / r["workers"] for r in runs)
    lines = [
        f"Projection for {rows:,} rows from {per_worker:,.0f} rows/s per worker process (the median of the runs, "
        f"whole call; each Dataflow vCPU assumed to run one worker process at that rate, {args.vcpus_per_worker} "
        "vCPUs per worker machine; input in many files (one worker reads a file); start-up of the job and of "
        "autoscaling, and reading/writing through Cloud Storage, not included; the launcher's part is the commit "
        "of the shards, which does not grow with the rows):",
        f"{'workers':>8} {'vCPUs':>6} {'hours':>7} {'cost $':>8}  "
        f"(at ${args.vcpu_hour}/vCPU-h + ${args.gb_hour}/GB-h x 4 GB)",
    ]
    for workers in (10, 100, 1000):
        vcpus = workers * args.vcpus_per_worker
        hours = rows / (per_worker * vcpus) / 3600
        cost = hours * vcpus * (args.vcpu_hour + 4 * args.gb_hour)
        lines.append(f"{workers:>8} {vcpus:>6} {hours:>7.2f} {cost:>8.2f}")
    return "\n".join(lines)


def predict_main(args: argparse.Namespace) -> None:
    print(PREDICT_DOC)
    print(
        f"{'rows':>10} {'runner':>7} {'workers':>7} {'seconds':>8} {'rows/s':>8} {'launcher MB':>11} {'worker MB':>9}"
    )
    runs = []
    for n in args.rows:
        export_dir, data = predict_setup(args.workdir, n)
        for runner in args.runners:
            for workers in args.worker_counts:
                r = predict_measure(runner, workers, export_dir, data, args.workdir)
                runs.append(r)
                print(
                    f"{n:>10} {runner:>7} {workers:>7} {r['seconds']:>8.1f} {r['rows'] / r['seconds']:>8.0f} "
                    f"{r['launcher_mb']:>11.0f} {r['worker_mb']:>9.0f}",
                    flush=True,
                )
    print(projection(runs, args))


if __name__ == "__main__":
    if sys.argv[1:2] == ["--child"]:  # one measured run, started by `measure`
        child(*sys.argv[2:7])
    elif sys.argv[1:2] == ["--predict-child"]:  # one measured prediction run, started by `predict_measure`
        predict_child(*sys.argv[2:7])
    else:
        main()
