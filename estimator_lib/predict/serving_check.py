"""The serving check before release: the exported SavedModel, served as a server would serve it, must give the
batch predictions for the same rows.

`check_serving` takes the first `SAMPLE_ROWS` rows of a committed prediction output (`estimator_lib.predict`)
and the records they were predicted from (the output's manifest names them, in input order: a prepared split's
TFRecords, or the rows a CSV / JSON Lines input was encoded into by prepare's one encoder), and runs them
through the export in a fresh process (`serving_child`, started as `python -I` from a temporary working
directory without PYTHONPATH, the project's packages refused): the CPU `serve` meta graph only, its serving
signatures only, each row as a serialized `tf.train.Example` and as raw feature tensors. Every output with a
counterpart in the prediction rows must agree (`export.saved_model.outputs_agree`: floats to its `RTOL` and `ATOL`,
float32 arithmetic on batches of another size; integers and strings exactly). A disagreement raises
`ServingCheckError` naming the row, the signature, the output, both values and the difference.

Signatures: a built-in model's `predict` (serialized Examples) and `raw:predict` (one float32 or string input
per feature); a user's model (`model.user`), every signature of its `serve` graph that takes the serialized
Examples or the parsed features (its `serving_default` and `raw:serving_default`), output names matched to the
prediction rows' fields.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import select
import shutil
import subprocess
import sys
import tempfile
from typing import Any, Dict, Iterator, List, Mapping, Optional, Sequence, Tuple

import numpy as np
import tensorflow as tf

from estimator_lib import storage
from estimator_lib.config.feature_spec import FeatureSpec
from estimator_lib.config.stages import SERVING_CHECK_FILE as RECORD_FILE
from estimator_lib.export import saved_model, serving
from estimator_lib.model import transform
from estimator_lib.model.user import records as user_records
from estimator_lib.predict import serving_child
from estimator_lib.predict.shards import PREDICTIONS_MANIFEST
from estimator_lib.schema import CLASSIFICATION, KEY_FEATURE, Schema

SAMPLE_ROWS = 64
# The served graph runs batches of another size than batch prediction did: float32 results may differ in their
# last bits, never more.
CHILD_SCRIPT = serving_child.__file__
# The project's packages: the child refuses to import them (an installed image has them in site-packages).
PROJECT_PACKAGES = ("estimator_lib", "components", "pipelines")
BUILT_IN_SIGNATURES = (serving.PREDICT_SIGNATURE, serving.RAW_PREDICT_SIGNATURE)
EXAMPLES_TENSOR = f"{serving.EXAMPLES_INPUT}:0"
CHILD_TIMEOUT_SECONDS = 600


class ServingCheckError(RuntimeError):
    """The served export disagrees with batch prediction, or could not be served; the message says where."""


# -- the sample ------------------------------------------------------------------------------------------------
def first_rows(predictions_dir: str, limit: int) -> Tuple[Dict[str, Any], List[Dict[str, Any]]]:
    """The committed prediction output's manifest and its first `limit` rows (JSON objects, input order), read
    shard by shard without reading the rest."""
    if not storage.is_committed(predictions_dir):
        raise FileNotFoundError(f"{predictions_dir!r} holds no committed prediction output; run batch prediction")
    manifest = json.loads(storage.read_text(storage.join(predictions_dir, PREDICTIONS_MANIFEST)))
    rows: List[Dict[str, Any]] = []
    for shard in manifest["shards"]:
        with storage.open_read(storage.join(predictions_dir, shard["file"])) as f:
            for line in f:
                if len(rows) == limit:
                    return manifest, rows
                rows.append(json.loads(line))
    return manifest, rows


def input_records(files: Sequence[str], limit: int) -> Iterator[Tuple[str, int, bytes]]:
    """(file, record index in the file, serialized record) of the first `limit` records of `files`, in order.

    Raises:
      FileNotFoundError: a file it needs is gone (naming it).
    """
    left = limit
    for path in files:
        if left == 0:
            return
        if not storage.exists(path):
            raise FileNotFoundError(errno.ENOENT, "the predicted records are gone", path)
        compression = user_records.compression([path])
        for index, record in enumerate(tf.data.TFRecordDataset(path, compression).take(left).as_numpy_iterator()):
            yield path, index, record
            left -= 1


# -- comparing ---------------------------------------------------------------------------------------------------
def _where(row: Mapping[str, Any], source: Tuple[str, int, bytes]) -> str:
    key = f"key {row['key']!r}, " if "key" in row else ""
    return f"row {key}record {source[1]} of {source[0]}"


def compare_output(
    signature: str,
    output: str,
    served: np.ndarray,
    expected: np.ndarray,
    rows: Sequence[Mapping[str, Any]],
    sources: Sequence[Tuple[str, int, bytes]],
) -> float:
    """The largest absolute difference of one output over the sample; raises `ServingCheckError` at the first
    row that disagrees (beyond `saved_model.outputs_agree`, other values unequal), naming the row and both values.

    Args:
      served: the signature's output for the sample rows [n, ...].
      expected: the batch-prediction rows' values of that output [n, ...].
      rows, sources: the prediction rows and the records they came from, for the message.
    """
    n = len(rows)
    have, want = np.asarray(served).reshape(n, -1), np.asarray(expected).reshape(n, -1)
    if have.shape != want.shape:
        raise ServingCheckError(
            f"signature {signature!r} output {output!r} has {have.shape[1]} value(s) per row, the batch "
            f"predictions {want.shape[1]}: the export and the predictions are not of one model"
        )
    numeric = want.dtype.kind in "fiub" and have.dtype.kind in "fiub"
    for i in range(n):
        if not saved_model.outputs_agree(have[i], want[i]):
            raise ServingCheckError(_mismatch(signature, output, have[i], want[i], rows[i], sources[i], numeric))
    return float(np.max(np.abs(have.astype(np.float64) - want.astype(np.float64)))) if numeric and n else 0.0


def _mismatch(
    signature: str,
    output: str,
    have: np.ndarray,
    want: np.ndarray,
    row: Mapping[str, Any],
    source: Tuple[str, int, bytes],
    numeric: bool,
) -> str:
    served, predicted = _text(have), _text(want)
    difference = f"; difference {_text(np.abs(have.astype(np.float64) - want.astype(np.float64)))}" if numeric else ""
    limit = (
        f" (allowed rtol {saved_model.RTOL:g} + atol {saved_model.ATOL:g})"
        if numeric and want.dtype.kind == "f"
        else ""
    )
    return (
        f"serving check: {_where(row, source)}: signature {signature!r} output {output!r} served {served}, "
        f"batch prediction {predicted}{difference}{limit}: the export does not serve the model that predicted; "
        "nothing is released"
    )


def _text(values: np.ndarray) -> str:
    items = [v.decode("utf-8", "replace") if isinstance(v, bytes) else v for v in values.tolist()]
    return str(items[0] if len(items) == 1 else items)


# -- what is compared: built-in models ---------------------------------------------------------------------------
def _built_in_expected(schema: Schema, rows: Sequence[Mapping[str, Any]]) -> Dict[str, np.ndarray]:
    """The served outputs batch prediction wrote, from its rows: class ids and probabilities (in the schema's
    class order), or the regression value."""
    if schema.label.task == CLASSIFICATION:
        classes = schema.label.classes
        return {
            "class_ids": np.array([[row["class_id"]] for row in rows], dtype=np.int64),
            "probabilities": np.array([[row["probabilities"][c] for c in classes] for row in rows], np.float32),
        }
    return {"predictions": np.array([[row["value"]] for row in rows], dtype=np.float32)}


def _built_in_calls(metadata: Mapping[str, Any], examples: List[bytes]) -> Dict[str, Dict[str, np.ndarray]]:
    """{signature: feeds} of a built-in export: the Examples, and the raw features parsed from them as the
    export's own receiver parses them (missing values imputed)."""
    schema = Schema.from_dict(metadata["schema"])
    parsed = tf.io.parse_example(tf.constant(examples, tf.string), transform.parse_spec(schema, with_label=False))
    raw = {key: parsed[key].numpy() for key in metadata["serving"]["raw_inputs"]}
    return {
        serving.PREDICT_SIGNATURE: {serving.EXAMPLES_INPUT: np.array(examples, dtype=object)},
        serving.RAW_PREDICT_SIGNATURE: raw,
    }


