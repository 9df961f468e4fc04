"""The models a worker serves, one per (backend, target), swapped atomically.

Readers take `self._live` without a lock: it is an immutable mapping replaced by a
single reference assignment, so a request sees either the old model or the new one,
never a half-updated state. Writers serialize on a lock.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType

from costmodel.features import KNOWN_TARGETS
from costmodel.models import Artifact, ArtifactError, default_path, load, load_default

from .jobs import JobStore

log = logging.getLogger("costmodel.api")
Key = tuple[str, str]


@dataclass(frozen=True)
class Live:
    """A served model and the promotion that put it live (0: loaded at start)."""

    artifact: Artifact
    promotion: int = 0


class ModelRegistry:
    """Served models by (backend, target); see the module docstring for the swap rule.

    Example:
        >>> registry = ModelRegistry()
        >>> registry.swap(("cpu", ""), artifact)
        >>> registry.get("cpu", "").version
    """

    def __init__(self) -> None:
        self._live: Mapping[Key, Live] = MappingProxyType({})
        self._lock = threading.Lock()
        self.errors: dict[Key, str] = {}
        self._seen_promotion = 0
        self._next_sync = 0.0

    def get(self, backend: str, target: str) -> Artifact | None:
        live = self._live.get((backend, target))
        return None if live is None else live.artifact

    def snapshot(self) -> Mapping[Key, Artifact]:
        """The served models as one read-only mapping: a request that looks every model up
        in it sees one version of each, whatever swaps while it runs."""
        return MappingProxyType({key: live.artifact for key, live in self._live.items()})

    def items(self) -> list[tuple[Key, Artifact]]:
        return [(key, live.artifact) for key, live in sorted(self._live.items())]

    def __len__(self) -> int:
        return len(self._live)

    def swap(self, key: Key, artifact: Artifact, promotion: int = 0) -> bool:
        """Serve `artifact` for `key` unless a newer promotion is already live; True if swapped."""
        with self._lock:
            current = self._live.get(key)
            if current is not None and promotion and current.promotion > promotion:
                return False
            self._live = MappingProxyType({**self._live, key: Live(artifact, promotion)})
            self.errors.pop(key, None)
            self._seen_promotion = max(self._seen_promotion, promotion)
            return True

    def load_initial(self, paths: Mapping[Key, Path] | None) -> None:
        """Load the configured artifacts, or every shipped default that exists.

        A model that fails verification is logged and left out (readiness reports it);
        the service still starts so health checks can say what is wrong.
        """
        if paths is None:
            candidates = {(b, t): default_path(b, t) for b, ts in KNOWN_TARGETS.items()
                          for t in ts}
            candidates = {key: path for key, path in candidates.items() if path.exists()}
        else:
            candidates = dict(paths)
        for key, path in candidates.items():
            try:
                # The shipped models go through load_default so that in-process
                # costmodel.predict and this service share one loaded artifact.
                artifact = load_default(*key) if paths is None else load(path)
                if (artifact.backend, artifact.target) != key:
                    raise ArtifactError(f"artifact at {path} is for {artifact.backend}/"
                                        f"{artifact.target}, configured for {key[0]}/{key[1]}")
            except (ArtifactError, OSError) as exc:
                log.error("model for %s/%s not loaded: %s", *key, exc)
                self.errors[key] = str(exc)
                continue
            self.swap(key, artifact)

    def sync(self, jobs: JobStore, retrain_dir: Path, every: float) -> None:
        """Pick up models another worker promoted; at most once per `every` seconds.

        Errors are logged and never raised: a request must not fail because a
        promoted artifact vanished.
        """
        now = time.monotonic()
        if now < self._next_sync:
            return
        self._next_sync = now + every
        try:
            if jobs.latest_promotion_id() <= self._seen_promotion:
                return
            promotions = jobs.promotions_after(self._seen_promotion)
        except Exception:  # noqa: BLE001 - a locked or broken DB must not fail requests
            log.exception("could not read model promotions")
            return
        for promotion in promotions:
            key = (promotion["backend"], promotion["target"])
            path = Path(promotion["path"])
            try:
                if retrain_dir.resolve() not in path.resolve().parents:
                    raise ArtifactError(f"{path} is outside RETRAIN_DIR {retrain_dir}")
                artifact = load(path)
                base = self._live.get(key)
                if base is not None and base.promotion == 0 and _created(artifact) < _created(
                        base.artifact):
                    # A model shipped or configured after this promotion supersedes it.
                    log.info("promoted model %s predates the loaded %s; keeping the latter",
                             path, base.artifact.version)
                else:
                    self.swap(key, artifact, promotion["id"])
            except Exception as exc:  # noqa: BLE001 - keep serving the current model
                log.error("promoted model %s for %s/%s not loaded: %s", path, *key, exc)
            with self._lock:
                self._seen_promotion = max(self._seen_promotion, promotion["id"])


def _created(artifact: Artifact) -> str:
    return str(artifact.manifest.get("created") or "")
