"""Shared fixtures: quiet TensorFlow, a real Cloud Storage emulator server on 127.0.0.1, tiny datasets."""

from __future__ import annotations

import os
import socket
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
sys.path.insert(0, os.path.dirname(__file__))  # tests/synthetic.py and friends

import pytest  # noqa: E402

EMULATOR_BUCKET = "test-bucket"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="session")
def gcs_emulator():
    """A real gcp-storage-emulator server on 127.0.0.1 (in memory) with bucket "test-bucket".

    Sets STORAGE_EMULATOR_HOST for google-cloud-storage for the whole session. Yields the bucket URI
    "gs://test-bucket"; tests write under a unique prefix (see `gcs_prefix`).
    """
    from gcp_storage_emulator.server import create_server

    from estimator_lib import storage

    port = _free_port()
    server = create_server("127.0.0.1", port, in_memory=True, default_bucket=EMULATOR_BUCKET)
    server.start()
    previous = os.environ.get("STORAGE_EMULATOR_HOST")
    os.environ["STORAGE_EMULATOR_HOST"] = f"http://127.0.0.1:{port}"
    os.environ.setdefault("GOOGLE_CLOUD_PROJECT", "test-project")
    storage.reset_client()
    try:
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
