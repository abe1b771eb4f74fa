"""The embedded Palmer Penguins table as rows, and writing changed copies of it: the data the schema
continuity, validation and retraining tests change snapshot by snapshot."""

from __future__ import annotations

import csv
from typing import Dict, List

from estimator_lib.data.embedded import default_dataset


def penguin_rows() -> List[Dict[str, str]]:
    """The shipped CSV's rows, each {column: value as written} (missing values stay "NA")."""
    with open(default_dataset().path, newline="", encoding="utf-8") as f:
        return list(csv.DictReader(f))


def write_rows(path, rows: List[Dict[str, str]]) -> str:
    """Writes `rows` as a CSV with the first row's columns as the header; returns the path as a string."""
    with open(path, "w", newline="", encoding="utf-8") as f:
        writer = csv.DictWriter(f, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    return str(path)
