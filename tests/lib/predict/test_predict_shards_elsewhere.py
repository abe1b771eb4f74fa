"""Dataflow's prediction shards stay where its workers wrote them (a gs:// work directory) until the commit copies
them on the server into the output, on the real Cloud Storage emulator: the launcher never downloads or uploads a
shard's bytes. (Dataflow itself is not run here: its workers' writes are made by the test.)"""

from __future__ import annotations

import hashlib
import json

import pytest

pytest.importorskip("apache_beam")

from estimator_lib import storage  # noqa: E402
from estimator_lib.data.beam import write_pickle  # noqa: E402
from estimator_lib.predict import beam as predict_beam  # noqa: E402
from estimator_lib.predict.shards import PREDICTIONS_MANIFEST, publish, shard_name  # noqa: E402

ROWS = [b'{"k":"a"}\n{"k":"b"}\n', b'{"k":"c"}\n']


def worker_shards(work: str) -> predict_beam._Plan:
    """A plan of 3 rows in 2 shards whose shards and manifest entries the workers wrote into `work` (as
    `_write_shard` leaves them)."""
    plan = predict_beam._Plan(None, 2, 2, storage.join(work, "shards"), work, ("in",), (3,))
    for shard, data in enumerate(ROWS):
        name = shard_name(shard, 2)
        storage.write_bytes(storage.join(plan.shard_dir, name), data)
        entry = {
            "file": name,
            "rows": data.count(b"\n"),
            "bytes": len(data),
            "sha256": hashlib.sha256(data).hexdigest(),
        }
        write_pickle(storage.join(work, "shards", f"{shard:05d}.pkl"), entry)
    return plan


def test_dataflow_shards_are_committed_from_the_work_directory_by_a_server_side_copy(gcs_prefix, monkeypatch):
    plan = worker_shards(f"{gcs_prefix}/work")
    calls: list = []
    for name in ("download_file", "upload_file", "read_bytes", "open_read", "copy_object"):
        original = getattr(storage, name)
        monkeypatch.setattr(storage, name, lambda *a, o=original, n=name: calls.append((n, a[0])) or o(*a))
    elsewhere: dict = {}
    out = f"{gcs_prefix}/predictions"
    result = publish(
        lambda staging: predict_beam._collect_shards(plan, staging, elsewhere), ["k"], out, 2, {}, elsewhere
    )
    monkeypatch.undo()
    names = [shard_name(0, 2), shard_name(1, 2)]
    assert elsewhere == {n: f"{gcs_prefix}/work/shards/{n}" for n in names}
    assert [storage.read_bytes(f"{out}/{n}") for n in names] == ROWS
    assert result.count == 3 and json.loads(storage.read_text(f"{out}/{PREDICTIONS_MANIFEST}"))["count"] == 3
    shard_calls = sorted((f, uri) for f, uri in calls if uri.endswith(".jsonl"))
    assert shard_calls == [("copy_object", f"{gcs_prefix}/work/shards/{n}") for n in names]
    assert storage.is_committed(out)


def test_a_shard_missing_from_the_work_directory_commits_nothing(gcs_prefix):
    plan = worker_shards(f"{gcs_prefix}/work")
    storage._blob(storage.join(plan.shard_dir, shard_name(1, 2))).delete()  # lost before the commit
    elsewhere: dict = {}
    out = f"{gcs_prefix}/predictions"
    with pytest.raises(Exception, match="predictions-00001-of-00002"):
        publish(lambda staging: predict_beam._collect_shards(plan, staging, elsewhere), ["k"], out, 2, {}, elsewhere)
    assert not storage.is_committed(out)  # readers take an output without its marker as absent
