"""Input preparation: raw CSV / JSON Lines rows -> validated, split, sharded `tf.train.Example` TFRecords.

Runs on the host CPU, before any TPU work. The entry points are in `data.prepare`: `prepare`, `load_prepared`
and `encode_for_scoring` (new rows through a training schema, for batch prediction). Its steps:

- `read`: input files, CSV / JSON Lines chunks and their records;
- `profile`: pass 1, column types, label values and each row's split;
- `plan`: the schema's shape decided from the profile;
- `encode`: pass 2, rows checked and encoded;
- `numbers`: what a (valid, whole) number is, for every reader and encoder;
- `wire`: the `tf.train.Example` wire format, the one writer of Example bytes;
- `stats`: training statistics and the schema;
- `output`: shards, quarantine, manifest and fingerprints;
- `score`: the same passes for scoring rows; `parallel`: ordered work over all cores; `common`: shared helpers.

`records` (typed rows through a schema, with `wire`) and `example_keys` encode and decode Examples for the rest
of the library; `embedded` ships the
default Palmer Penguins data.
"""
