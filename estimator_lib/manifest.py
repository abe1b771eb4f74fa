"""Stage manifests: what one pipeline stage read, was configured with, ran on and wrote, and how two compare.

Every stage writes `stage_manifest.json` beside its outputs (in its task directory):

    {"format_version": 1, "stage": "train",
     "inputs":   {name: {"uri": ..., "fingerprint": ...}},     # artifacts and files the stage read, by content
     "config":   {...},                                       # the full resolved config the stage ran with
     "seeds":    {"job.training.seed": 42},                    # every seed in the config, by dotted key
     "versions": {"python": ..., "tensorflow": ..., "tensorflow-estimator": ..., "kfp": ...,
                  "tpu-estimator-pipelines": ..., "commit": ... | null, "modified": bool | null,
                  "image": ... | null},
     "machine":  {"kind": "CPU" | "TPU", "type": ..., "cores": ...,      # on CPU also: the processor's
                  "cpu": ..., "isa": [...], "kernels": {...}},           # model, vector ISA, kernel settings
     "outputs":  {name: {"uri": ..., "fingerprint": ...}},
     "started": ISO time, "ended": ISO time}

Fingerprints are content hashes (sha256): they do not depend on times, temporary paths or the order shards were
written in, so a stage run again on the same inputs with the same config and versions writes outputs of the same
fingerprints (on CPU, where training is bitwise repeatable). `compare_stage` says whether a stage ran again
gave the same outputs and, when not, what differs first: its input data, its config, the versions, the machine
(another processor or kernel setting: TensorFlow's CPU kernels round differently on another ISA, so outputs are
bitwise repeatable only on the same kind of machine), or only the output.

TensorFlow-free (the CLI compares records without loading it); versions are read from the installed packages'
metadata, the processor from /proc/cpuinfo. Nothing here reads flags or environment variables: the image, the TPU
type and the kernel settings come in as arguments.
"""

from __future__ import annotations

import dataclasses
import importlib.metadata
import json
import os
import platform
import re
import subprocess
from collections.abc import Mapping, Sequence
from typing import Any, Optional

from estimator_lib import storage

MANIFEST_FILE = "stage_manifest.json"
FORMAT_VERSION = 1
PACKAGE = "tpu-estimator-pipelines"
# The packages whose versions decide a run's numbers; the first installed distribution of each name counts.
VERSIONED = {
    "tensorflow": ("tensorflow", "tensorflow-cpu", "tf-nightly"),
    "tensorflow-estimator": ("tensorflow-estimator",),
    "kfp": ("kfp",),
    PACKAGE: (PACKAGE,),
}
# What differs between a recorded stage and its rerun, in the order a cause is looked for.
DATA, CONFIG, VERSIONS, MACHINE, OUTPUT = "data", "config", "versions", "machine", "output"
# Config keys that name where a run publishes and what its publish root held, not what the stage computes:
# a rerun publishes into a root of its own.
NOT_COMPARED = ("based_on", "publish_root")
CPU, TPU = "CPU", "TPU"
# The environment variables that choose TensorFlow's CPU kernels (oneDNN on or off, its widest ISA): a stage's
# entry point reads them and the manifest records them, since they change the last bits of float results.
KERNEL_SETTINGS = ("TF_ENABLE_ONEDNN_OPTS", "ONEDNN_MAX_CPU_ISA")
# The processor features that select different CPU kernels (oneDNN and Eigen dispatch on them).
KERNEL_ISA_FLAGS = ("sse4_2", "avx", "avx2", "fma", "avx512f", "avx512_vnni", "avx512_bf16", "amx_tile")
CPUINFO = "/proc/cpuinfo"


# -- what a stage ran with -----------------------------------------------------------------------------------
def _git(directory: str, *args: str) -> Optional[str]:
    """The output of `git -C directory args...`, or None outside git (or without git)."""
    try:
        out = subprocess.run(["git", "-C", directory, *args], capture_output=True, text=True, check=True, timeout=10)
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip()


def git_commit(directory: str) -> Optional[str]:
    """The checked-out commit of the git work tree holding `directory`, or None outside git."""
    commit = _git(directory, "rev-parse", "HEAD")
    return commit if commit and re.fullmatch(r"[0-9a-f]{40}", commit) else None


def git_modified(directory: str) -> Optional[bool]:
    """Whether tracked files of the git work tree holding `directory` differ from its commit (None outside git):
    a commit names the code only when nothing is modified."""
    status = _git(directory, "status", "--porcelain", "--untracked-files=no")
    return None if status is None else bool(status)


