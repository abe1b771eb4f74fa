"""Preflight's largest batch held against a published table: google-research/bert's README ("Out-of-memory
issues") gives the largest batch that trained BERT-Base and BERT-Large (fine-tuning, float32, Adam) on one 12 GB
GPU (Titan X, TensorFlow 1.11) at sequence lengths 64 to 512.

    python benchmarks/bench_preflight.py [--models BERT-Base BERT-Large] [--seqs 64 128 ...] [--jobs 2]
                                         [--start 8] [--max-compiles 4] [--json FILE]
    python benchmarks/bench_preflight.py --tpu-point
    python benchmarks/bench_preflight.py --executor-peak BERT-Base 128 4 12

For each model and sequence length, `estimator_lib.preflight.largest_batch` searches the largest batch whose
compiled train step (`bert_encoder.py`'s model_fn, one core) fits 12 GiB, starting at `--start` rows (the same
for every case: nothing here is taken from the table) and compiling at most `--max-compiles` batches
(preflight's own default is 10; a BERT-Large compile takes 2 to 5 minutes on a loaded 2-core machine, so 4
here: the search then stops with the largest batch that fit, and the table gives the smallest compiled batch
that did not). Each case runs in its own process (`--jobs` at a time), which records every batch the search
compiled with its memory (parameters, optimizer slots, gradients, peak activations) as preflight computed it. A
case agrees when our batch is within a factor of 2 of the table's; where the table says 0 (not even batch 1
trained), when ours is 0 too.

`--tpu-point` checks instead the one TPU figure the same README gives: `run_squad.py` fine-tuned BERT-Large at
sequence length 384 with `train_batch_size=24` on a Cloud TPU of 64 GB (a v2-8: 8 cores of 8 GiB), so 3 rows per
core trained in 8 GiB; the estimate agrees when its largest per-core batch in 8 GiB is at least 3. (On the TPU
BERT reads the word embedding by a one-hot matmul, here by a gather: a [3 * 384, 30522] float32 one-hot, 134 MiB,
is not in the estimate.)

`--executor-peak MODEL SEQ BATCH...` runs one train step per batch (two, in a fresh process each) with
TensorFlow's own graph executor on this CPU, no XLA and oneDNN's fusions off, as TensorFlow 1.11 ran the table's
steps on its GPU, and prints the process's peak resident memory: its growth per row set against the estimate's.

The table is a GPU's and the estimate a TPU core's: the estimate pads each buffer to the TPU's tiles and takes
XLA's CPU schedule for the step, while TensorFlow 1.11's GPU runs had no XLA, no tile padding, an allocator that
rounds and fragments, and the framework's own workspace (cuDNN, CUDA context) out of the 12 GB.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import dataclasses
import json
import os
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SOURCE = "https://github.com/google-research/bert/blob/master/README.md#out-of-memory-issues"
HBM_BYTES = 12 << 30  # the table's device: 12 GB
MAX_COMPILES = 4
TPU_POINT = ("BERT-Large", 384, 8 << 30, 3)  # model, seq, a v2 core's HBM, the per-core batch that trained there
PUBLISHED = {
    "BERT-Base": {64: 64, 128: 32, 256: 16, 320: 14, 384: 12, 512: 6},
    "BERT-Large": {64: 12, 128: 6, 256: 2, 320: 1, 384: 0, 512: 0},
}
_RESULT = "RESULT "


def measure_case(model: str, seq: int, start: int, hbm_bytes: int, max_compiles: int) -> dict:
    """Runs `largest_batch` for one case in this process; every compile's memory as preflight measured it."""
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import bert_encoder

    from estimator_lib.config import JobConfig, TPUSettings, TrainingConfig
    from estimator_lib.preflight import largest_batch
    from estimator_lib.preflight import run as preflight_run

    size = {"BERT-Base": bert_encoder.BASE, "BERT-Large": bert_encoder.LARGE}[model]
    compiled = []
    measure = preflight_run.measure

    def recorded(step):  # the same call largest_batch makes, its result kept: no compile is added
        memory, top = measure(step)
        compiled.append(
            {"batch": step.batch, "seconds": round(time.perf_counter() - started, 1), **dataclasses.asdict(memory)}
        )
        return memory, top

    preflight_run.measure = recorded
    job = JobConfig(
        tpu=TPUSettings(num_cores=1),
        training=TrainingConfig(train_batch_size=start, eval_batch_size=start, predict_batch_size=start),
    )
    started = time.perf_counter()
    ours = largest_batch(
        job,
        None,
        bert_encoder.model_fn_builder(size),
        train_input_fn=bert_encoder.input_fn_builder(seq, size),
        hbm_bytes=hbm_bytes,
        max_compiles=max_compiles,
    )
    return {"model": model, "seq": seq, "ours": ours, "seconds": time.perf_counter() - started, "compiled": compiled}


