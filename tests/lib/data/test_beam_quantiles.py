"""data/beam_quantiles.py: on the Beam engine profile.json's percentiles are counted on the workers; the launcher
reads no chunk's training values, only their summaries and the selection one pipeline ends with, and the percentiles are
`np.percentile`'s over every training value."""

from __future__ import annotations

import json
import os

import numpy as np
import pytest

pytest.importorskip("apache_beam")

from test_prepare import write_csv  # noqa: E402

from estimator_lib import storage  # noqa: E402
from estimator_lib.config import PrepareConfig  # noqa: E402
from estimator_lib.config.beam import BeamConfig  # noqa: E402
from estimator_lib.data import beam as beam_engine  # noqa: E402
from estimator_lib.data import beam_quantiles, distribution  # noqa: E402
from estimator_lib.schema import read_schema  # noqa: E402


def _rows(n: int, rng):
    wide = rng.lognormal(0, 6, n) * rng.choice([-1, 1], n)
    return [
        [f"k{i}", "" if i % 17 == 3 else f"{wide[i]:.6g}", str(int(rng.integers(-4, 4))), ["yes", "no"][i % 2]]
        for i in range(n)
    ]


def test_the_launcher_reads_no_stored_values_and_the_percentiles_are_np_percentiles(tmp_path, monkeypatch):
    path = write_csv(tmp_path / "rows.csv", ["id", "wide", "few", "label"], _rows(1500, np.random.default_rng(3)))
    config = PrepareConfig(data=(path,), label="label", chunk_bytes=4096, num_shards=2, eval_fraction=0.2)
    inside, launcher_reads, purposes = [], [], []
    run, read = beam_engine.run_pipeline, storage.read_bytes

    def running(build, config, purpose, cluster=None):
        inside.append(purpose)  # the launcher waits: what is read meanwhile, the workers read
        try:
            run(build, config, purpose, cluster)
        finally:
            purposes.append(inside.pop())

    def reading(uri):
        if not inside:
            launcher_reads.append(uri)
        return read(uri)

    monkeypatch.setattr(beam_engine, "run_pipeline", running)
    # Several batches of chunks and several sum groups, as at scale.
    monkeypatch.setattr(beam_quantiles, "BATCH_CHUNKS", 3)
    monkeypatch.setattr(beam_quantiles, "SUM_GROUPS", 2)
    monkeypatch.setattr(storage, "read_bytes", reading)
    out = str(tmp_path / "beam")
    beam_engine.prepare_on_beam(config, out, BeamConfig())
    summaries = [u for u in launcher_reads if "/numbers-summary/" in u]
    assert [u for u in launcher_reads if "/numbers/" in u] == [] and len(summaries) >= 8
    assert purposes.count("prepare-quantiles") == 1 and len([u for u in launcher_reads if "quantile-select" in u]) == 1
    profile, schema = json.load(open(os.path.join(out, "profile.json"))), read_schema(os.path.join(out, "schema.json"))
    train = sorted(str(p) for p in (tmp_path / "beam" / "train").iterdir())
    expected = distribution.profile_split(train, schema, profile["rows"])  # np.percentile of the values read back
    for name in ("wide", "few"):
        got, want = profile["features"][name], expected["features"][name]
        assert got["percentiles"] == want["percentiles"] and got["present"] == want["present"] > 500, name
