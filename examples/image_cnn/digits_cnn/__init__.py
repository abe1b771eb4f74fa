"""A small CNN over scikit-learn's 8x8 digits, written as a plain TPUEstimator model_fn (docs/byom.md)."""