def executor_peak(model: str, seq: int, batch: int) -> float:
    """GiB of peak resident memory of this process after two train steps run by TensorFlow's graph executor."""
    os.environ["TF_ENABLE_ONEDNN_OPTS"] = "0"  # before TensorFlow loads: no fused MatMul+GELU kernels
    import resource

    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import bert_encoder
    import tensorflow as tf

    size = {"BERT-Base": bert_encoder.BASE, "BERT-Large": bert_encoder.LARGE}[model]
    with tf.Graph().as_default():
        tf.compat.v1.train.get_or_create_global_step()
        dataset = bert_encoder.input_fn_builder(seq, size)({"batch_size": batch})
        features, labels = tf.compat.v1.data.make_one_shot_iterator(dataset).get_next()
        model_fn = bert_encoder.model_fn_builder(size)
        spec = model_fn(features, labels, tf.estimator.ModeKeys.TRAIN, {"use_tpu": False})
        with tf.compat.v1.Session() as session:
            session.run(tf.compat.v1.global_variables_initializer())
            for _ in range(2):
                session.run(spec.train_op)
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / (1 << 20)


def _executor_peaks(model: str, seq: int, batches: list) -> None:
    peaks = {}
    for batch in batches:
        command = [sys.executable, os.path.abspath(__file__), "--peak-case", model, str(seq), str(batch)]
        done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, check=True)
        peaks[batch] = float([x for x in done.stdout.splitlines() if x.startswith(_RESULT)][-1][len(_RESULT) :])
        print(f"{model} seq {seq} batch {batch}: peak RSS {peaks[batch]:.2f} GiB", flush=True)
    if len(peaks) > 1:
        (b1, p1), (b2, p2) = min(peaks.items()), max(peaks.items())
        print(f"growth {(p2 - p1) / (b2 - b1):.3f} GiB per row; at 0 rows {p1 - b1 * (p2 - p1) / (b2 - b1):.2f} GiB")


def _run_case(model: str, seq: int, start: int, max_compiles: int, hbm_bytes: int = HBM_BYTES) -> dict:
    command = [sys.executable, os.path.abspath(__file__), "--case", model, str(seq), "--start", str(start)]
    command += ["--max-compiles", str(max_compiles)]
    command += ["--hbm-bytes", str(hbm_bytes)]
    done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True)
    lines = [line for line in done.stdout.splitlines() if line.startswith(_RESULT)]
    if done.returncode or not lines:
        raise RuntimeError(f"{model} seq {seq} failed (exit {done.returncode}):\n{done.stderr[-3000:]}")
    return json.loads(lines[-1][len(_RESULT) :])


def agrees(published: int, ours: int) -> bool:
    """Within a factor of 2 of the table; 0 (batch 1 does not fit) only when the table says 0."""
    if published == 0 or ours == 0:
        return published == ours
    return published / 2 <= ours <= 2 * published


def _gib(n: int) -> str:
    return f"{n / (1 << 30):.2f}"


def _total(compiled: dict) -> int:
    return compiled["parameters"] + compiled["slots"] + compiled["gradients"] + compiled["activations"]


