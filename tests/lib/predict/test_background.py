"""`predict.background.in_background`: items in order, the producer's error raised in the consumer, and the
producer closed when the consumer stops early."""

from __future__ import annotations

import threading

import pytest

from estimator_lib.predict.background import in_background


def test_items_arrive_in_order_from_another_thread():
    threads = []

    def produce():
        for i in range(50):
            threads.append(threading.current_thread().name)
            yield i

    assert list(in_background(produce(), depth=2)) == list(range(50))
    assert set(threads) == {"predict-batches"}


def test_an_error_in_the_producer_is_raised_in_the_consumer_after_the_items_before_it():
    def produce():
        yield 1
        raise ValueError("the input files changed")

    got = []
    with pytest.raises(ValueError, match="the input files changed"):
        for item in in_background(produce(), depth=4):
            got.append(item)
    assert got == [1]


def test_a_consumer_that_stops_early_closes_the_producer():
    closed = threading.Event()

    def produce():
        try:
            for i in range(10_000):
                yield i
        finally:
            closed.set()

    items = in_background(produce(), depth=2)
    assert [next(items), next(items)] == [0, 1]
    items.close()  # joins the thread, which closed the generator on its way out
    assert closed.is_set()
