"""The model side of the TPU contract: what runs in `input_fn` and `model_fn`.

- `inputs`: `input_fn` builders (per-shard `params['batch_size']`, static shapes, padded eval/predict input);
- `transform`: host-side parsing and conversion to TPU-safe tensors (no strings or int64 reach the TPU);
- `model_fn`: `TPUEstimatorSpec` in every mode, `eval_metrics`;
- `metrics`: the `metric_fn` run on the host, weighted by `1 - is_padding`;
- `outputs`: what prediction batches hold, and the host-side padding filter;
- `warm_start`: the `scaffold_fn` that initialises from a checkpoint or SavedModel;
- `checkpoints`: which checkpoint is the model (the best by validation loss, kept in `best/`) and the record of
  the early-stopping rounds;
- `families`: the logits builders (`linear`, `dnn`, user plug-ins);
- `races`: unordered reads and writes of a variable in a training step, ordered read first (`training.deterministic`).
"""
