"""Tests of estimator_lib.model (a package, so test module names may repeat those of tests/lib/evaluation)."""
