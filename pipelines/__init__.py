"""The pipeline (`pipeline.build_pipeline`, wiring only), its runners (`local`: the KFP local runner on CPU;
`vertex`: Vertex AI submit and schedule), `reproduce` (reproduce, diff), `show` and `listing` of past runs,
`tune`, and the `tpu-pipeline` command line (`cli`)."""
