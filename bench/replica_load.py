"""Load on several replicas of `costmodel serve` while a promotion propagates between them.

`ReplicaLoad` runs client threads that send `POST /v1/predict` round-robin to each
replica's loopback port (a persistent connection per client and replica) and records
every answer: when it was sent, which replica, the status, the model version served and
the latency. `summary(promoted_at, old, new)` turns that into figures: requests and
failures per replica, latency p50/p99/max, and per replica how long after the promotion
committed it last served the old model and first served the new one (sent, and answered).

`tests/test_api_replicas.py` runs it against two replicas sharing a PostgreSQL store and a
model folder (`python -m pytest -s tests/test_api_replicas.py` prints the figures).
Bounded by `max_requests` and by whoever calls `stop()`; loopback only.
"""

from __future__ import annotations

import http.client
import json
import time
from typing import NamedTuple

import numpy as np
from _client_threads import ClientThreads

HOST = "127.0.0.1"


class Answer(NamedTuple):
    sent_at: float    # wall clock (time.time()), comparable with the store's timestamps
    replica: int
    status: int       # 0: no answer (connection error)
    version: str | None
    seconds: float


class ReplicaLoad(ClientThreads):
    """`clients` threads predicting on every port in turn until `stop()` or `max_requests`,
    each waiting `pause` seconds between its requests (0: as fast as answers come)."""

    def __init__(self, ports: list[int], body: dict, clients: int = 4, pause: float = 0.0,
                 max_requests: int = 100_000) -> None:
        self.ports, self.body, self.max_requests = ports, json.dumps(body).encode(), max_requests
        self.pause = pause
        self.answers: list[Answer] = []
        super().__init__(clients)

    def _client(self, seed: int) -> None:
        connections = [http.client.HTTPConnection(HOST, port, timeout=60) for port in self.ports]
        turn = seed
        while not self._done.wait(self.pause) and len(self.answers) < self.max_requests:
            replica = turn % len(self.ports)
            turn += 1
            sent_at, start = time.time(), time.perf_counter()
            try:
                connection = connections[replica]
                connection.request("POST", "/v1/predict", self.body,
                                   {"Content-Type": "application/json"})
                response = connection.getresponse()
                answer = json.loads(response.read())
                status = response.status
                version = answer["predictions"][0]["model_version"] if status == 200 else None
            except (OSError, http.client.HTTPException, ValueError, KeyError):
                connections[replica].close()  # reconnects on the next request
                status, version = 0, None
            with self._lock:
                self.answers.append(Answer(sent_at, replica, status, version,
                                           time.perf_counter() - start))
        for connection in connections:
            connection.close()

    def summary(self, promoted_at: float, old: str, new: str) -> dict:
        """Figures of the run; see the module docstring."""
        seconds = np.asarray([a.seconds for a in self.answers]) * 1e3
        out = {"requests": len(self.answers),
               "failed": sum(a.status != 200 for a in self.answers),
               "latency_ms": {"p50": round(float(np.percentile(seconds, 50)), 1),
                              "p99": round(float(np.percentile(seconds, 99)), 1),
                              "max": round(float(seconds.max()), 1)} if len(seconds) else {},
               "replicas": []}
        for replica in range(len(self.ports)):
            mine = [a for a in self.answers if a.replica == replica and a.status == 200]
            old_sent = [a.sent_at - promoted_at for a in mine if a.version == old]
            new_sent = [a.sent_at - promoted_at for a in mine if a.version == new]
            new_answered = [a.sent_at + a.seconds - promoted_at for a in mine if a.version == new]
            out["replicas"].append({
                "requests": sum(a.replica == replica for a in self.answers),
                "old": len(old_sent), "new": len(new_sent),
                "other_versions": sorted({a.version for a in mine} - {old, new}),
                # seconds after the promotion committed (negative: before it)
                "last_old_s": round(max(old_sent), 3) if old_sent else None,
                # a request sent just before the commit and answered after it may get
                # the new model, so this can be a little negative; its answer cannot be
                "first_new_s": round(min(new_sent), 3) if new_sent else None,
                "first_new_answered_s": round(min(new_answered), 3) if new_answered else None})
        return out
