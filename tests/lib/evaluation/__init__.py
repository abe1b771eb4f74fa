"""Tests of estimator_lib.evaluation (a package, so test module names may repeat those of tests/lib/model)."""
