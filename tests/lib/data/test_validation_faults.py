"""Data validation faults: a skipped validation says why, truthfully, whether or not a model is published."""

from __future__ import annotations

from estimator_lib.data import validation


def test_a_validation_without_a_reference_gives_the_reason_it_was_given_and_claims_none_without_one():
    # The reason is the resolve stage's (tests/components/test_resolve_faults.py); a caller that gives none gets no
    # guess among the reasons.
    assert validation.skipped(why="nothing is published yet").summary() == (
        "skipped: this run continues no published model (nothing is published yet), so there is no data to compare with"
    )
    assert validation.skipped().summary() == (
        "skipped: this run continues no published model, so there is no data to compare with"
    )
    assert validation.skipped("/p/v1").summary() == (
        "skipped: /p/v1 records no profile of its data (exported before profiles were)"
    )
