"""`estimator_lib.model.user.package`: a user's code folder staged as a wheel named by its content, installed
into a fresh virtualenv, from which the model_fn imports."""

from __future__ import annotations

import hashlib
import os
import shutil
import site
import subprocess
import sys
import zipfile

import pytest
import repo

from estimator_lib.model.user.model_fn import UserCodeError
from estimator_lib.model.user.package import DISTRIBUTION, fingerprint, select, stage_code

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
    assert tuple(first.files) == ("digits_cnn/__init__.py", "digits_cnn/model.py", "hparams.json", "make_records.py")
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


# -- what a code folder packages (issue #46: links, exclusions, warnings, streaming) ------------------------------
def write(root, files) -> str:
    for relative, data in files.items():
        path = root / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
    return str(root)


MODEL = {"pkg/__init__.py": b"", "pkg/model.py": b"def model_fn():\n    pass\n"}


def test_the_wheel_of_a_plain_folder_keeps_its_bytes(tmp_path):
    # A file over the 1 MiB block, so the streamed write is checked against the bytes written whole before.
    code = write(tmp_path / "code", {**MODEL, "pkg/table.bin": bytes(range(256)) * 8192 + b"tail"})
    staged = stage_code(code, str(tmp_path / "wheel"))
    assert staged.fingerprint == "e82209af78aecd9b0cb2be13692dcb5af05d38ec66db5f58a722819deb737c09"
    with open(staged.wheel, "rb") as f:
        assert hashlib.sha256(f.read()).hexdigest() == (
            "f0e87ee0a1a3391e3282882b9bc04ef02a11c11cb767e6a8bde9367fbf6b762c"
        )


@pytest.mark.parametrize("target", ["/etc/passwd", "/etc"])
def test_a_link_that_leaves_the_folder_is_refused_naming_it(tmp_path, target):
    code = write(tmp_path / "code", MODEL)
    os.symlink(target, os.path.join(code, "pkg", "copy"))
    with pytest.raises(UserCodeError, match=rf"--code {code}: pkg/copy is a link to {target}, outside the folder"):
        stage_code(code, str(tmp_path / "wheel"))
    with pytest.raises(UserCodeError, match="pkg/copy is a link"):
        fingerprint(code)


def test_links_that_stay_inside_are_followed_and_a_loop_is_refused(tmp_path):
    code = write(tmp_path / "code", {**MODEL, "shared/util.py": b"X = 1\n"})
    os.symlink("../shared", os.path.join(code, "pkg", "common"))
    os.symlink("../shared/util.py", os.path.join(code, "pkg", "util.py"))
    staged = stage_code(code, str(tmp_path / "wheel"))
    assert tuple(staged.files) == (
        "pkg/__init__.py",
        "pkg/common/util.py",
        "pkg/model.py",
        "pkg/util.py",
        "shared/util.py",
    )
    with zipfile.ZipFile(staged.wheel) as wheel:
        assert wheel.read("pkg/common/util.py") == wheel.read("pkg/util.py") == b"X = 1\n"
    os.symlink("..", os.path.join(code, "shared", "up"))
    with pytest.raises(UserCodeError, match=r"(shared|pkg/common)/up leads back to .*code, a folder above it"):
        select(code)
    os.remove(os.path.join(code, "shared", "up"))
    os.symlink("../pkg", os.path.join(code, "shared", "across"))  # pkg/common -> shared, shared/across -> pkg
    with pytest.raises(UserCodeError, match=r"leads back to .*code/(pkg|shared), a folder above it"):
        select(code)