# -- what is compared: user models -------------------------------------------------------------------------------
def _user_calls(
    metadata: Mapping[str, Any], signatures: Mapping[str, Any], examples: List[bytes]
) -> Tuple[Dict[str, Dict[str, np.ndarray]], Dict[str, str]]:
    """({signature: feeds}, {signature: why it is not called}) of a user's export: a signature that takes the
    serialized Examples gets them, one that takes the parsed features (the `raw` receiver) gets them parsed by
    the spec; any other is left out, and said so."""
    spec = FeatureSpec.from_json(metadata["feature_spec"], metadata.get("label"), metadata.get("key"))
    parsed = user_records.parse_batch(tf.constant(examples, tf.string), spec, with_label=False)
    raw = {name: tensor.numpy() for name, tensor in parsed.items()}
    calls, skipped = {}, {}
    for name, signature in sorted(signatures.items()):
        inputs = signature["inputs"]
        if [i["tensor"] for i in inputs.values()] == [EXAMPLES_TENSOR]:
            calls[name] = {next(iter(inputs)): np.array(examples, dtype=object)}
        elif inputs and set(inputs) <= set(raw):
            calls[name] = {key: raw[key] for key in inputs}
        else:
            skipped[name] = f"its inputs {sorted(inputs)} are neither the serialized Examples nor the spec's features"
    return calls, skipped


