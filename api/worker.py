"""The gunicorn worker behind `costmodel serve`: threads, a read deadline, JSON errors.

gunicorn's sync worker serves one connection at a time, so two clients that send half a
request stall a two-worker service until gunicorn kills the workers (60 s). Its threaded
worker waits for a connection's first bytes on the poller, not on a thread, but once a
request has started it reads the rest with a blocking socket and no time limit: a client
that stops half way holds a thread for good. This worker gives every request a deadline
for arriving (`read_timeout`, from its first byte being read on a thread) and answers
a stalled one with 408; errors gunicorn itself answers (414, 431, 400, 408) carry the
service's JSON error shape instead of HTML. After a large request it gives the memory
back (`api.memory`), and it is not recycled (MAX_REQUESTS) while a retrain job runs on
one of its threads, which recycling would kill.

Why threads and not gevent: the service computes (parsing, tree ensembles and, with
`RETRAIN_RUNNER="thread"`, retraining on a background thread for minutes); under
gevent's monkey-patching that thread would be a greenlet that never yields and stalls
every request of its worker.
"""

from __future__ import annotations

import contextlib
import json
import socket
import threading
import time

from gunicorn import util
from gunicorn.http.errors import UnsupportedTransferCoding
from gunicorn.workers.gthread import TConn, ThreadWorker

from . import memory
from .errors import ClientTooSlow, error_body, printable
from .retrain import THREAD_PREFIX

DEFAULT_READ_TIMEOUT = 10.0
# Requests a worker due for recycling serves at a time while a retrain job runs in it.
RECYCLE_POSTPONED = 100
# Responses are small; a client that does not read one for this long is gone.
SEND_TIMEOUT = 30.0


class DeadlineSocket(socket.socket):
    """A client socket whose blocking reads share one deadline per request.

    gunicorn makes a connection's socket blocking each time a thread takes it up (one
    request, or the next one on a kept-alive connection); that starts the deadline.
    """

    __slots__ = ("read_timeout", "_deadline")

    def setblocking(self, flag: bool) -> None:
        if not flag:
            super().setblocking(False)
            return
        self._deadline = time.monotonic() + self.read_timeout
        self.settimeout(SEND_TIMEOUT)

    def recv(self, size: int, flags: int = 0) -> bytes:
        if self.gettimeout() != SEND_TIMEOUT:
            # Non-blocking for the poller, or bounded by gunicorn itself (draining an
            # unread body after the response): its own timeout applies.
            return super().recv(size, flags)
        left = self._deadline - time.monotonic()
        if left <= 0:
            raise ClientTooSlow(f"no complete request within {self.read_timeout:g} s")
        self.settimeout(left)
        try:
            return super().recv(size, flags)
        except TimeoutError:
            raise ClientTooSlow(f"no complete request within {self.read_timeout:g} s") from None
        finally:
            self.settimeout(SEND_TIMEOUT)


def _json_error(sock, status_int: int, reason: str, mesg: str) -> None:
    """gunicorn's `util.write_error` with the service's JSON body instead of HTML."""
    body = json.dumps(error_body(status_int, reason, printable(mesg))).encode("utf-8")
    head = (f"HTTP/1.1 {status_int} {reason}\r\nConnection: close\r\n"
            f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n")
    util.write_nonblock(sock, head.encode("latin-1") + body)


def retraining_here() -> bool:
    """Whether a retrain job runs on a thread of this process."""
    return any(thread.name.startswith(THREAD_PREFIX) and thread.is_alive()
               for thread in threading.enumerate())


class ServiceWorker(ThreadWorker):
    """gunicorn's threaded worker with per-request read deadlines and JSON errors."""

    def init_process(self) -> None:
        # Every error page gunicorn writes in this process goes through util.write_error.
        util.write_error = _json_error
        memory.fixed_mmap_threshold()
        super().init_process()

    def handle_request(self, req, conn):
        if self.nr + 1 >= self.max_requests and retraining_here():
            # Recycling now would kill the retrain job this process runs on a thread
            # (RETRAIN_RUNNER="thread"): the worker is recycled after the job ends.
            self.max_requests = self.nr + RECYCLE_POSTPONED
        try:
            return super().handle_request(req, conn)
        finally:
            memory.after_request(req)

    def accept(self, listener) -> None:
        try:
            client, address = listener.accept()
        except OSError:  # another worker took it (EAGAIN) or the client left
            return
        sock = DeadlineSocket(client.family, client.type, client.proto, client.detach())
        sock.read_timeout = getattr(self.app, "read_timeout", DEFAULT_READ_TIMEOUT)
        sock.setblocking(True)
        self.nr_conns += 1
        self.enqueue_req(TConn(self.cfg, sock, address, listener.getsockname()))

    def handle_error(self, req, client, addr, exc) -> None:
        if isinstance(exc, UnsupportedTransferCoding):
            # gunicorn answers 501 under the reason "Bad Request": the body of a coding it
            # cannot read is unreadable, which is the client's error, so 400 it is.
            with contextlib.suppress(OSError):
                _json_error(client, 400, "Bad Request",
                            f"{exc}; this server reads only Transfer-Encoding: chunked")
            return
        if isinstance(exc, ClientTooSlow):
            self.log.info("request from %s timed out: %s", addr, exc)
            try:
                _json_error(client, 408, "Request Timeout", str(exc))
            except OSError:
                pass
            return
        super().handle_error(req, client, addr, exc)