def table(results: list, hbm_bytes: int = HBM_BYTES) -> str:
    """The comparison as a markdown table, then each compiled batch's memory (GiB, padded)."""
    lines = [
        "| model | seq | published max batch | our largest batch | smallest compiled that did not fit "
        "| ours / published | within 2x | compiles | seconds |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for r in results:
        published = PUBLISHED[r["model"]][r["seq"]]
        ratio = f"{r['ours'] / published:.2f}" if published else "-"
        verdict = "yes" if agrees(published, r["ours"]) else "NO"
        if published == 0:
            verdict += " (batch 1 does not fit)" if r["ours"] == 0 else f" (ours fits {r['ours']})"
        failed = [c["batch"] for c in r["compiled"] if _total(c) > hbm_bytes]
        lines.append(
            f"| {r['model']} | {r['seq']} | {published} | {r['ours']} | {min(failed, default='-')} | {ratio} | "
            f"{verdict} | {len(r['compiled'])} | {r['seconds']:.0f} |"
        )
    columns = "| model | seq | batch compiled | parameters | slots | gradients | activations (peak) | total |"
    lines += [
        "",
        f"{columns} fits {_gib(hbm_bytes)} GiB |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for r in results:
        for c in sorted(r["compiled"], key=lambda c: c["batch"]):
            total = _total(c)
            lines.append(
                f"| {r['model']} | {r['seq']} | {c['batch']} | {_gib(c['parameters'])} | {_gib(c['slots'])} | "
                f"{_gib(c['gradients'])} | {_gib(c['activations'])} | {_gib(total)} | "
                f"{'yes' if total <= hbm_bytes else 'no'} |"
            )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--models", nargs="+", default=list(PUBLISHED), choices=list(PUBLISHED))
    parser.add_argument("--seqs", nargs="+", type=int, default=[64, 128, 256, 320, 384, 512])
    parser.add_argument("--jobs", type=int, default=2, help="cases run at once, each in its own process")
    parser.add_argument("--start", type=int, default=8, help="the batch each search compiles first")
    parser.add_argument("--max-compiles", type=int, default=MAX_COMPILES, help="compiles per search")
    parser.add_argument("--json", help="also write the results here")
    parser.add_argument("--tpu-point", action="store_true", help="check the README's TPU figure instead")
    parser.add_argument("--executor-peak", nargs="+", metavar="ARG", help="MODEL SEQ BATCH...: see above")
    parser.add_argument("--peak-case", nargs=3, help=argparse.SUPPRESS)
    parser.add_argument("--case", nargs=2, metavar=("MODEL", "SEQ"), help=argparse.SUPPRESS)
    parser.add_argument("--hbm-bytes", type=int, default=HBM_BYTES, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.case:
        result = measure_case(args.case[0], int(args.case[1]), args.start, args.hbm_bytes, args.max_compiles)
        print(_RESULT + json.dumps(result), flush=True)
        return
    if args.peak_case:
        print(_RESULT + str(executor_peak(args.peak_case[0], int(args.peak_case[1]), int(args.peak_case[2]))))
        return
    if args.executor_peak:
        model, seq, *batches = args.executor_peak
        _executor_peaks(model, int(seq), [int(b) for b in batches])
        return
    if args.tpu_point:
        model, seq, hbm, trained = TPU_POINT
        r = _run_case(model, seq, args.start, args.max_compiles, hbm)
        print(
            f"{model} seq {seq} in {_gib(hbm)} GiB (a v2 core): per-core batch {trained} trained there (README, "
            f"run_squad.py on a v2-8); our largest {r['ours']}: {'agrees' if r['ours'] >= trained else 'DISAGREES'}"
            f" ({len(r['compiled'])} compiles, {r['seconds']:.0f} s)\n"
        )
        print(table([r], hbm).split("\n\n", 1)[1])
        return
    cases = [(m, s) for m in args.models for s in args.seqs]
    cases.sort(key=lambda c: c[0] != "BERT-Large")  # the longest compiles first
    started = time.time()
    with concurrent.futures.ThreadPoolExecutor(args.jobs) as pool:
        futures = [pool.submit(_run_case, m, s, args.start, args.max_compiles) for m, s in cases]
        results = []
        for future in futures:
            results.append(future.result())
            r = results[-1]
            print(f"{r['model']} seq {r['seq']}: {r['ours']} ({r['seconds']:.0f} s)", file=sys.stderr, flush=True)
    order = {c: i for i, c in enumerate((m, s) for m in PUBLISHED for s in PUBLISHED[m])}
    results.sort(key=lambda r: order[(r["model"], r["seq"])])
    print(f"source: {SOURCE}; device {_gib(HBM_BYTES)} GiB; {time.time() - started:.0f} s wall\n")
    print(table(results))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=1)


if __name__ == "__main__":
    main()
