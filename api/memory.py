"""Giving a worker's memory back after large requests (glibc's allocator; elsewhere no-op).

A request of a few MB makes temporaries of tens of MB (the body, its text, the text
guard's arrays). glibc serves big allocations from mmap and returns them at once, but it
raises that threshold to the largest block freed so far (up to 32 MB), after which such
temporaries come from the thread's heap arena and stay in the process when freed: 400
requests of 5 MB left each worker ~130 MB above its start for good. Fixing the threshold
keeps big blocks on mmap, and a trim after a large request returns what the arenas freed.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools

M_MMAP_THRESHOLD = -3  # mallopt parameter number (malloc.h)
MMAP_THRESHOLD = 256 * 1024
# Requests with bodies of this size or more are followed by a trim (cost: ~1 ms a trim).
TRIM_AFTER_BYTES = 1 * 2**20


@functools.lru_cache(maxsize=1)
def _libc():
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        return libc if hasattr(libc, "mallopt") and hasattr(libc, "malloc_trim") else None
    except OSError:
        return None


def fixed_mmap_threshold() -> bool:
    """Keep blocks of MMAP_THRESHOLD bytes or more on mmap; True when glibc took it."""
    libc = _libc()
    return bool(libc and libc.mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD))


def after_request(req) -> bool:
    """Return freed heap memory to the system after a large request; True when trimmed."""
    size = getattr(req, "content_length", None) or 0
    libc = _libc()
    if libc is None or size < TRIM_AFTER_BYTES:
        return False
    libc.malloc_trim(0)
    return True