def _installed(names: Sequence[str]) -> Optional[str]:
    for name in names:
        try:
            return importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            continue
    return None


def versions(commit: Optional[str], modified: Optional[bool], image: Optional[str]) -> dict[str, Any]:
    """Python's and the deciding packages' versions, this package's git commit and whether the checkout had
    modified files (when run from a checkout; None otherwise), and the image the stage ran in (when the image
    says so)."""
    found = {key: _installed(names) for key, names in VERSIONED.items()}
    code = {"commit": commit, "modified": modified, "image": image}
    return {"python": platform.python_version(), **found, **code}


def machine(
    tpu: Mapping[str, Any], tpu_type: Optional[str], kernels: Optional[Mapping[str, str]] = None
) -> dict[str, Any]:
    """The kind of machine a stage ran on: a TPU (its type, e.g. "v3-8", and cores) or the host CPU (its
    architecture, cores, processor model, the vector ISA flags that pick kernels, and the kernel settings).

    Args:
      tpu: the stage's `TPUSettings` as a dict (`use_tpu`, `num_cores`).
      tpu_type: the accelerator type the TPU VM reports, or None where it is not known.
      kernels: the `KERNEL_SETTINGS` environment variables that are set, {name: value}.
    """
    if tpu.get("use_tpu"):
        return {"kind": TPU, "type": tpu_type or "unknown", "cores": tpu.get("num_cores")}
    model, isa = processor()
    return {
        "kind": CPU,
        "type": platform.machine(),
        "cores": os.cpu_count(),
        "cpu": model,
        "isa": isa,
        "kernels": dict(sorted((kernels or {}).items())),
    }


def processor(cpuinfo: str = CPUINFO) -> tuple[Optional[str], list[str]]:
    """(model name, the `KERNEL_ISA_FLAGS` it has) of the host's processor, read from `cpuinfo`; (None, [])
    where that file does not exist (not Linux)."""
    try:
        with open(cpuinfo, encoding="utf-8", errors="replace") as f:
            text = f.read()
    except OSError:
        return None, []
    fields = dict(re.findall(r"^(model name|flags|Features)\s*:\s*(.*)$", text, flags=re.MULTILINE))
    flags = set((fields.get("flags") or fields.get("Features") or "").split())
    return fields.get("model name"), [flag for flag in KERNEL_ISA_FLAGS if flag in flags]


def seeds_in(config: Any, prefix: str = "", seeded: bool = False) -> dict[str, Any]:
    """Every value under a key naming a seed in a nested config, by dotted key: {"job.training.seed": 42}."""
    if not isinstance(config, Mapping):
        return {prefix.rstrip("."): config} if seeded else {}
    found: dict[str, Any] = {}
    for key, value in config.items():
        found.update(seeds_in(value, f"{prefix}{key}.", seeded or "seed" in str(key).lower()))
    return found


def stage_manifest(
    stage: str,
    inputs: Mapping[str, Mapping[str, Any]],
    config: Mapping[str, Any],
    outputs: Mapping[str, Mapping[str, Any]],
    environment: Mapping[str, Any],
    started: str,
    ended: str,
) -> dict[str, Any]:
    """A stage's manifest (see the module's docstring).

    Args:
      stage: the stage's name ("prepare", "train", ...).
      inputs: {name: {"uri", "fingerprint"}} of what it read.
      config: the full resolved config it ran with (JSON values).
      outputs: {name: {"uri", "fingerprint"}} of what it wrote.
      environment: {"versions": `versions(...)`, "machine": `machine(...)`}.
      started, ended: ISO 8601 UTC times.
    """
    config = json.loads(json.dumps(config, sort_keys=True, default=str))
    return {
        "format_version": FORMAT_VERSION,
        "stage": stage,
        "inputs": {name: dict(value) for name, value in sorted(inputs.items())},
        "config": config,
        "seeds": seeds_in(config),
        "versions": dict(environment["versions"]),
        "machine": dict(environment["machine"]),
        "outputs": {name: dict(value) for name, value in sorted(outputs.items())},
        "started": started,
        "ended": ended,
    }


def manifest_path(task_dir: str) -> str:
    return storage.join(task_dir, MANIFEST_FILE)


def write_manifest(task_dir: str, manifest: Mapping[str, Any]) -> str:
    """Writes the manifest into the stage's task directory (atomically) and returns its URI."""
    path = manifest_path(task_dir)
    storage.write_text(path, json.dumps(manifest, indent=2, sort_keys=True) + "\n")
    return path


