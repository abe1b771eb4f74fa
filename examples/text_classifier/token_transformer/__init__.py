"""A small BERT-style Transformer text classifier, written as a plain TPUEstimator model_fn (docs/byom.md)."""
