"""Client threads for loopback load benches: started together, stopped together."""

from __future__ import annotations

import threading


class ClientThreads:
    """`clients` daemon threads each running `self._client(index)` until `stop()` sets
    `self._done`; `self._lock` guards what they record."""

    def __init__(self, clients: int) -> None:
        self._done = threading.Event()
        self._lock = threading.Lock()
        self._threads = [threading.Thread(target=self._client, args=(i,), daemon=True)
                         for i in range(clients)]

    def _client(self, index: int) -> None:
        raise NotImplementedError

    def start(self) -> None:
        for thread in self._threads:
            thread.start()

    def stop(self) -> None:
        self._done.set()
        for thread in self._threads:
            thread.join(120)
