"""Kubeflow pipeline wiring, runners (local, Vertex AI) and the `tpu-pipeline` CLI."""
