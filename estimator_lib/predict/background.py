"""An iterator consumed in a thread of its own, so that its producer (the estimator's predict generator)
and the consumer (formatting and writing rows) overlap on the host CPU."""

from __future__ import annotations

import queue
import threading
from typing import Any, Iterator, Tuple


def in_background(iterator: Iterator[Any], depth: int) -> Iterator[Any]:
    """Consumes `iterator` in its own thread (to the end, or closing it when the consumer stops early)
    and yields its items here; an exception in the thread is re-raised here.

    Args:
      iterator: what to consume; its `close()`, when it has one, is called in the thread once it ends.
      depth: items buffered between the thread and the consumer.
    """
    items: "queue.Queue[Tuple[str, Any]]" = queue.Queue(depth)
    stop = threading.Event()

    def put(kind: str, value: Any) -> None:
        while not stop.is_set():
            try:
                items.put((kind, value), timeout=0.1)
                return
            except queue.Full:
                continue

    def produce() -> None:
        try:
            for item in iterator:
                put("item", item)
                if stop.is_set():
                    break
            put("end", None)
        except BaseException as e:  # handed to the consumer, which raises it
            put("error", e)
        finally:
            close = getattr(iterator, "close", None)
            if close is not None:
                close()

    thread = threading.Thread(target=produce, name="predict-batches", daemon=True)
    thread.start()
    try:
        while True:
            kind, value = items.get()
            if kind == "end":
                return
            if kind == "error":
                raise value
            yield value
    finally:
        stop.set()
        thread.join()
