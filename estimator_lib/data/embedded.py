"""The default dataset shipped inside the package (no download at run time).

Palmer Penguins: 344 penguins of three species (Adelie, Chinstrap, Gentoo) observed on three islands of the
Palmer Archipelago, Antarctica, 2007-2009, with bill, flipper and body-mass measurements and sex. Missing
values are written as NA. Source: the palmerpenguins R package by Allison Horst, Alison Hill and Kristen
Gorman (https://allisonhorst.github.io/palmerpenguins/), data collected by Dr. Kristen Gorman and the Palmer
Station Long Term Ecological Research Program. Licence: CC0 1.0 (public domain dedication).
"""

from __future__ import annotations

import dataclasses
import os

from estimator_lib.config.run import EMBEDDED_DATA, EMBEDDED_LABEL

_DATA_DIR = os.path.dirname(os.path.abspath(__file__))


@dataclasses.dataclass(frozen=True)
class DefaultDataset:
    """A dataset shipped with the package, ready for `PrepareConfig(data=(path,), label=label, task=task)`."""

    path: str
    label: str
    task: str
    description: str
    source: str
    licence: str


def default_dataset() -> DefaultDataset:
    """Palmer Penguins (344 rows, label "species" with 3 classes, no key column)."""
    return DefaultDataset(
        path=os.path.join(_DATA_DIR, "penguins.csv"),
        label=EMBEDDED_LABEL,
        task="classification",
        description=(
            "Palmer Penguins: 344 penguins, 3 species (Adelie, Chinstrap, Gentoo); island, bill length and "
            "depth (mm), flipper length (mm), body mass (g), sex, year; missing values written as NA"
        ),
        source=(
            "palmerpenguins package by Allison Horst, Alison Hill and Kristen Gorman "
            "(https://allisonhorst.github.io/palmerpenguins/); data by Dr. Kristen Gorman and Palmer Station LTER"
        ),
        licence="CC0 1.0 Universal (public domain dedication)",
    )


def resolve_data(data: str) -> str:
    """The user's data URI, or the shipped Palmer Penguins CSV for "embedded:penguins"."""
    return default_dataset().path if data == EMBEDDED_DATA else data
