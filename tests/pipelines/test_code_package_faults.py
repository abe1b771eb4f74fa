"""`submit --dry-run --code DIR` on a hostile code folder (issue #46): a link out of the folder is refused by name,
what is packaged is listed with sizes and what is left out with why, a 200 MB file is warned about and streamed
into the wheel with flat memory. Vertex AI's API is the fake of tests/vertex_api.py; nothing is sent."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

import repo
from google.auth.credentials import AnonymousCredentials
from vertex_api import FakeVertexAPI

from pipelines import cli

IMAGE = "us-central1-docker.pkg.dev/proj/repo/tpu-pipeline@sha256:" + "cd" * 32
EXAMPLE = os.path.join(repo.ROOT, "examples", "image_cnn")


def argv(code: str, spec: str) -> list:
    return [
        "submit",
        *("--project", "p", "--pipeline-root", "gs://bucket/root", "--image", IMAGE, "--cpu", "--dry-run"),
        *("--model-fn", "digits_cnn.model:model_fn", "--code", code, "--feature-spec", spec),
        *("--data", "gs://bucket/train.tfrecord", "--label", "label", "--set", "blessing.comparison_metric=accuracy"),
    ]


def code_folder(tmp_path) -> tuple[str, str]:
    code = tmp_path / "code"
    shutil.copytree(EXAMPLE, code, ignore=shutil.ignore_patterns("__pycache__"))
    spec = tmp_path / "feature_spec.json"
    spec.write_text('{"image": {"dtype": "float32", "shape": [8, 8, 1]}, "label": {"dtype": "int32", "shape": []}}')
    return str(code), str(spec)


def test_a_link_to_etc_passwd_fails_the_dry_run_naming_it(monkeypatch, capsys, tmp_path):
    FakeVertexAPI(monkeypatch)
    code, spec = code_folder(tmp_path)
    os.symlink("/etc/passwd", os.path.join(code, "passwd_copy.txt"))
    assert cli.main(argv(code, spec), credentials=AnonymousCredentials()) == 2
    err = capsys.readouterr().err
    assert "passwd_copy.txt is a link to /etc/passwd, outside the folder" in err and "Traceback" not in err


def test_the_dry_run_lists_files_with_sizes_and_what_is_left_out(monkeypatch, capsys, tmp_path):
    FakeVertexAPI(monkeypatch)
    code, spec = code_folder(tmp_path)
    os.makedirs(os.path.join(code, "runs", "local", "runs"))
    open(os.path.join(code, "runs", "local", ".lock"), "w").close()
    with open(os.path.join(code, "sa.json"), "w") as f:
        f.write('{"private_key": "-----BEGIN PRIVATE KEY-----"}')
    assert cli.main(argv(code, spec), credentials=AnonymousCredentials()) == 0
    out, err = capsys.readouterr()
    listed = json.loads(out)["compiled"]["user_files"]["code"]
    sizes = {f: os.path.getsize(os.path.join(code, f)) for f in ("digits_cnn/model.py", "hparams.json", "sa.json")}
    assert {f: listed["files"][f] for f in sizes} == sizes and len(listed["files"]) == 5
    assert listed["excluded"] == {"runs/local/": "the output folder of a local run"}
    assert f"warning: --code {code}: sa.json: looks like" in err


def test_a_200_mb_file_is_warned_about_and_streamed(tmp_path):
    """Peak memory (ru_maxrss) of one process that dry-runs a small folder, then the same folder with a 200 MB file."""
    small, spec = code_folder(tmp_path)
    big = str(tmp_path / "big")
    shutil.copytree(small, big)
    with open(os.path.join(big, "blob.bin"), "wb") as f:
        f.truncate(200 << 20)
    script = (
        "import resource, sys\n"
        "from google.auth.credentials import AnonymousCredentials\n"
        "from test_code_package_faults import argv\n"
        "from pipelines import cli\n"
        "peak = []\n"
        "for code in sys.argv[1:3]:\n"
        "    assert cli.main(argv(code, sys.argv[3]), credentials=AnonymousCredentials()) == 0\n"
        "    peak.append(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)\n"
        "print('PEAK_KB', *peak, file=sys.stderr)\n"
    )
    tests = os.path.dirname(__file__)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([repo.ROOT, tests, os.path.dirname(tests)]))
    env["TF_CPP_MIN_LOG_LEVEL"] = "3"
    done = subprocess.run(
        [sys.executable, "-c", script, small, big, spec], capture_output=True, text=True, env=env, timeout=300
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert f"warning: --code {big}: blob.bin: 200 MB" in done.stderr
    after_small, after_big = (int(kb) for kb in done.stderr.split("PEAK_KB")[1].split())
    assert after_big - after_small < 30 * 1024, (after_small, after_big)  # KB: far below the file's 200 MB


def test_the_runs_data_inside_the_code_folder_is_left_out_and_does_not_change_the_version(
    monkeypatch, capsys, tmp_path
):
    FakeVertexAPI(monkeypatch)
    from estimator_lib.model.user import package

    scans = []
    monkeypatch.setattr(package, "select", lambda *a, _select=package.select: scans.append(a) or _select(*a))
    code, _ = code_folder(tmp_path)
    clean = package.stage_code(code, str(tmp_path / "clean")).version  # counted below from here
    scans.clear()
    data = {"data/train.tfrecord": b"1", "data/eval.tfrecord": b"2", "new/a.tfrecord": b"3", "spec.json": b"{}"}
    for relative, content in data.items():
        os.makedirs(os.path.dirname(os.path.join(code, relative)), exist_ok=True)
        with open(os.path.join(code, relative), "wb") as f:
            f.write(content)
    with open(os.path.join(code, "key.pem"), "w") as f:
        f.write("-----BEGIN PRIVATE KEY-----")
    flags = ["--data", f"{code}/data/train.tfrecord", "--eval-data", f"{code}/data/eval.tfrecord"]
    flags += ["--predict-data", f"{code}/new/"]
    assert cli.main([*argv(code, f"{code}/spec.json"), *flags], credentials=AnonymousCredentials()) == 0
    out, err = capsys.readouterr()
    listed = json.loads(out)["compiled"]["user_files"]["code"]
    assert listed["excluded"] == {
        "data/eval.tfrecord": "the run's --eval-data",
        "data/train.tfrecord": "the run's --data",
        "new/": "the run's --predict-data",
        "spec.json": "the run's --feature-spec",
    }
    assert sorted(listed["files"]) == [
        "digits_cnn/__init__.py",
        "digits_cnn/model.py",
        "hparams.json",
        "key.pem",
        "make_records.py",
    ]
    assert len(scans) == 1 and err.count("key.pem: looks like a private key") == 1  # one scan, one warning
    os.remove(os.path.join(code, "key.pem"))
    with open(os.path.join(code, "data", "train.tfrecord"), "wb") as f:
        f.write(b"new rows")
    assert cli.main([*argv(code, f"{code}/spec.json"), *flags], credentials=AnonymousCredentials()) == 0
    assert json.loads(capsys.readouterr().out)["compiled"]["user_files"]["code"]["version"] == clean
