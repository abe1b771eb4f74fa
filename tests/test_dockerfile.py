"""The component image installs the package with --no-deps, so its own pip line must carry every runtime
dependency pyproject.toml declares (TensorFlow aside: the image has the TPU build). No Docker engine runs
here; these checks read the files."""

from __future__ import annotations

import os
import re
from typing import Dict

import pytest

from pipelines import image

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


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


# -- the version check the image build runs (pipelines.image.check_runtime) ---------------------------------------
def test_matching_tpu_and_cpu_runtimes_pass():
    image.check_runtime("tpu", "2.15.0", "2.15.0", "1.9.0")
    image.check_runtime("cpu", "2.15.1", "2.15.0", None)


@pytest.mark.parametrize(
    "args, message",
    [
        (("gpu", "2.15.0", "2.15.0", None), "TENSORFLOW_BUILD='gpu' is not a TensorFlow build; use one of"),
        (("cpu", "2.16.1", "2.15.0", None), "TensorFlow 2.16.1 is installed, but tf.estimator needs 2.15.x"),
        (("cpu", "2.15.1", "2.14.0", None), "tensorflow-estimator 2.14.0 is installed; TensorFlow 2.15 needs 2.15.0"),
        (("cpu", "2.15.1", "2.15.0", "1.9.0"), "the cpu image has a libtpu (/lib/libtpu.so)"),
        (("tpu", "2.15.1", "2.15.0", "1.9.0"), "TensorFlow 2.15.1 has no known libtpu; set TF_TPU_VERSION to one of"),
        (
            ("tpu", "2.15.0", "2.15.0", "1.8.0"),
            "libtpu 1.8.0 does not go with TensorFlow 2.15.0; set LIBTPU_VERSION=1.9.0",
        ),
        (("tpu", "2.15.0", "2.15.0", None), "libtpu None does not go with TensorFlow 2.15.0"),
    ],
)
def test_mismatched_runtimes_fail_naming_the_build_argument(args, message):
    with pytest.raises(ValueError, match=re.escape(message)):
        image.check_runtime(*args)