def read_manifest(uri: str) -> dict[str, Any]:
    """A manifest `write_manifest` wrote.

    Raises:
      FileNotFoundError: naming the file (a run recorded before stages wrote manifests has none).
    """
    try:
        return json.loads(storage.read_text(uri))
    except FileNotFoundError:
        raise FileNotFoundError(f"{uri}: no stage manifest there (was the run recorded by an older version?)") from None


# -- comparing -----------------------------------------------------------------------------------------------
def differences(a: Any, b: Any, prefix: str = "") -> list[str]:
    """Where two JSON values differ, one line per dotted key: "training.seed: 42 -> 7"."""
    if isinstance(a, Mapping) and isinstance(b, Mapping):
        lines = []
        for key in sorted(set(a) | set(b), key=str):
            dotted = f"{prefix}.{key}" if prefix else str(key)
            if key not in b:
                lines.append(f"{dotted}: {_short(a[key])} -> (absent)")
            elif key not in a:
                lines.append(f"{dotted}: (absent) -> {_short(b[key])}")
            else:
                lines.extend(differences(a[key], b[key], dotted))
        return lines
    return [] if a == b else [f"{prefix or '(value)'}: {_short(a)} -> {_short(b)}"]


def _short(value: Any, limit: int = 80) -> str:
    text = json.dumps(value, sort_keys=True, default=str)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _compared_config(config: Mapping[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in config.items() if k not in NOT_COMPARED}


def _fingerprints(section: Mapping[str, Mapping[str, Any]]) -> dict[str, Any]:
    return {name: value.get("fingerprint") for name, value in section.items()}


@dataclasses.dataclass(frozen=True)
class StageComparison:
    """One stage of a recorded run against the same stage run again.

    Attributes:
      stage: the stage.
      same: every output fingerprint matches.
      differs: when an output differs, the first cause found: "data" (an input's fingerprint), "config",
        "versions", or "output" (same inputs, config and versions, other output: not repeatable); "" when same.
      details: the differing keys, "name: recorded -> rerun" (outputs too, after the cause).
    """

    stage: str
    same: bool
    differs: str
    details: tuple[str, ...]

    def line(self) -> str:
        if self.same:
            return f"{self.stage}: identical"
        if self.differs == MACHINE:
            return (
                f"{self.stage}: differs (machine: another processor or kernel setting, same data, config and "
                "versions; CPU kernels round the last bits differently across machines, so outputs are bitwise "
                "only on the same kind of machine): " + "; ".join(self.details)
            )
        return f"{self.stage}: differs ({self.differs}): " + "; ".join(self.details)


def compare_stage(recorded: Mapping[str, Any], rerun: Mapping[str, Any]) -> StageComparison:
    """Whether a stage run again wrote outputs of the same fingerprints, and if not, what differs first."""
    stage = str(recorded.get("stage") or rerun.get("stage"))
    outputs = differences(_fingerprints(recorded["outputs"]), _fingerprints(rerun["outputs"]), "outputs")
    if not outputs:
        return StageComparison(stage, True, "", ())
    causes = (
        (DATA, differences(_fingerprints(recorded["inputs"]), _fingerprints(rerun["inputs"]), "inputs")),
        (CONFIG, differences(_compared_config(recorded["config"]), _compared_config(rerun["config"]), "config")),
        (VERSIONS, differences(recorded["versions"], rerun["versions"], "versions")),
        (MACHINE, differences(recorded.get("machine", {}), rerun.get("machine", {}), "machine")),
    )
    kind, details = next(((k, d) for k, d in causes if d), (OUTPUT, []))
    return StageComparison(stage, False, kind, (*details, *outputs))


def compare_runs(
    recorded: Mapping[str, Mapping[str, Any]], rerun: Mapping[str, Mapping[str, Any]], stages: Sequence[str]
) -> list[StageComparison]:
    """`compare_stage` for each of `stages` (in pipeline order) both runs have a manifest of; a stage only one
    run has is reported as differing in its output."""
    out = []
    for stage in stages:
        if stage in recorded and stage in rerun:
            out.append(compare_stage(recorded[stage], rerun[stage]))
        elif stage in recorded or stage in rerun:
            missing = "the rerun" if stage in recorded else "the recorded run"
            out.append(StageComparison(stage, False, OUTPUT, (f"{missing} has no manifest of this stage",)))
    return out