def _user_expected(rows: Sequence[Mapping[str, Any]], outputs: Sequence[str]) -> Dict[str, np.ndarray]:
    """The prediction rows' fields named like the signature's outputs."""
    return {name: np.array([row[name] for row in rows]) for name in outputs if rows and name in rows[0]}


# -- the child process -------------------------------------------------------------------------------------------
def child_environment() -> Dict[str, str]:
    """The child's environment: this one without PYTHONPATH, the CPU only."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env["CUDA_VISIBLE_DEVICES"] = ""
    return env


def child_command(script: str, *args: str) -> List[str]:
    """The child's command: this Python, isolated (`-I`: no PYTHON* variables, no user site, not the script's
    folder on the path), running `script`."""
    return [sys.executable, "-I", script, *args]


def prestart(script: str = CHILD_SCRIPT) -> None:
    """Starts the next `run_child`'s process now, so that its interpreter and TensorFlow import while other work
    runs (the local runner's stage server calls it at its start). The same isolated `python -I` process, from an
    empty temporary working directory, waiting for its request on standard input; it exits when that input ends
    unused. A child of another process (a forked stage) may take it: it is told its request on stdin and found
    finished by the end of its stdout."""
    global _waiting
    work = tempfile.mkdtemp(prefix="serving-check-wait-")
    with open(os.path.join(work, "stderr"), "wb") as stderr:
        process = subprocess.Popen(
            child_command(script, serving_child.WAIT_FLAG),
            cwd=work,
            env=child_environment(),
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=stderr,
        )
    _waiting = (process, work)


_waiting: Optional[Tuple[subprocess.Popen, str]] = None  # `prestart`'s child, until a `run_child` takes it


def _run_prestarted(work: str) -> Optional[str]:
    """Serves the request in `work` with `prestart`'s child when there is one and it is still waiting; returns
    its stderr, or None when there is none (the caller starts a child of its own)."""
    global _waiting
    if _waiting is None:
        return None
    (process, folder), _waiting = _waiting, None
    try:
        process.stdin.write(f"{work}\n".encode())
        process.stdin.close()
    except (BrokenPipeError, ValueError):  # it ended (taken by another fork, or killed)
        shutil.rmtree(folder, ignore_errors=True)
        return None
    # Its end is the end of its stdout: the child is that pipe's only writer.
    if not select.select([process.stdout], [], [], CHILD_TIMEOUT_SECONDS)[0]:
        process.kill()
        raise ServingCheckError(f"serving check: the serving process did not finish in {CHILD_TIMEOUT_SECONDS} s")
    process.stdout.read()
    with contextlib.suppress(ChildProcessError):  # reaped by the process that started it, when that is another
        process.wait(timeout=CHILD_TIMEOUT_SECONDS)
    with open(os.path.join(folder, "stderr"), encoding="utf-8", errors="replace") as f:
        stderr = f.read()
    shutil.rmtree(folder, ignore_errors=True)
    return stderr


def run_child(
    export_dir: str, calls: Mapping[str, Mapping[str, np.ndarray]], script: str = CHILD_SCRIPT
) -> Dict[str, Dict[str, np.ndarray]]:
    """Serves `calls` {signature: feeds} with the export's `serve` graph in a fresh `python -I` process (`script`,
    or `prestart`'s child of the same script) and returns {signature: {output: array}}.

    Raises:
      ServingCheckError: the child failed (its last lines of stderr are in the message).
    """
    work = tempfile.mkdtemp(prefix="serving-check-")
    try:
        request = {"export_dir": export_dir, "tags": list(saved_model.CPU_TAGS), "blocked": list(PROJECT_PACKAGES)}
        request["signatures"] = [
            {"name": name, "inputs": f"inputs-{i}.npz", "outputs": f"outputs-{i}.npz"} for i, name in enumerate(calls)
        ]
        for call, feeds in zip(request["signatures"], calls.values()):
            serving_child.write_arrays(os.path.join(work, call["inputs"]), feeds)
        with open(os.path.join(work, serving_child.REQUEST_FILE), "w", encoding="utf-8") as f:
            json.dump(request, f)
        stderr = _run_prestarted(work) if script == CHILD_SCRIPT else None
        if stderr is None:
            done = subprocess.run(
                child_command(script, work),
                cwd=work,
                env=child_environment(),
                capture_output=True,
                text=True,
                timeout=CHILD_TIMEOUT_SECONDS,
            )
            stderr = done.stderr
        if not _finished(work):
            tail = "\n".join(stderr.strip().splitlines()[-8:])
            raise ServingCheckError(f"serving check: the fresh serving process failed on {export_dir}:\n{tail}")
        return {c["name"]: serving_child.read_arrays(os.path.join(work, c["outputs"])) for c in request["signatures"]}
    finally:
        shutil.rmtree(work, ignore_errors=True)


def _finished(work: str) -> bool:
    """Whether the child served the whole request (its last act: `serving_child.STATUS_FILE`)."""
    try:
        with open(os.path.join(work, serving_child.STATUS_FILE), encoding="utf-8") as f:
            return json.load(f)["ok"] is True
    except (OSError, ValueError, KeyError):
        return False


# -- the check ---------------------------------------------------------------------------------------------------
def _compare_all(
    served: Mapping[str, Mapping[str, np.ndarray]],
    expected: Mapping[str, Mapping[str, np.ndarray]],
    rows: Sequence[Mapping[str, Any]],
    sources: Sequence[Tuple[str, int, bytes]],
) -> Dict[str, Dict[str, float]]:
    worst: Dict[str, Dict[str, float]] = {}
    for signature, outputs in expected.items():
        worst[signature] = {}
        # Floats first: a changed class follows from changed probabilities, which say more.
        for output, want in sorted(outputs.items(), key=lambda item: (item[1].dtype.kind != "f", item[0])):
            if output not in served[signature]:
                raise ServingCheckError(
                    f"serving check: signature {signature!r} has no output {output!r}; it has "
                    f"{sorted(served[signature])}"
                )
            got = served[signature][output]
            worst[signature][output] = compare_output(signature, output, got, want, rows, sources)
    return worst


def _check_order(rows: Sequence[Mapping[str, Any]], sources: Sequence[Tuple[str, int, bytes]]) -> None:
    """Each prediction row is its record's: the keys agree (built-in rows, and user rows with a key)."""
    if len(rows) != len(sources):
        raise ServingCheckError(
            f"serving check: the predictions have {len(rows)} row(s) to check but their inputs hold {len(sources)}"
        )
    for i, (row, source) in enumerate(zip(rows, sources)):
        if "index" in row and row["index"] != i:
            raise ServingCheckError(f"serving check: prediction row {i} holds index {row['index']}")
        example = tf.train.Example.FromString(source[2]).features.feature
        if "key" in row and KEY_FEATURE in example:
            key = example[KEY_FEATURE].bytes_list.value[0].decode("utf-8")
            if key != row["key"]:
                raise ServingCheckError(
                    f"serving check: prediction row {i} has key {row['key']!r} but record {source[1]} of "
                    f"{source[0]} has key {key!r}: the predictions are not of these inputs"
                )


def _plan(
    metadata: Mapping[str, Any], export_dir: str, rows: Sequence[Mapping[str, Any]], examples: List[bytes]
) -> Tuple[Dict[str, Any], Dict[str, Any], Dict[str, str]]:
    """(calls, expected outputs, skipped signatures) for a built-in or a user's export."""
    if "model_fn" in metadata:  # a user's model (`engine.user.run.export`)
        signatures = saved_model.describe_saved_model(export_dir)[",".join(saved_model.CPU_TAGS)]
        calls, skipped = _user_calls(metadata, signatures, examples)
        expected = {name: _user_expected(rows, signatures[name]["outputs"]) for name in calls}
        for name in [n for n, outputs in expected.items() if not outputs]:
            skipped[name] = "none of its outputs is a field of the prediction rows"
            del calls[name], expected[name]
        return calls, expected, skipped
    want = _built_in_expected(Schema.from_dict(metadata["schema"]), rows)
    return _built_in_calls(metadata, examples), {name: want for name in BUILT_IN_SIGNATURES}, {}


def check_serving(export_dir: str, predictions_dir: str, rows: int = SAMPLE_ROWS) -> Dict[str, Any]:
    """Serves the first `rows` predicted rows with the export in a fresh process and compares the outputs with
    the batch predictions.

    Args:
      export_dir: the exported SavedModel (local or gs://): a built-in model's (`saved_model.export_model`) or
        a user's (`engine.user.run.export`).
      predictions_dir: the committed batch predictions of the same model (`estimator_lib.predict`).
      rows: how many rows, from the first, to check.

    Returns:
      The record: {"rows_checked", "signatures" (called), "skipped" {signature: why}, "max_abs_diff"
      {signature: {output: float}}, "rtol", "atol", "tags", "input_files" (how many files the predictions
      read), "compared" (which rows, from where, in words)}.

    Raises:
      ServingCheckError: an output disagrees (naming the row, signature, output and values), or the export could
        not be served.
    """
    metadata = saved_model.read_export_metadata(export_dir)
    manifest, predicted = first_rows(predictions_dir, rows)
    files = list(manifest.get("inputs", []))
    record = {
        "rtol": saved_model.RTOL,
        "atol": saved_model.ATOL,
        "tags": list(saved_model.CPU_TAGS),
        "input_files": len(files),
    }
    record["compared"] = _compared(manifest, len(predicted))
    try:
        sources = list(input_records(files, len(predicted)))
    except FileNotFoundError as e:  # e.g. raw rows encoded into a temporary directory, deleted after scoring
        record["compared"] = f"nothing: the predicted records {e.filename} are gone"
        sources = predicted = []
    if not predicted:
        return {**record, "rows_checked": 0, "signatures": [], "skipped": {}, "max_abs_diff": {}}
    _check_order(predicted, sources)
    calls, expected, skipped = _plan(metadata, export_dir, predicted, [s[2] for s in sources])
    local = saved_model.local_copy(export_dir)
    try:
        served = run_child(local, calls) if calls else {}
    finally:
        if local != export_dir:
            shutil.rmtree(local, ignore_errors=True)
    worst = _compare_all(served, expected, predicted, sources)
    return {
        **record,
        "rows_checked": len(predicted),
        "signatures": sorted(calls),
        "skipped": skipped,
        "max_abs_diff": worst,
    }


def _compared(manifest: Mapping[str, Any], count: int) -> str:
    """What the checked rows are, in words: the first rows of the predicted records, and where they came from
    (raw rows encoded by prepare's encoder, or TFRecords as given)."""
    raw: Optional[Mapping[str, Any]] = manifest.get("raw")
    if raw:
        return f"the first {count} predicted rows of {raw['inputs']}, as prepare encoded them"
    return f"the first {count} predicted records of {list(manifest.get('inputs', []))[:3]}"


def write_record(directory: str, record: Mapping[str, Any]) -> str:
    """Writes the check's record (`check_serving`'s result) as `directory`/serving_check.json; returns its URI."""
    uri = storage.join(directory, RECORD_FILE)
    storage.write_text(uri, json.dumps(record, indent=2, sort_keys=True))
    return uri
