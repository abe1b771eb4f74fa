"""The package as users get it: the wheel built from this checkout, installed into a fresh venv outside the
repository, runs `run-local`, `compile --tpu v3-8` and `submit --dry-run` from a directory outside the repository.

So as not to download TensorFlow again, the fresh venv sees distributions already installed here, but only those
the wheel's own requirements reach (the closure of its Requires-Dist, followed through importlib.metadata), through
a directory of links: a module the package imports without declaring it is missing there, as on a user's machine,
and `pip install --no-index` of the wheel fails if a declared requirement is. The project's own code and its
embedded data come from the wheel only.
"""

from __future__ import annotations

import collections
import glob
import json
import os
import subprocess
import sys
import zipfile
from importlib import metadata
from typing import Dict, Iterable, List, Set, Tuple

import pytest
import yaml
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from repo import ROOT

pytestmark = pytest.mark.slow


PROJECT = "tpu-estimator-pipelines"
PACKAGES = ("estimator_lib", "components", "pipelines")
IMAGE = "us-central1-docker.pkg.dev/proj/repo/tpu-pipeline@sha256:" + "ab" * 32
TRAIN_STEPS = 20


def requirement_closure(requirements: Iterable[str]) -> Dict[str, metadata.Distribution]:
    """{name: installed distribution} for `requirements` and everything they require, extras followed."""
    found: Dict[str, metadata.Distribution] = {}
    pending: List[Tuple[str, Tuple[str, ...]]] = [(r, ("",)) for r in requirements]
    while pending:
        text, extras = pending.pop()
        requirement = Requirement(text)
        if requirement.marker and not any(requirement.marker.evaluate({"extra": e}) for e in extras):
            continue
        name = canonicalize_name(requirement.name)
        dist = metadata.distribution(name)  # PackageNotFoundError: this environment lacks a declared requirement
        if name not in found:
            found[name] = dist
        pending += [(r, ("", *requirement.extras)) for r in dist.requires or []]
    return found


def _owners(site_packages: str) -> Dict[str, Set[str]]:
    """{path in site-packages (each file and each directory above it): the distributions owning files there}."""
    owners: Dict[str, Set[str]] = collections.defaultdict(set)
    for dist in metadata.distributions(path=[site_packages]):
        name = canonicalize_name(dist.metadata["Name"])
        for parts in (f.parts for f in dist.files or [] if f.parts[0] != ".."):
            for depth in range(1, len(parts) + 1):
                owners["/".join(parts[:depth])].add(name)
    return owners


def link_view(closure: Dict[str, metadata.Distribution], view: str) -> None:
    """Links into `view` the files of the `closure` distributions: each at the shallowest directory that holds
    nothing of any other distribution (so namespace directories such as google/ are split where they must be)."""
    by_site: Dict[str, List[metadata.Distribution]] = collections.defaultdict(list)
    for dist in closure.values():
        by_site[str(dist.locate_file(""))].append(dist)
    for site_packages, dists in by_site.items():
        owners, linked = _owners(site_packages), set()
        for parts in (f.parts for d in dists for f in d.files or [] if f.parts[0] != ".."):
            for depth in range(1, len(parts) + 1):
                prefix = "/".join(parts[:depth])
                if prefix in linked:
                    break
                if owners[prefix] <= set(closure):
                    os.makedirs(os.path.dirname(os.path.join(view, prefix)), exist_ok=True)
                    os.symlink(os.path.join(site_packages, prefix), os.path.join(view, prefix))
                    linked.add(prefix)
                    break


def _run(argv: List[str], cwd: str, timeout: int = 900) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    env["TF_CPP_MIN_LOG_LEVEL"] = "2"
    proc = subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)
    assert proc.returncode == 0, f"{' '.join(argv[:4])} failed:\n{proc.stdout[-4000:]}\n{proc.stderr[-4000:]}"
    return proc


