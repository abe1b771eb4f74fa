"""Checks of an evaluation report shared by the report's unit tests, the evaluate component's test and the
end-to-end runs: every section, images that are valid PNGs, nothing fetched from the network."""

from __future__ import annotations

import base64
import re
import struct

CLASSIFICATION_PLOTS = ["Confusion matrix", "ROC curves", "Precision-recall curves", "Calibration"]
REGRESSION_PLOTS = ["Predicted vs actual", "Residuals vs predicted", "Residual histogram"]
SECTIONS = ("Verdict", "Metrics", "Performance on the eval rows", "Data", "Run")


def images(document: str) -> list:
    """(caption, base64 PNG) of every embedded image."""
    return re.findall(r'<img alt="([^"]+)" src="data:image/png;base64,([^"]+)">', document)


def assert_valid_png(data: str) -> None:
    raw = base64.b64decode(data, validate=True)
    assert raw[:8] == b"\x89PNG\r\n\x1a\n"
    width, height = struct.unpack(">II", raw[16:24])  # IHDR
    assert width >= 200 and height >= 200


def assert_offline(document: str) -> None:
    assert not re.search(r"(src|href)\s*=\s*[\"']?(https?:|//)", document, re.I)
    assert "<script" not in document.lower() and "@import" not in document and "url(" not in document


def assert_complete_report(document: str, classification: bool) -> None:
    """Every section, the task's plots as valid PNGs, per-class metrics for classification, nothing external."""
    for heading in SECTIONS + (("Per class",) if classification else ()):
        assert f"<h2>{heading}" in document or f"<h3>{heading}" in document, heading
    assert ("<h3>Per class" in document) == classification
    captions = [caption for caption, _ in images(document)]
    assert captions == (CLASSIFICATION_PLOTS if classification else REGRESSION_PLOTS)
    for _, data in images(document):
        assert_valid_png(data)
    assert_offline(document)
