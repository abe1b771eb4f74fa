"""Cloud Storage under faults: 503s, reset connections and slow answers (from our fault proxy in front of the
emulator) are retried until the data arrives intact; 403 and 404 fail at once, naming the bucket and object."""

from __future__ import annotations

import hashlib
import os
import uuid

import pytest
from gcs_faults import DOWNLOAD, LIST, UPLOAD, Fault, FaultProxy

from estimator_lib import storage


@pytest.fixture(scope="module")
def proxy(gcs_emulator):
    upstream = int(os.environ["STORAGE_EMULATOR_HOST"].rsplit(":", 1)[1])
    emulator_host = os.environ["STORAGE_EMULATOR_HOST"]
    with FaultProxy(upstream) as proxy:
        os.environ["STORAGE_EMULATOR_HOST"] = f"http://127.0.0.1:{proxy.port}"
        storage.reset_client()
        try:
            yield proxy
        finally:
            os.environ["STORAGE_EMULATOR_HOST"] = emulator_host
            storage.reset_client()


@pytest.fixture
def prefix(gcs_emulator):
    return f"{gcs_emulator}/faults-{uuid.uuid4().hex[:8]}"


def _payload(n: int, seed: int) -> bytes:
    out, block = bytearray(), hashlib.sha256(str(seed).encode()).digest()
    while len(out) < n:
        block = hashlib.sha256(block).digest()
        out += block
    return bytes(out[:n])


@pytest.mark.parametrize(
    "fault",
    [Fault(None, 1, status=503), Fault(None, 1, status=0), Fault(None, 1, status=500), Fault(None, 1, delay=0.3)],
    ids=["503", "reset", "500", "slow"],
)
def test_uploads_downloads_and_listings_survive_transient_faults(proxy, prefix, tmp_path, fault):
    files = {f"dir/part-{i}.bin": _payload(20_000 + i, i) for i in range(2)}
    for name, data in files.items():
        proxy.inject(Fault(UPLOAD, fault.times, fault.status, fault.delay))
        storage.write_bytes(storage.join(prefix, name), data)
        assert proxy.count(lambda e: e[0] == UPLOAD and e[3] == "200") == 1  # stored once, after the faults

    proxy.inject(Fault(LIST, fault.times, fault.status, fault.delay))
    listed = storage.list_files(storage.join(prefix, "dir"))
    assert listed == sorted(storage.join(prefix, n) for n in files)

    for name, data in files.items():
        proxy.inject(Fault(DOWNLOAD, fault.times, fault.status, fault.delay))
        got = storage.read_bytes(storage.join(prefix, name))
        assert hashlib.sha256(got).hexdigest() == hashlib.sha256(data).hexdigest()
        local = tmp_path / name.replace("/", "_")
        proxy.inject(Fault(DOWNLOAD, fault.times, fault.status, fault.delay))
        storage.download_file(storage.join(prefix, name), str(local))
        assert local.read_bytes() == data
        assert proxy.faults[0].fired == 1  # the fault did happen


def test_a_committed_directory_arrives_whole_through_faults(proxy, prefix):
    destination = storage.join(prefix, "out")

    def fill(staging: str) -> None:
        for i in range(4):
            with open(os.path.join(staging, f"shard-{i}"), "wb") as f:
                f.write(_payload(50_000, 10 + i))

    proxy.inject(Fault(UPLOAD, 3, status=503), Fault(LIST, 1, status=0))  # three in a row, then a reset
    storage.commit_staged(destination, fill)
    assert storage.is_committed(destination)
    assert [f.fired for f in proxy.faults] == [3, 1]
    for i in range(4):
        assert storage.read_bytes(storage.join(destination, f"shard-{i}")) == _payload(50_000, 10 + i)


def test_access_denied_fails_at_once_naming_bucket_and_object(proxy, prefix):
    uri = storage.join(prefix, "secret.txt")
    storage.write_text(uri, "x")
    proxy.inject(Fault(DOWNLOAD, 5, status=403))
    with pytest.raises(PermissionError) as error:
        storage.read_bytes(uri)
    bucket, name = storage.split_gcs(uri)
    assert str(error.value).startswith(f"{uri}: access denied (403) to object {name!r} of bucket {bucket!r}")
    assert proxy.count(lambda e: e[0] == DOWNLOAD) == 1  # not retried


def test_a_missing_object_fails_at_once_naming_it(proxy, prefix):
    uri = storage.join(prefix, "nothing-here.txt")
    proxy.inject()
    with pytest.raises(FileNotFoundError) as error:
        storage.read_bytes(uri)
    bucket, name = storage.split_gcs(uri)
    assert str(error.value) == f"{uri} does not exist (bucket {bucket!r}, object {name!r})"
    assert proxy.count(lambda e: e[0] == DOWNLOAD) == 1