@pytest.fixture(scope="module")
def installed(tmp_path_factory):
    """(venv, its site-packages, the wheel, a working directory outside the repository)."""
    base = tmp_path_factory.mktemp("packaging")
    assert not str(base).startswith(ROOT + os.sep)
    wheels, venv, view, cwd = (str(base / name) for name in ("wheels", "venv", "deps", "work"))
    os.makedirs(cwd)
    _run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--wheel-dir", wheels, ROOT], cwd=cwd)
    (wheel,) = glob.glob(os.path.join(wheels, "*.whl"))
    with zipfile.ZipFile(wheel) as zf:
        (meta,) = [n for n in zf.namelist() if n.endswith(".dist-info/METADATA")]
        requires = [
            line.split(":", 1)[1].strip()
            for line in zf.read(meta).decode().splitlines()
            if line.startswith("Requires-Dist:")
        ]
    link_view(requirement_closure(requires), view)
    _run([sys.executable, "-m", "venv", venv], cwd=cwd)
    python = os.path.join(venv, "bin", "python")
    site_packages = _run(
        [python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"], cwd
    ).stdout.strip()
    with open(os.path.join(site_packages, "_installed_dependencies.pth"), "w", encoding="utf-8") as f:
        f.write(view + "\n")
    _run([python, "-m", "pip", "install", "--no-index", wheel], cwd=cwd)  # resolves every Requires-Dist, offline
    _run([python, "-m", "pip", "check"], cwd=cwd)
    return venv, site_packages, wheel, cwd


def test_the_wheel_declares_the_vertex_ai_libraries_as_core_dependencies(installed):
    _, _, wheel, _ = installed
    with zipfile.ZipFile(wheel) as zf:
        (meta,) = [n for n in zf.namelist() if n.endswith(".dist-info/METADATA")]
        requires = [line for line in zf.read(meta).decode().splitlines() if line.startswith("Requires-Dist:")]
    for name in ("google-cloud-aiplatform", "google-cloud-pipeline-components", "kfp", "tensorflow-estimator"):
        (line,) = [r for r in requires if r.split(":")[1].strip().startswith(name)]
        assert "extra ==" not in line, line


def test_every_module_and_the_embedded_data_come_from_the_wheel(installed):
    venv, site_packages, _, cwd = installed
    script = f"""
import importlib, importlib.util, json, pkgutil, sys
from importlib import metadata
files = {{}}
for top in {PACKAGES!r}:
    package = importlib.import_module(top)
    files[top] = package.__file__
    for info in pkgutil.walk_packages(package.__path__, top + "."):  # where each module loads from, unrun
        files[info.name] = importlib.util.find_spec(info.name).origin
record = [str(f) for f in metadata.distribution({PROJECT!r}).files]
print(json.dumps({{"files": files, "record": record, "path": sys.path}}))
"""
    found = json.loads(_run([os.path.join(venv, "bin", "python"), "-c", script], cwd).stdout.strip().splitlines()[-1])
    assert not [p for p in found["path"] if p.startswith(ROOT)], "the repository is on the installed package's path"
    outside = {m: f for m, f in found["files"].items() if not f.startswith(site_packages + os.sep)}
    assert not outside, f"modules not from the wheel: {outside}"
    assert len(found["files"]) > 20 and "components.train" in found["files"]
    py_in_wheel = {f for f in found["record"] if f.endswith(".py") and f.split("/")[0] in PACKAGES}
    imported = {os.path.relpath(f, site_packages) for f in found["files"].values()}
    assert imported == py_in_wheel
    (csv,) = [f for f in found["record"] if f.endswith("penguins.csv")]
    assert os.path.getsize(os.path.join(site_packages, csv)) > 10_000


def test_run_local_from_the_installed_package(installed):
    venv, _, _, cwd = installed
    output = os.path.join(cwd, "run")
    cli = os.path.join(venv, "bin", "tpu-pipeline")
    proc = _run([cli, "run-local", "--output", output, "--set", f"training.train_steps={TRAIN_STEPS}"], cwd)
    assert proc.stdout.rstrip().splitlines()[-1] == f"summary: {os.path.join(output, 'summary.json')}"
    with open(os.path.join(output, "summary.json"), encoding="utf-8") as f:
        summary = json.load(f)
    assert sum(summary["dataset"]["counts"].values()) == 344  # embedded penguins: train, valid, eval
    assert summary["model"]["trained_steps"] == TRAIN_STEPS and 0 < summary["model"]["global_step"] <= TRAIN_STEPS
    assert summary["predictions"]["count"] == summary["dataset"]["counts"]["eval"]
    assert sorted(map(sorted, summary["export"]["tag_sets"])) == [["serve"], ["serve", "tpu"]]


def test_compile_for_a_tpu_from_the_installed_package(installed):
    venv, _, _, cwd = installed
    cli = os.path.join(venv, "bin", "tpu-pipeline")
    output = os.path.join(cwd, "pipeline.yaml")
    proc = _run([cli, "compile", "--tpu", "v3-8", "--image", IMAGE, "--output", output], cwd)
    assert "train/evaluate/batch predict on TPU v3-8" in proc.stdout
    with open(output, encoding="utf-8") as f:
        spec = yaml.safe_load(f)
    images = {e["container"]["image"] for e in spec["deploymentSpec"]["executors"].values()}
    assert IMAGE in images  # prepare and export; the TPU stages run inside custom jobs on the same image
    assert "cloud-tpu" in json.dumps(spec) and "TPU_V3" in json.dumps(spec)


def test_compile_outside_a_git_checkout_asks_for_an_image_in_one_line(installed):
    venv, _, _, cwd = installed
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    proc = subprocess.run(
        [os.path.join(venv, "bin", "tpu-pipeline"), "compile", "--tpu", "v3-8", "--output", "x.yaml"],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 2
    assert proc.stderr.strip().startswith("tpu-pipeline compile: error: cannot tag the image with a commit")
    assert len(proc.stderr.strip().splitlines()) == 1 and "pass --image" in proc.stderr


def test_submit_dry_run_from_the_installed_package(installed):
    venv, _, _, cwd = installed
    cli = os.path.join(venv, "bin", "tpu-pipeline")
    args = ["submit", "--dry-run", "--project", "proj", "--region", "us-central1", "--pipeline-root", "gs://b/runs"]
    proc = _run([cli, *args, "--tpu", "v3-8", "--image", IMAGE, "--set", f"training.train_steps={TRAIN_STEPS}"], cwd)
    request = json.loads(proc.stdout)
    assert request["runtimeConfig"]["gcsOutputDirectory"] == "gs://b/runs"
    train_spec = json.loads(request["runtimeConfig"]["parameterValues"]["train_spec"])  # one JSON parameter
    assert train_spec["job"]["training"]["train_steps"] == TRAIN_STEPS
