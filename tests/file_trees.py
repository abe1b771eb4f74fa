"""Whole output directories as {relative path: bytes}, for byte-for-byte comparisons of two runs."""

from __future__ import annotations

import os
from typing import Dict


def tree(root: str) -> Dict[str, bytes]:
    out = {}
    for base, _, names in os.walk(root):
        for name in names:
            path = os.path.join(base, name)
            with open(path, "rb") as f:
                out[os.path.relpath(path, root)] = f.read()
    return out
