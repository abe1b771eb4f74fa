"""Data validation faults: a skipped validation says why, truthfully, whether or not a model is published."""

from __future__ import annotations

from estimator_lib.data import validation


def test_a_validation_without_a_reference_does_not_claim_that_nothing_is_published():
    # The prepare stage sees no reference both on a first run and with --warm-start none --baseline none while a
    # model is published: its words must hold in either case.
    assert validation.skipped().summary() == (
        "skipped: this run continues no published model (nothing is published yet, or --warm-start none with "
        "--baseline none, or the published model is of another lineage), so there is no data to compare with"
    )
    assert validation.skipped("/p/v1").summary() == (
        "skipped: /p/v1 records no profile of its data (exported before profiles were)"
    )
