"""Silent type changes in the data are noted in the prepared manifest's notes (which the console, `show` and the
report print): numbers written with thousands separators ("3,750") that make a column categorical, and values
that differ only in case ("Adelie", "adelie") that become separate classes or categories. Real preparations of
the embedded penguins CSV, edited; preparation itself is unchanged (notes, not errors)."""

from __future__ import annotations

import csv

import pytest

from estimator_lib.config import PrepareConfig
from estimator_lib.config.beam import BeamConfig
from estimator_lib.data.embedded import default_dataset
from estimator_lib.data.prepare import prepare
from estimator_lib.schema import CATEGORICAL


def edited_penguins(path, edit) -> str:
    """The embedded penguins CSV with `edit(index, row)` applied to each row (a dict), written to `path`."""
    with open(default_dataset().path, encoding="utf-8", newline="") as f:
        rows = list(csv.DictReader(f))
    with open(path, "w", encoding="utf-8", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(rows[0]), lineterminator="\n")
        writer.writeheader()
        writer.writerows(edit(i, dict(row)) or row for i, row in enumerate(rows))
    return str(path)


def separated(i: int, row: dict) -> dict:
    """body_mass_g as "3,750" (every value is 2700 or more)."""
    mass = row["body_mass_g"]
    return {**row, "body_mass_g": mass if mass == "NA" else f"{int(mass):,}"}


def lowercased(i: int, row: dict) -> dict:
    """Every 4th Adelie written "adelie", every 5th island "DREAM" for "Dream"."""
    species = "adelie" if row["species"] == "Adelie" and i % 4 == 0 else row["species"]
    island = "DREAM" if row["island"] == "Dream" and i % 5 == 0 else row["island"]
    return {**row, "species": species, "island": island}


def config(path: str) -> PrepareConfig:
    return PrepareConfig(data=(path,), label="species", num_workers=1)


def type_notes(manifest: dict) -> list:
    return [n for n in manifest["notes"] if "separators" in n or "differ only in case" in n]


def test_thousands_separators_that_make_a_column_categorical_are_noted(tmp_path):
    prepared = prepare(config(edited_penguins(tmp_path / "p.csv", separated)), str(tmp_path / "out"))
    mass = next(f for f in prepared.schema.features if f.name == "body_mass_g")
    assert mass.kind == CATEGORICAL  # unchanged behaviour: noted, not parsed
    assert type_notes(prepared.manifest) == [
        "column 'body_mass_g' reads as categorical with 85 values because its numbers are written with thousands "
        "separators (such as '3,700'), which are not read as numbers; write them without separators ('3700') to "
        "make it numeric"
    ]


def test_label_and_column_values_differing_only_in_case_are_noted(tmp_path):
    prepared = prepare(config(edited_penguins(tmp_path / "p.csv", lowercased)), str(tmp_path / "out"))
    assert prepared.schema.label.classes == ("Adelie", "Chinstrap", "Gentoo", "adelie")  # unchanged: 4 classes
    assert type_notes(prepared.manifest) == [
        "column 'island': values that differ only in case are separate categories: "
        "'DREAM' (17 training rows), 'Dream' (74 training rows)",
        "label 'species': values that differ only in case are separate classes: "
        "'Adelie' (88 training rows), 'adelie' (29 training rows)",
    ]
    assert prepared.manifest["class_counts"]["train"] == {"Adelie": 88, "Chinstrap": 46, "Gentoo": 93, "adelie": 29}


def test_beam_notes_the_same(tmp_path):
    pytest.importorskip("apache_beam")
    from estimator_lib.data.beam import prepare_on_beam

    path = edited_penguins(tmp_path / "p.csv", lambda i, row: lowercased(i, separated(i, row)))
    here = prepare(config(path), str(tmp_path / "inprocess")).manifest
    there = prepare_on_beam(config(path), str(tmp_path / "beam"), BeamConfig()).manifest
    assert len(type_notes(here)) == 3 and type_notes(there) == type_notes(here)
