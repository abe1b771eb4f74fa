"""`estimator_lib.model.user.package`: a user's code folder staged as a wheel named by its content, installed
into a fresh virtualenv, from which the model_fn imports."""

from __future__ import annotations

import os
import shutil
import site
import subprocess
import sys
import zipfile

import pytest
import repo

from estimator_lib.model.user.model_fn import UserCodeError
from estimator_lib.model.user.package import DISTRIBUTION, fingerprint, stage_code

EXAMPLE = os.path.join(repo.ROOT, "examples", "image_cnn")


def test_the_same_code_gives_the_same_wheel_and_a_change_gives_another_version(tmp_path):
    code = tmp_path / "code"
    shutil.copytree(EXAMPLE, code, ignore=shutil.ignore_patterns("__pycache__"))
    (code / "digits_cnn" / "__pycache__").mkdir()
    (code / "digits_cnn" / "__pycache__" / "model.cpython-311.pyc").write_bytes(b"compiled")
    first, again = stage_code(str(code), str(tmp_path / "a")), stage_code(str(code), str(tmp_path / "b"))
    assert first.version == again.version == f"0+{first.fingerprint[:12]}" and first.name == DISTRIBUTION
    with open(first.wheel, "rb") as a, open(again.wheel, "rb") as b:
        assert a.read() == b.read()
    assert first.files == ("digits_cnn/__init__.py", "digits_cnn/model.py", "hparams.json", "make_records.py")
    with zipfile.ZipFile(first.wheel) as wheel:
        names = wheel.namelist()
    assert f"{DISTRIBUTION}-{first.version}.dist-info/RECORD" in names and "digits_cnn/model.py" in names
    (code / "digits_cnn" / "model.py").write_text((code / "digits_cnn" / "model.py").read_text() + "\n# edited\n")
    assert stage_code(str(code), str(tmp_path / "c")).version != first.version


def test_a_folder_without_python_or_missing_is_named(tmp_path):
    with pytest.raises(UserCodeError, match=r"--code .*nowhere: not a directory"):
        fingerprint(str(tmp_path / "nowhere"))
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "notes.txt").write_text("x")
    with pytest.raises(UserCodeError, match=r"--code .*data: holds no Python file"):
        fingerprint(str(tmp_path / "data"))


@pytest.mark.slow
def test_the_staged_wheel_installs_into_a_fresh_virtualenv_and_the_model_fn_imports_from_it(tmp_path):
    staged = stage_code(EXAMPLE, str(tmp_path / "staged"))
    env_dir = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(env_dir)], check=True)
    python = str(env_dir / "bin" / "python")
    # The fresh environment sees this one's packages (TensorFlow) through a .pth file, as an image's would.
    purelib = subprocess.run(
        [python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout.strip()
    with open(os.path.join(purelib, "host-packages.pth"), "w") as f:
        f.write("\n".join(site.getsitepackages()) + "\n")
    subprocess.run([python, "-m", "pip", "install", "--quiet", "--no-index", "--no-deps", staged.wheel], check=True)
    probe = "import digits_cnn.model as m; print(m.__file__); print(callable(m.model_fn))"
    out = subprocess.run([python, "-c", probe], check=True, capture_output=True, text=True, cwd=str(tmp_path)).stdout
    module_file, is_callable = out.strip().splitlines()
    assert module_file.startswith(purelib) and is_callable == "True"
    shown = subprocess.run([python, "-m", "pip", "show", DISTRIBUTION], check=True, capture_output=True, text=True)
    assert f"Version: {staged.version}" in shown.stdout
