"""Checks, by parsing, that a name a user wrote shows as text in an HTML or Markdown output and never as markup:
shared by the escaping unit tests and the end-to-end run with hostile names.

HTML is parsed with `html.parser.HTMLParser`; Markdown is rendered by Python-Markdown with its tables extension
(a real parser: it passes raw HTML through, as a renderer that trusts its input does) and the result parsed the
same way. A table row's cells are also counted on the Markdown text itself, splitting on the pipes GFM splits
on (those not escaped by a backslash), since Python-Markdown drops the cells a row has beyond its header's.
"""

from __future__ import annotations

import dataclasses
import re
from html.parser import HTMLParser
from typing import Dict, List, Tuple

import markdown

# Markup in a name: an image whose error handler runs script, and a pipe that would split a table cell.
HOSTILE = "<img src=x onerror=alert(1)>|x"
PNG_SOURCE = "data:image/png;base64,"


@dataclasses.dataclass
class Parsed:
    """An HTML document's elements (tag, attributes), its text content, and each table's cells per row."""

    elements: List[Tuple[str, Dict[str, str]]]
    text: str
    tables: List[List[int]]


class _Reader(HTMLParser):
    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.elements: List[Tuple[str, Dict[str, str]]] = []
        self.text: List[str] = []
        self.tables: List[List[int]] = []

    def handle_starttag(self, tag, attrs):
        self.elements.append((tag, {name: value or "" for name, value in attrs}))
        if tag == "table":
            self.tables.append([])
        elif tag == "tr":
            self.tables[-1].append(0)
        elif tag in ("td", "th"):
            self.tables[-1][-1] += 1

    def handle_data(self, data):
        self.text.append(data)


def parse_html(document: str) -> Parsed:
    reader = _Reader()
    reader.feed(document)
    reader.close()
    return Parsed(reader.elements, "".join(reader.text), reader.tables)


def assert_html_shows(document: str, names=(HOSTILE,), images_allowed: bool = True) -> Parsed:
    """No element carries an event handler, every image is one of our embedded PNGs (none when
    `images_allowed` is False), every table row has its header's cells, and each name is in the text."""
    parsed = parse_html(document)
    for tag, attrs in parsed.elements:
        assert not [a for a in attrs if a.startswith("on")], (tag, attrs)
        if tag == "img":
            assert images_allowed and attrs["src"].startswith(PNG_SOURCE), attrs
    for rows in parsed.tables:
        assert rows and all(n == rows[0] for n in rows), rows
    for name in names:
        assert name in parsed.text, name
    return parsed


_CELL_SEPARATOR = re.compile(r"(?<!\\)((?:\\\\)*)\|")  # a pipe after an even number of backslashes


def markdown_table_cells(text: str) -> List[List[int]]:
    """The cells of every row of every pipe table in Markdown `text`, counted as GFM splits a row."""
    tables: List[List[int]] = []
    previous_in_table = False
    for line in text.splitlines():
        in_table = line.startswith("|")
        if in_table:
            if not previous_in_table:
                tables.append([])
            tables[-1].append(len(_CELL_SEPARATOR.split(line.strip())[::2]) - 2)
        previous_in_table = in_table
    return tables


def assert_markdown_shows(text: str, names=(HOSTILE,)) -> Parsed:
    """The raw text holds no tag, each table's rows have its header's cells, and rendered to HTML it holds no
    image and shows each name as written."""
    assert "<img" not in text and "<" not in text.replace("&lt;", ""), text
    for rows in markdown_table_cells(text):
        assert len(rows) >= 2 and all(n == rows[0] for n in rows), (rows, text)
    return assert_html_shows(markdown.markdown(text, extensions=["tables"]), names, images_allowed=False)