def test_what_is_left_out_is_listed_with_why(tmp_path):
    code = write(
        tmp_path / "code",
        {
            **MODEL,
            ".env": b"TOKEN=x",
            ".git/config": b"",
            "pkg/__pycache__/model.cpython-311.pyc": b"",
            "pkg/old.pyc": b"",
            "data/train.csv": b"a\n1\n",
            "pkg/lookup.csv": b"a\n",
            "notes/todo.txt": b"",
            "notes/keep.md": b"",
            "runs/local/.lock": b"{}",
            "runs/local/runs/r1/summary.json": b"{}",
            # "model.py/" matches a folder only: pkg/model.py stays
            ".tpu-pipeline-ignore": b"# comment\n\ndata/\nnotes/*.txt\n*.csv\nmodel.py/\n",
        },
    )
    os.mkfifo(os.path.join(code, "pkg", "pipe"))
    chosen = select(code)
    assert sorted(chosen.files) == ["notes/keep.md", "pkg/__init__.py", "pkg/model.py"]
    assert chosen.files["pkg/model.py"] == len(MODEL["pkg/model.py"])
    assert chosen.excluded == {
        ".env": "hidden",
        ".git/": "hidden",
        ".tpu-pipeline-ignore": "hidden",
        "data/": ".tpu-pipeline-ignore: data/",
        "notes/todo.txt": ".tpu-pipeline-ignore: notes/*.txt",
        "pkg/__pycache__/": "compiled Python",
        "pkg/lookup.csv": ".tpu-pipeline-ignore: *.csv",
        "pkg/old.pyc": "compiled Python",
        "pkg/pipe": "not a regular file",
        "runs/local/": "the output folder of a local run",
    }


def test_a_run_writing_its_output_inside_the_code_folder_keeps_its_fingerprint(tmp_path):
    code = write(tmp_path / "code", MODEL)
    before = fingerprint(code)
    write(tmp_path / "code" / "runs" / "local", {".lock": b"{}", "runs/r1/pipeline-root/train/ckpt": b"1"})
    assert fingerprint(code) == before
    write(tmp_path / "code" / "runs" / "local", {"runs/r1/pipeline-root/train/ckpt": b"2", "summary.json": b"{}"})
    assert fingerprint(code) == before


def test_large_and_key_like_files_are_warned_about(tmp_path):
    key = b'{"type": "service_account", "private_key": "-----BEGIN PRIVATE KEY-----"}'
    code = write(
        tmp_path / "code",
        {**MODEL, "sa.json": key, "hparams.json": b"{}", "id_rsa": b"", "tls/server.pem": b"", "prod.env": b""},
    )
    with open(os.path.join(code, "blob.bin"), "wb") as f:
        f.truncate(11 << 20)
    warned = select(code).warnings
    assert [w.split(":")[0] for w in warned] == ["blob.bin", "id_rsa", "prod.env", "sa.json", "tls/server.pem"]
    assert "11 MB" in warned[0] and ".tpu-pipeline-ignore" in warned[0]
    assert "private key" in warned[3] and ".tpu-pipeline-ignore" in warned[3]


def test_the_runs_data_is_left_out_by_real_path_a_glob_or_a_folder(tmp_path):
    code = write(tmp_path / "code", {**MODEL, "data/a.csv": b"1", "data/b.csv": b"2", "predict/p.tfrecord": b""})
    write(tmp_path / "elsewhere", {"eval.tfrecord": b""})
    os.symlink(tmp_path / "elsewhere" / "eval.tfrecord", os.path.join(code, "eval.tfrecord"))  # the data, linked
    leave_out = {
        os.path.join(code, "data", "*.csv"): "the run's --data",
        str(tmp_path / "elsewhere" / "eval.tfrecord"): "the run's --eval-data",
        os.path.join(code, "predict") + "/": "the run's --predict-data",
        "gs://bucket/rows.csv": "the run's --data",  # not on this disk: nothing to leave out
    }
    chosen = select(code, leave_out)
    assert list(chosen.files) == ["pkg/__init__.py", "pkg/model.py"]
    assert chosen.excluded == {
        "data/a.csv": "the run's --data",
        "data/b.csv": "the run's --data",
        "eval.tfrecord": "the run's --eval-data",
        "predict/": "the run's --predict-data",
    }
    assert stage_code(code, str(tmp_path / "w"), leave_out).fingerprint == fingerprint(write(tmp_path / "m", MODEL))[0]
