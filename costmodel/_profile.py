"""`profile`: where one real compile of the program spends its time, beside the prediction.

Compiles the program once under a `jax.profiler` trace (after a warm-up compile of the
reference program, so backend and LLVM start-up are not charged to it) and reads XLA's
own phase events (`costmodel.measure.phases`): HLO passes, the backend (code
generation, LLVM), the rest, and the slowest HLO passes. The prediction's parts come
from the model's phase shares, so predicted and measured sit in one table. Tracing adds
about 1% to the compile it measures (`bench/profile_overhead.py`: profiled/plain 1.009
median on 8 programs, 0.90-1.17).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

from costmodel.features import Placement

from ._blame_views import Node, icicle_html
from ._predict import Prediction, _fmt_seconds

PART_NAMES = {"hlo": "HLO passes", "backend": "backend (codegen, LLVM)", "other": "the rest"}
# A pass is named as slow only from this long: shorter ones print as "0 ms", which
# says nothing about where the time went.
MEASURABLE_SECONDS = 0.001
# A compile in a process that has run others cannot be charged its own host memory, so
# the page shows none rather than zeros.
MEMORY_NOTE = ("Host memory is not shown: a profile measures time only, in a process that "
               "has compiled before; host memory is measured in a fresh process "
               "(costmodel sweep).")


class CacheHit(RuntimeError):
    """The program was compiled before in this process: nothing new to measure."""


@dataclass(frozen=True)
class Profile:
    """One measured compile, by part and HLO pass, with the prediction beside it."""

    compile_seconds: float
    parts: dict[str, float]  # measured seconds per part (hlo, backend, other)
    passes: dict[str, float]  # the slowest HLO passes, exclusive seconds
    prediction: Prediction
    predicted_parts: dict[str, float] | None = field(default=None)

    def __str__(self) -> str:
        lines = [f"measured compile {_fmt_seconds(self.compile_seconds)}, predicted "
                 f"{_fmt_seconds(self.prediction.compile_seconds)}",
                 f"{'part':<26} {'measured':>9} {'share':>6} {'predicted':>10} {'share':>6}"]
        for part, seconds in self.parts.items():
            predicted = (self.predicted_parts or {}).get(part)
            guess = ("" if predicted is None else
                     f"{_fmt_seconds(predicted):>10} "
                     f"{predicted / self.prediction.compile_seconds:>6.1%}")
            lines.append(f"{PART_NAMES[part]:<26} {_fmt_seconds(seconds):>9} "
                         f"{seconds / self.compile_seconds:>6.1%} {guess}")
        slow = {name: s for name, s in self.passes.items() if s >= MEASURABLE_SECONDS}
        if slow:
            lines.append("slowest HLO passes: " + ", ".join(
                f"{name} {_fmt_seconds(s)}" for name, s in slow.items()))
        elif self.passes:
            lines.append(f"no HLO pass took {_fmt_seconds(MEASURABLE_SECONDS)} or more")
        return "\n".join(lines)

    def to_dict(self) -> dict[str, Any]:
        return {"compile_seconds": self.compile_seconds, "parts": self.parts,
                "passes": self.passes, "predicted_parts": self.predicted_parts,
                "prediction": self.prediction.to_dict()}

    def html(self) -> str:
        """The measured compile as an icicle chart: parts, then HLO passes under theirs."""
        root = Node("compile", "", self.compile_seconds)
        for part, seconds in self.parts.items():
            node = root.child(PART_NAMES[part], "")
            node.seconds = seconds
            if part == "hlo":
                for name, own in self.passes.items():
                    node.child(name, "").seconds = own
        return icicle_html(root, f"costmodel profile: measured compile "
                                 f"{_fmt_seconds(self.compile_seconds)} (predicted "
                                 f"{_fmt_seconds(self.prediction.compile_seconds)})",
                           kind="measured", memory_note=MEMORY_NOTE)


def profile_stage(stage) -> Profile:
    """Profile the compile of a `Stage` for JAX's backend here (see the module doc)."""
    from costmodel.measure.harness import CompileEvents, compile_once, placement
    from costmodel.measure.phases import PhaseTrace, part_seconds
    from costmodel.measure.reference import build_reference

    prediction = stage.predict()
    events = CompileEvents()
    compile_once(build_reference, placement("cpu", ""), events)  # warm-up, not measured
    lowered = stage._lowered(Placement.of(prediction.backend, prediction.target))[1]
    trace = PhaseTrace()
    mark = events.mark()
    with trace:
        start = time.perf_counter()
        lowered.compile()
        seconds = time.perf_counter() - start
    if len(events.since(mark)) != 1:
        raise CacheHit("this program was compiled before in this process, so nothing new "
                       "was measured: profile it in a fresh process (`costmodel profile`)")
    row = {**trace.row(seconds), "compile_seconds": seconds}
    parts = part_seconds(row)
    if parts is None:
        raise RuntimeError(f"the compile's trace could not be read: {trace.error}")
    shares = prediction._artifact.predictor.part_shares([prediction.features.model_inputs()])
    predicted = None if shares is None else {
        part: float(shares[part][0]) * prediction.compile_seconds for part in parts}
    return Profile(seconds, parts, dict(trace.passes), prediction, predicted)
