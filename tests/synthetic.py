"""Tiny real datasets for tests: rows drawn from a known rule, a schema for them, TFRecords on disk."""

from __future__ import annotations

import os
from typing import Any, Dict, List, Tuple

import numpy as np

from estimator_lib.data import records
from estimator_lib.schema import CATEGORICAL, NUMERIC, FeatureSpec, LabelSpec, Schema

COLORS = ("red", "green", "blue")


def make_rows(n: int, seed: int, task: str = "binary") -> List[Dict[str, Any]]:
    """Rows with two numerics ("x 1", "x-2"), one categorical ("colour") and a label from a fixed rule."""
    rng = np.random.RandomState(seed)
    rows = []
    for i in range(n):
        x1, x2 = float(rng.normal(2.0, 3.0)), float(rng.normal(-1.0, 0.5))
        colour = COLORS[rng.randint(3)]
        shift = {"red": 1.5, "green": 0.0, "blue": -1.5}[colour]
        score = (x1 - 2.0) / 3.0 + 2.0 * (x2 + 1.0) + shift + rng.normal(0, 0.3)
        if task == "binary":
            label: Any = "yes" if score > 0 else "no"
        elif task == "multiclass":
            label = "low" if score < -1 else ("mid" if score < 1 else "high")
        else:
            label = 10.0 * score + 50.0
        rows.append({"x 1": x1, "x-2": x2 if i % 17 else None, "colour": colour, "target": label})
    return rows


def make_schema(task: str = "binary") -> Schema:
    features = (
        FeatureSpec("x 1", "f_x_1", NUMERIC, mean=2.0, std=3.0, min=-10, max=14),
        FeatureSpec("x-2", "f_x_2", NUMERIC, mean=-1.0, std=0.5, min=-3, max=1, missing_count=1),
        FeatureSpec("colour", "f_colour", CATEGORICAL, value_type="string", vocabulary=COLORS),
    )
    if task == "binary":
        label = LabelSpec("target", "classification", classes=("no", "yes"))
    elif task == "multiclass":
        label = LabelSpec("target", "classification", classes=("low", "mid", "high"))
    else:
        label = LabelSpec("target", "regression", mean=50.0, std=25.0, min=-50, max=150)
    return Schema(features=features, label=label, key_column=None)


def write_dataset(directory: str, rows: List[Dict[str, Any]], schema: Schema, shards: int = 2) -> Tuple[str, int]:
    """Writes rows round-robin into `shards` TFRecord files; returns (glob pattern, count)."""
    os.makedirs(directory, exist_ok=True)
    buckets: List[list] = [[] for _ in range(shards)]
    for i, row in enumerate(rows):
        buckets[i % shards].append(records.encode_example(row, schema, key=f"row-{i}"))
    for s, bucket in enumerate(buckets):
        records.write_tfrecord(os.path.join(directory, f"part-{s:05d}.tfrecord"), bucket)
    return os.path.join(directory, "part-*.tfrecord"), len(rows)
