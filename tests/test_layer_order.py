"""The layer order of docs/development.md holds: no module imports from a layer above its own, at the top of a
module or inside a function. The order is read from the docs, where it is written once."""

from __future__ import annotations

import ast
import os
import re
from typing import List

from repo import ROOT
from test_imports import _imported_names, _modules

DOC = os.path.join(ROOT, "docs", "development.md")


def read_layers(text: str) -> List[List[str]]:
    """The numbered list between the `<!-- layers -->` markers: each item's `code` names, lowest layer first."""
    block = text.split("<!-- layers -->")[1].split("<!-- /layers -->")[0]
    return [re.findall(r"`([\w.]+)`", line) for line in block.splitlines() if re.match(r"\d+\. ", line)]


def layer_of(module: str, layers: List[List[str]]) -> int:
    """The layer of the longest listed name that is `module` or a package holding it."""
    best, found = -1, -1
    for index, names in enumerate(layers):
        for name in names:
            if (module == name or module.startswith(name + ".")) and len(name) > best:
                best, found = len(name), index
    return found


def upward_imports(layers: List[List[str]]) -> List[str]:
    modules = _modules()
    found = []
    for module, path in sorted(modules.items()):
        own = layer_of(module, layers)
        with open(path, encoding="utf-8") as f:
            tree = ast.parse(f.read(), path)
        for _, names in _imported_names(tree):
            for name in names:
                if name in modules and layer_of(name, layers) > own:
                    found.append(f"{module} (layer {own + 1}) imports {name} (layer {layer_of(name, layers) + 1})")
    return found


def test_every_module_has_a_layer():
    layers = read_layers(open(DOC, encoding="utf-8").read())
    assert len(layers) >= 10, layers
    assert [m for m in _modules() if layer_of(m, layers) < 0 and m not in ("estimator_lib",)] == []


def test_no_module_imports_from_a_higher_layer():
    layers = read_layers(open(DOC, encoding="utf-8").read())
    assert upward_imports(layers) == []


def test_the_checker_finds_an_upward_import():
    assert read_layers("<!-- layers -->\n1. `a`, `b.c`\n2. `d`\n<!-- /layers -->") == [["a", "b.c"], ["d"]]
    inverted = [["estimator_lib"], ["estimator_lib.engine"], ["estimator_lib.model"], ["components", "pipelines"]]
    found = upward_imports(inverted)  # the model layer placed above the engine, which imports it
    assert any(line.startswith("estimator_lib.engine.") and " imports estimator_lib.model." in line for line in found)
