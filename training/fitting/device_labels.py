"""Chip labels taken at one process state: each program's seconds with the measuring
process's warm-up and the call's host drift removed.

On the chip's host a compile gets faster the more the process has compiled before: fitted
over 875 compiles, a process's first three take 1.69x the average, those after 320 others
0.68x (bench/FINDINGS.md, "A chip process warms for hundreds of compiles"). The device
calls put programs at random places in their processes, so a raw label carries that
factor as noise. Every chip compile is one observation

    log seconds = program + position(compiles before it in its process) + call

fitted by least squares (a few hundred programs seen in two or three calls tie the
position and call terms down; calls get a weak ridge so one seen nowhere else stays at 0).
A program's label is exp(program): its seconds at the observations' average state.
"""

from __future__ import annotations

import json
import statistics
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

# compiles before this one in its process (the reference program's included)
POSITION_EDGES = (0, 3, 10, 20, 40, 80, 160, 320)
CALL_RIDGE = 0.5
# programs compiled in two processes or more: fewer, and position and call cannot be told
# from the programs themselves
MIN_REPEATED = 20
_COMPILES = ("ref_device_s", "device_s", "deviceless_s", "ref_deviceless_s")


@dataclass(frozen=True)
class Observation:
    key: str
    process: str  # file and the process's number in it
    position: int
    log_seconds: float


@dataclass(frozen=True)
class Labels:
    seconds: pd.Series  # by key
    position_factor: np.ndarray  # by `POSITION_EDGES` bin, the average state 1
    call_factor: dict[str, float]
    residual_fold: float  # median fold of an observation from its fit, programs seen twice


def positioned(paths):
    """(process, compiles before it in that process, row) of each row of device-row files
    (`tpu_device_run.py`), in file order; a file's `environment` line starts a process."""
    for path in paths:
        process, position = 0, 0
        for line in Path(path).read_text().splitlines():
            r = json.loads(line)
            if "environment" in r:
                process, position = process + 1, 0
                continue
            yield f"{path}#{process}", position, r
            position += sum(len(r.get(name) or []) for name in _COMPILES)


def observations(paths) -> list[Observation]:
    """Each ok chip compile of device-row files, in file order."""
    return [Observation(r["key"], process, position,
                        float(np.log(statistics.median(r["device_s"]))))
            for process, position, r in positioned(paths)
            if r.get("status") == "ok" and r.get("device_s")]


def fit_labels(obs: list[Observation]) -> Labels:
    from scipy.sparse import csr_matrix, vstack
    from scipy.sparse.linalg import lsqr

    if not obs:
        raise ValueError("no chip observation to label")
    processes: dict[str, set[str]] = {}
    for o in obs:
        processes.setdefault(o.key, set()).add(o.process)
    repeated = sum(len(v) > 1 for v in processes.values())
    if repeated < MIN_REPEATED:
        raise ValueError(f"{repeated} programs compiled in two processes or more, "
                         f"{MIN_REPEATED} needed to take out position and call")
    keys = sorted({o.key for o in obs})
    calls = sorted({o.process for o in obs})
    kid, cid = {k: i for i, k in enumerate(keys)}, {c: i for i, c in enumerate(calls)}
    n, g, c, m = len(keys), len(POSITION_EDGES), len(calls), len(obs)
    P = np.array([kid[o.key] for o in obs])
    G = np.digitize([o.position for o in obs], POSITION_EDGES) - 1
    C = np.array([cid[o.process] for o in obs])
    y = np.array([o.log_seconds for o in obs])
    A = csr_matrix((np.ones(3 * m), (np.tile(np.arange(m), 3), np.concatenate(
        [P, n + G, n + g + C]))), shape=(m, n + g + c))
    ties = np.zeros((1 + c, n + g + c))
    # the observations' average position effect is 0, held firmly; each call's weakly
    ties[0, n:n + g] = 100 * np.bincount(G, minlength=g) / m
    ties[1:, n + g:] = CALL_RIDGE * np.eye(c)
    solution = lsqr(vstack([A, csr_matrix(ties)]), np.r_[y, np.zeros(1 + c)],
                    atol=1e-12, btol=1e-12, iter_lim=100_000)[0]
    residual = y - A @ solution
    seen_twice = np.bincount(P, minlength=n)[P] >= 2
    return Labels(
        seconds=pd.Series(np.exp(solution[:n]), index=keys),
        position_factor=np.exp(solution[n:n + g]),
        call_factor={call: float(np.exp(v)) for call, v in zip(calls, solution[n + g:])},
        residual_fold=float(np.exp(np.median(np.abs(residual[seen_twice]))))
        if seen_twice.any() else float("nan"))


def with_labels(p, labels: Labels):
    """`p` (a `Pairs`) with each program's chip seconds replaced by its label, the raw
    median kept as `device_raw`."""
    frame = p.frame.assign(device_raw=p.frame["device"])
    has = frame.index.isin(labels.seconds.index)
    frame.loc[has, "device"] = labels.seconds.reindex(frame.index[has]).to_numpy()
    return type(p)(frame)
