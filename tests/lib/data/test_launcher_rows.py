"""On the Beam engine the launcher (the process calling `prepare`) holds no per-row data: the merged pass-1
profile and the facts it hands the encode pass are the same size at 2k and 8k rows (the same number of chunks),
the chunk results it merges hold no row and no training value, while the workers find the repeated keys and the
outputs (places tables and profile.json included) equal the in-process ones."""

from __future__ import annotations

import pickle

import pytest

pytest.importorskip("apache_beam")

from file_trees import tree  # noqa: E402
from test_prepare import awkward_rows, write_csv  # noqa: E402

from estimator_lib.config import PrepareConfig  # noqa: E402
from estimator_lib.config.beam import BeamConfig  # noqa: E402
from estimator_lib.data import prepare as preparation  # noqa: E402
from estimator_lib.data.beam import prepare_on_beam  # noqa: E402


def _launcher_held(tmp_path, monkeypatch, rows: int) -> int:
    """Bytes of the merged profile and of every chunk's facts the launcher held, preparing `rows` rows (each
    key twice, so half the rows are duplicates) in 8 chunks on Beam; checks the output against in-process."""
    data = awkward_rows(rows // 2)
    data += [list(row) for row in data]
    path = write_csv(tmp_path / f"rows-{rows}.csv", ["id", "bill", "island", "note", "size", "label"], data)
    chunk_bytes = (tmp_path / f"rows-{rows}.csv").stat().st_size // 8 + 1
    config = PrepareConfig(
        data=(path,),
        label="label",
        key_column="id",
        chunk_bytes=chunk_bytes,
        bad_rows="quarantine",
        max_bad_fraction=0.6,
        num_shards=2,
    )
    preparation.prepare(config, str(tmp_path / f"inprocess-{rows}"))
    held = []
    chunk_facts = preparation.chunk_facts

    def recorded(profile, *args):
        facts = list(chunk_facts(profile, *args))
        held.append(pickle.dumps((profile, facts)))
        assert profile.key_hashes == [] and all(f.key_hashes is None and not f.duplicates for f in facts)
        return iter(facts)

    encode = preparation._encode

    def bare(parts, *args):
        """The chunk results the launcher merges: no encoded row, no training value."""
        return encode((p for p in parts if not (p.train_numbers or any(p.examples)) or _fail(p)), *args)

    with monkeypatch.context() as patch:
        patch.setattr(preparation, "chunk_facts", recorded)
        patch.setattr(preparation, "_encode", bare)
        prepare_on_beam(config, str(tmp_path / f"beam-{rows}"), BeamConfig())
    here, there = tree(str(tmp_path / f"inprocess-{rows}")), tree(str(tmp_path / f"beam-{rows}"))
    assert here == there and there["quarantine.jsonl"].count(b"duplicate") == rows // 2
    assert len(held) == 1 and len(facts_of(held[0])) == 8
    return len(held[0])


def _fail(part):
    raise AssertionError(f"the launcher received rows of a chunk: {sorted(part.train_numbers)} {part.split_counts()}")


def facts_of(pickled: bytes):
    return pickle.loads(pickled)[1]


def test_the_launcher_holds_no_row_between_the_passes(tmp_path, monkeypatch):
    small, large = _launcher_held(tmp_path, monkeypatch, 2_000), _launcher_held(tmp_path, monkeypatch, 8_000)
    assert abs(large - small) < 64, (small, large)
