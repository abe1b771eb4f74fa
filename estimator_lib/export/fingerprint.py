"""The old home of `saved_model_fingerprint`, until pipelines/reproduce.py imports it from
`estimator_lib.fingerprints`: then delete this module."""

from estimator_lib.fingerprints import saved_model_fingerprint

__all__ = ["saved_model_fingerprint"]
