"""The fingerprints of three built-in runs (the embedded run, a regression CSV, the embedded run on Apache Beam),
held by the end-to-end tests that make these runs (tests/e2e/run_fingerprints.json; its "recorded" says when and
from what). A deliberate change of a built-in run's bytes (a default changed) re-records them: run the three tests
with RECORD_RUN_FINGERPRINTS="what changed" (`compared` then writes what it finds instead of asserting, with this
machine), check in the diff that the dataset's did not move, and say so in the commit.

The prepared data's bytes hold on every machine. The model, its export, the predictions, the blessing and the
publication hold on the kind of machine they were recorded on: the CPU's vector ISA and the kernel settings
decide the last bits of a float (docs/determinism.md); on another kind of machine only the data is compared.
"""

from __future__ import annotations

import json
import os
from typing import Any, Dict, List, Mapping

FIXTURE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "e2e", "run_fingerprints.json")
MACHINE_FREE = ("dataset",)


def _machine(summary: Mapping[str, Any]) -> Dict[str, Any]:
    with open(summary["manifests"]["train"], encoding="utf-8") as f:
        machine = json.load(f)["machine"]
    return {"isa": machine["isa"], "kernels": machine["kernels"]}


def compared(name: str, summary: Mapping[str, Any]) -> List[str]:
    """The fingerprints of run `name` compared with the recorded ones (asserted equal); returns their names."""
    with open(FIXTURE, encoding="utf-8") as f:
        fixture = json.load(f)
    why = os.environ.get("RECORD_RUN_FINGERPRINTS")
    if why:
        keys = sorted(fixture["runs"][name])
        fixture["runs"][name] = {key: summary["fingerprints"].get(key) for key in keys}
        fixture["machine"], fixture["recorded"] = _machine(summary), why
        with open(FIXTURE, "w", encoding="utf-8") as f:
            json.dump(fixture, f, indent=1, sort_keys=True)
            f.write("\n")
        return keys
    recorded = fixture["runs"][name]
    names = sorted(recorded) if _machine(summary) == fixture["machine"] else list(MACHINE_FREE)
    found = {key: summary["fingerprints"].get(key) for key in names}
    assert found == {key: recorded[key] for key in names}, f"{name}: the run's bytes changed"
    return names
