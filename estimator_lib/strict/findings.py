"""What strict mode finds: a `Finding` has a rule, a short name of where it is, a class and a message with the fix.

The class says what a TPU would do with it:

  fails    a TPU cannot compile or run it; blocks the run unless accepted by name (`tpu.strict_accept`)
  differs  it runs, but computes something else than on the CPU; reported with the consequence, never blocks
  note     advice (slow on a TPU, or not checked here); never blocks

A finding is named "RULE:WHERE" (e.g. "static-shape:boolean_mask/GatherV2", "cross-shard:model_fn"); an accept
pattern matches that name with shell wildcards (`fnmatch`), e.g. "cross-shard:*".
"""

from __future__ import annotations

import dataclasses
import fnmatch
from typing import Optional, Sequence

FAILS, DIFFERS, NOTE = "fails", "differs", "note"
SEVERITIES = (FAILS, DIFFERS, NOTE)


@dataclasses.dataclass(frozen=True)
class Finding:
    """One thing strict mode found.

    Attributes:
      rule: the rule broken, e.g. "static-shape" (docs/strict_mode.md lists them).
      where: a stable short name of the tensor, op, feature, variable or function concerned; with the rule it
        names the finding for `tpu.strict_accept` ("RULE:WHERE").
      severity: "fails", "differs" or "note" (see the module docstring).
      message: what is wrong, what it does on a TPU, and "Fix: how".
    """

    rule: str
    where: str
    severity: str
    message: str

    def __post_init__(self):
        if self.severity not in SEVERITIES:
            raise ValueError(f"Finding severity {self.severity!r}: expected one of {list(SEVERITIES)}")

    @property
    def name(self) -> str:
        """ "RULE:WHERE", what `tpu.strict_accept` patterns match."""
        return f"{self.rule}:{self.where}"

    def accepted_by(self, patterns: Sequence[str]) -> Optional[str]:
        """The first pattern ("RULE:WHERE" with shell wildcards) that matches this finding's name, or None."""
        return next((p for p in patterns if fnmatch.fnmatchcase(self.name, p)), None)

    def __str__(self) -> str:
        return f"[{self.rule}] {self.message}"
