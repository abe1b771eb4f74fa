"""`estimator_lib.model.calling`: a model_fn is called with the arguments its signature takes, as TPUEstimator
calls it (config only when named, labels only when taken, params always)."""

from __future__ import annotations

import functools

import pytest

from estimator_lib.model.calling import call_as_tpu_estimator


def bert_style(features, labels, mode, params):
    return sorted(locals())


def with_config(features, labels, mode, params, config):
    return sorted(locals())


def features_only(features, params):
    return sorted(locals())


def no_labels(features, mode, params, config):
    return sorted(locals())


@pytest.mark.parametrize("model_fn", [bert_style, with_config, features_only, no_labels])
def test_only_the_arguments_the_signature_names_are_passed(model_fn):
    takes = model_fn.__code__.co_varnames[: model_fn.__code__.co_argcount]
    labels = "labels" if "labels" in takes else None
    assert call_as_tpu_estimator(model_fn, "f", labels, "train", {"batch_size": 8}, "cfg") == sorted(takes)


def test_labels_for_a_model_fn_without_labels_are_an_error_as_in_tpu_estimator():
    with pytest.raises(ValueError, match="model_fn does not take labels, but input_fn returns labels."):
        call_as_tpu_estimator(features_only, "f", "some labels", "train", {}, None)


def test_partial_functions_keep_their_remaining_arguments():
    def model_fn(features, labels, mode, params, config, extra):
        return extra, config

    bound = functools.partial(model_fn, extra=1)
    assert call_as_tpu_estimator(bound, "f", None, "infer", {}, "cfg") == (1, "cfg")
