"""data/embedded.py: the shipped Palmer Penguins table is where the package says, as described, and
"embedded:penguins" resolves to it while any other data URI is left alone."""

from __future__ import annotations

import collections
import csv
import os

from estimator_lib.config import PrepareConfig
from estimator_lib.config.run import EMBEDDED_DATA
from estimator_lib.data import embedded
from estimator_lib.data.embedded import default_dataset, resolve_data


def test_default_dataset_is_the_shipped_csv():
    data = default_dataset()
    assert data.path == os.path.join(os.path.dirname(embedded.__file__), "penguins.csv")
    assert (data.label, data.task) == ("species", "classification")
    assert data.licence.startswith("CC0 1.0")
    assert "palmerpenguins" in data.source and "344 penguins" in data.description


def test_the_table_matches_its_description():
    with open(default_dataset().path, newline="", encoding="utf-8") as f:
        rows = list(csv.DictReader(f))
    assert len(rows) == 344
    assert list(rows[0]) == [
        "species",
        "island",
        "bill_length_mm",
        "bill_depth_mm",
        "flipper_length_mm",
        "body_mass_g",
        "sex",
        "year",
    ]
    species = collections.Counter(r["species"] for r in rows)
    assert species == {"Adelie": 152, "Gentoo": 124, "Chinstrap": 68}
    assert {r["island"] for r in rows} == {"Biscoe", "Dream", "Torgersen"}
    assert {r["year"] for r in rows} == {"2007", "2008", "2009"}
    assert sum(r["sex"] == "NA" for r in rows) == 11  # missing values are written NA, as documented


def test_a_prepare_config_can_be_built_from_it():
    data = default_dataset()
    config = PrepareConfig(data=(data.path,), label=data.label, task=data.task)
    assert config.data == (data.path,) and config.task == "classification"


def test_resolve_data():
    assert EMBEDDED_DATA == "embedded:penguins"
    assert resolve_data(EMBEDDED_DATA) == default_dataset().path
    assert resolve_data("gs://bucket/data/*.csv") == "gs://bucket/data/*.csv"
    assert resolve_data("embedded:other") == "embedded:other"
