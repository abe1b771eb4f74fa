"""The component image installs the package with --no-deps, so its own pip line must carry every runtime
dependency pyproject.toml declares (TensorFlow aside: the image has the TPU build). No Docker engine runs
here; these checks read the files."""

from __future__ import annotations

import os
import re
from typing import Dict

from repo import ROOT


def _read(name: str) -> str:
    with open(os.path.join(ROOT, name), encoding="utf-8") as f:
        return f.read()


def _requirements(text: str) -> Dict[str, str]:
    """{name: requirement text} of the quoted requirements in `text` (environment markers dropped)."""
    out = {}
    for requirement in re.findall(r'"([A-Za-z0-9_.\-]+\s*(?:[<>=!~][^";]*)?)(?:;[^"]*)?"', text):
        name = re.match(r"[A-Za-z0-9_.\-]+", requirement).group(0).lower()
        out[name] = requirement.replace(" ", "")
    return out


def _project_dependencies() -> Dict[str, str]:
    block = re.search(r"^dependencies = \[(.*?)^\]", _read("pyproject.toml"), re.S | re.M)
    assert block, "pyproject.toml has no [project] dependencies list"
    lines = [line.split("#")[0] for line in block.group(1).splitlines()]
    return _requirements("\n".join(lines))


def _image_pip_installs() -> Dict[str, str]:
    dockerfile = _read("Dockerfile")
    installs = re.findall(r"^RUN pip install ((?:.*\\\n)*.*)$", dockerfile, re.M)
    return _requirements("\n".join(installs))


def test_the_image_installs_every_runtime_dependency_with_the_same_pins():
    wanted = {k: v for k, v in _project_dependencies().items() if k not in ("tensorflow", "tensorflow-cpu")}
    assert {"tensorflow-estimator", "protobuf", "kfp", "numpy", "orjson"} <= set(wanted)  # the parse found them
    installed = _image_pip_installs()
    missing = sorted(set(wanted) - set(installed))
    assert not missing, f"Dockerfile does not install {missing} (the package is installed with --no-deps)"
    assert {k: installed[k] for k in wanted} == wanted


def test_the_image_smoke_test_imports_the_modules_with_native_dependencies():
    check = re.search(r'python -c "(.*?)"', _read("Dockerfile"), re.S)
    assert check, "Dockerfile has no import check"
    for module in ("estimator_lib.estimator", "estimator_lib.predict", "components"):
        assert module in check.group(1)
