"""Fair shares of the progress API's workers between client addresses.

``FairQueue``: whole requests waiting for a worker, one queue per client address, served
round-robin, so a flood of requests from one address (one node) delays another node's
report by one request of each address with requests waiting, where a first-come pool let
the flood take every worker and answer the other nodes 503. Bounded in memory whatever the number of
addresses.
"""

from __future__ import annotations

import threading
from collections import deque
from typing import Generic, TypeVar

T = TypeVar("T")


class FairQueue(Generic[T]):
    """At most ``limit`` items in all, taken one address after another (round-robin).
    Thread-safe: the reader puts, the workers get."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self._queues: dict[str, deque[T]] = {}
        """Address -> its items, oldest first; the dict's order is the ring's: the address
        served last goes to its end."""
        self._size = 0
        self._closed = False
        self._ready = threading.Condition()

    def put(self, peer: str, item: T) -> T | None:
        """Queues ``item``; at the limit the oldest item of the address with the most
        queued is pushed out and returned (the caller refuses it), so an address with
        fewer queued than another never loses one. Closed: ``item`` comes back."""
        with self._ready:
            if self._closed:
                return item
            pushed: T | None = None
            if self._size >= self.limit:
                busiest = max(self._queues, key=lambda p: len(self._queues[p]))
                pushed = self._take(busiest, requeue=True)
            self._queues.setdefault(peer, deque()).append(item)
            self._size += 1
            self._ready.notify()
            return pushed

    def get(self) -> T | None:
        """The next address's oldest item, waiting for one; None once closed."""
        with self._ready:
            while not self._queues and not self._closed:
                self._ready.wait()
            if self._closed:
                return None
            return self._take(next(iter(self._queues)), requeue=False)

    def _take(self, peer: str, *, requeue: bool) -> T:
        """``peer``'s oldest; its queue goes to the ring's end (or stays, ``requeue``)."""
        queue = self._queues[peer] if requeue else self._queues.pop(peer)
        item = queue.popleft()
        self._size -= 1
        if not queue:
            self._queues.pop(peer, None)
        elif not requeue:
            self._queues[peer] = queue
        return item

    def close(self) -> list[T]:
        """Wakes every ``get`` (None from now on); the items still queued."""
        with self._ready:
            self._closed = True
            left = [item for queue in self._queues.values() for item in queue]
            self._queues.clear()
            self._size = 0
            self._ready.notify_all()
            return left
