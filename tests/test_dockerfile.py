"""The component image's recipe, read as files (tests/test_image_build.py builds and runs the image).

The image installs the package with --no-deps, so its own pip line must carry every runtime dependency
pyproject.toml declares, with the same pins (TensorFlow aside: the image installs the TPU build or
TF_CPU_REQUIREMENT, which must equal the package's tensorflow-cpu pin). The TPU TensorFlow and libtpu
versions it defaults to must be a row of pipelines.image.TPU_RUNTIMES, which the build checks against."""

from __future__ import annotations

import os
import re
from typing import Dict, List

import pytest
from repo import ROOT

from pipelines import image


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


def _image_requirements() -> Dict[str, List[str]]:
    """{name: [each requirement text the Dockerfile quotes for it]}: its pip lines and TF_CPU_REQUIREMENT."""
    found: Dict[str, List[str]] = {}
    for line in _read("Dockerfile").splitlines():
        for name, requirement in _requirements(line).items():
            found.setdefault(name, []).append(requirement)
    return found


def _build_args() -> Dict[str, str]:
    """The Dockerfile's ARG defaults, quotes removed."""
    return {k: v.strip('"') for k, v in re.findall(r"^ARG ([A-Z_]+)=(.*)$", _read("Dockerfile"), re.M)}


def test_the_image_installs_every_runtime_dependency_with_the_same_pins():
    # "tensorflow" is the package's requirement off x86_64; the TPU image pins its own (TF_TPU_VERSION, checked below).
    wanted = {k: v for k, v in _project_dependencies().items() if k != "tensorflow"}
    assert {"tensorflow-estimator", "protobuf", "kfp", "numpy", "orjson", "google-cloud-aiplatform"} <= set(wanted)
    installed = _image_requirements()
    missing = sorted(set(wanted) - set(installed))
    assert not missing, f"Dockerfile does not install {missing} (the package is installed with --no-deps)"
    for name in wanted:
        assert set(installed[name]) == {wanted[name]}, f"{name}: Dockerfile has {installed[name]}, not {wanted[name]}"


def test_the_cpu_image_installs_the_packages_tensorflow_cpu_pin():
    assert _build_args()["TF_CPU_REQUIREMENT"].replace(" ", "") == _project_dependencies()["tensorflow-cpu"]


def test_the_default_tpu_build_is_a_tensorflow_libtpu_pair_of_the_table():
    args = _build_args()
    assert args["TENSORFLOW_BUILD"] == "tpu"
    assert image.TPU_RUNTIMES[args["TF_TPU_VERSION"]] == args["LIBTPU_VERSION"]
    # The download URLs follow the versions, so the versions the build checks are the ones it downloaded.
    assert "tf-${TF_TPU_VERSION}/tensorflow-${TF_TPU_VERSION}-cp310-" in args["TF_TPU_WHEEL"]
    assert "/libtpu/${LIBTPU_VERSION}/libtpu.so" in args["LIBTPU_URL"]
    assert "3.10" in args["BASE_IMAGE"]  # the TPU wheel is cp310


def test_the_image_installs_the_dataflow_extras_beam_and_boots_from_the_same_beam_sdk_image():
    """Dataflow needs the launcher's and the workers' Beam to be one version, the boot program from Beam's SDK
    image of that version and the image's Python (docs/scale.md)."""
    extra = re.search(r'^dataflow = \[("apache-beam\[gcp\]>=([\d.]+),<[\d.]+")\]', _read("pyproject.toml"), re.M)
    assert extra, "pyproject.toml has no dataflow extra apache-beam[gcp]>=X.Y,<..."
    dockerfile = _read("Dockerfile")
    assert extra.group(1) in dockerfile, f"the Dockerfile does not install {extra.group(1)}"
    args = _build_args()
    python = re.search(r"python:(3\.\d+)", args["BASE_IMAGE"]).group(1)
    assert args["BEAM_SDK_IMAGE"] == f"apache/beam_python{python}_sdk:{extra.group(2)}.0"
    assert "COPY --from=beam-sdk /opt/apache/beam /opt/apache/beam" in dockerfile
    assert 'ENTRYPOINT ["/opt/apache/beam/boot"]' in dockerfile


def test_the_image_copies_whole_package_directories():
    """New subpackages (estimator_lib/config/, ...) must reach the image without editing the Dockerfile."""
    packages = re.search(r"include = \[(.*?)\]", _read("pyproject.toml")).group(1)
    copied = re.findall(r"^COPY (\S+) /src/\1$", _read("Dockerfile"), re.M)
    assert sorted(copied) == sorted(p.strip('" *') for p in packages.split(","))


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
