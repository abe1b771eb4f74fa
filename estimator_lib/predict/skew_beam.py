"""The skew check's counts of the rows being scored, made on Apache Beam (`predict.beam`'s engine). Host CPUs.

    input files --Reshuffle--> one worker per file counts its records over the training bins (`tally.Bins`)
        and stores the file's tally (a few integers per feature and training category)
    the launcher adds the files' tallies

The launcher reads one small tally per file, never a row. The counts are integers, so their sum is the tally the
in-process engine makes (`Bins.tally`), and skew.json is the same bytes on both engines.
"""

from __future__ import annotations

import functools
from typing import Any, List, Optional, Sequence, Tuple, Union

from estimator_lib import storage
from estimator_lib.config.beam import BeamConfig
from estimator_lib.config.feature_spec import FeatureSpec
from estimator_lib.data import beam_runners
from estimator_lib.data.beam import beam, read_pickles, require_beam, work_directory, write_pickle
from estimator_lib.predict.skew import PendingReport, SkewCheck
from estimator_lib.predict.tally import Bins, Tally
from estimator_lib.schema import Schema

PURPOSE = "batch-predict-skew"


def start(
    check: SkewCheck,
    files: Sequence[str],
    schema: Union[Schema, FeatureSpec],
    rows: Optional[int],
    beam_config: Optional[BeamConfig] = None,
    compression: str = "",
) -> Optional[PendingReport]:
    """`SkewCheck.start` with the rows counted on Beam's workers (`tally_on_beam`), before any is scored (nothing
    is read with `predict.skew=off` or without a training profile).

    Raises:
      SkewError: with `predict.skew=block`, the rows are skewed (naming the worst features).
    """
    count = lambda bins: tally_on_beam(bins, files, beam_config, compression)  # noqa: E731
    return check.start(files, schema, rows, count, compression=compression)


def tally_on_beam(
    bins: Bins, files: Sequence[str], beam_config: Optional[BeamConfig] = None, compression: str = ""
) -> Tally:
    """`bins.tally(files)` ("GZIP" or "" `compression`), each file counted on a Beam worker (`beam_config`;
    None: the DirectRunner on this machine)."""
    require_beam()
    config = beam_config or BeamConfig()
    files = list(files)
    with work_directory(config, "skew") as work, beam_runners.session(config) as run:
        build = functools.partial(_tally_pipeline, files=files, bins=bins, work=work, compression=compression)
        run(build, PURPOSE)
        total = bins.empty()
        for part in read_pickles(_file_uri(work, i) for i in range(len(files))):
            total = total.merge(part)
        return total


def _tally_pipeline(pipeline: Any, files: List[str], bins: Bins, work: str, compression: str) -> None:
    _ = (
        pipeline
        | "Files" >> beam.Create(list(enumerate(files)))
        | "Spread" >> beam.Reshuffle()
        | "Tally" >> beam.Map(_tally_file, bins, work, compression)
    )


def _tally_file(element: Tuple[int, str], bins: Bins, work: str, compression: str) -> None:
    index, path = element
    write_pickle(_file_uri(work, index), bins.tally([path], compression))


def _file_uri(work: str, index: int) -> str:
    return storage.join(work, "skew-files", f"{index:06d}.pkl")
