"""`advise`: should I split this jit, and how? Every alternative is rewritten, lowered and
predicted with the model, never guessed."""

from __future__ import annotations

import math
import numbers
from dataclasses import dataclass
from typing import Any

from costmodel.features import Features

from . import _hlo_rewrite, _hlo_split, _rewrite
from ._lowering import features_of
from ._predict import Prediction, _fmt_bytes, _fmt_seconds, predict_features

MIN_REPEATS = 3            # fewer repeats rarely pay for a loop
MIN_SAVING = 0.3           # an alternative must save 30% to be worth the change
CONSTANT_BYTES = 1 << 20   # captured constants above 1 MB are worth passing as arguments
# How each layer library scans a stack of identical layers (the block's library, found in
# its frames: `costmodel.features.jaxpr`)
LAYER_IDIOMS = {
    "flax.linen": "In Flax Linen: wrap the layer in nn.scan (variable_axes={'params': 0}, "
                  "split_rngs={'params': True}, length=the layer count) and call it once "
                  "instead of the Python loop over layers.",
    "flax.nnx": "In Flax NNX: create the layers with nnx.vmap over a split key, then run "
                "them with nnx.scan instead of the Python loop.",
    "haiku": "In Haiku: replace the Python loop with hk.layer_stack(num_layers)(block_fn).",
    "equinox": "In Equinox: build the layers stacked (eqx.filter_vmap of the constructor "
               "over keys), then lax.scan over eqx.partition's array leaves, combining "
               "each slice with the static part in the body.",
}


def check_budget(value: Any, name: str = "budget_seconds") -> float:
    """`value` as a float when it is a positive finite number of seconds, else a
    ValueError naming the argument (the rule the CLI's --budget follows)."""
    number = isinstance(value, numbers.Real) and not isinstance(value, bool)
    seconds = float(value) if number else math.nan
    if not math.isfinite(seconds) or seconds <= 0:
        raise ValueError(f"{name} must be a positive finite number of seconds, not {value!r}")
    return seconds


@dataclass(frozen=True)
class Alternative:
    """One way to compile the program, with its predicted compile time."""

    strategy: str                 # keep | scan | split_inner_jits | constants_as_arguments
    predicted_compile_seconds: float
    description: str
    runtime_note: str

    def to_dict(self) -> dict[str, Any]:
        return {"strategy": self.strategy,
                "predicted_compile_seconds": self.predicted_compile_seconds,
                "description": self.description, "runtime_note": self.runtime_note}


@dataclass(frozen=True)
class Advice:
    """Whether to split, why, and the alternatives considered (cheapest first).

    Example:
        >>> a = costmodel.lower(unrolled_loop, x).advise(budget_seconds=5)
        >>> a.split, a.alternatives[0].strategy
        (True, 'scan')
    """

    split: bool
    reason: str
    alternatives: tuple[Alternative, ...]
    prediction: Prediction
    budget_seconds: float

    def __str__(self) -> str:
        lines = [self.reason]
        for alt in self.alternatives:
            lines.append(f"  {alt.strategy:<24} ≈ {_fmt_seconds(alt.predicted_compile_seconds)}"
                         f"  {alt.description}")
        return "\n".join(lines)

    def to_dict(self) -> dict[str, Any]:
        return {"split": self.split, "reason": self.reason,
                "budget_seconds": self.budget_seconds,
                "alternatives": [a.to_dict() for a in self.alternatives],
                "prediction": self.prediction.to_dict()}


def _predict_program(fn, shapes, backend: str, target: str, model) -> float:
    features = features_of(fn, tuple(shapes), backend, target, jaxpr=False)
    return predict_features(features, model=model).compile_seconds


def _scan_alternative(features: Features, traced, model) -> Alternative | None:
    block = features.info.get("repeated_block", {})
    repeats, size = block.get("repeats", 0), block.get("size", 0)
    if repeats < MIN_REPEATS:
        return None
    start, repeats = _rewrite.same_shaped_run(traced.jaxpr.jaxpr.eqns, block["start"], size,
                                              repeats)
    if repeats < MIN_REPEATS:  # layers of differing shapes: too few of one shape in a row
        return None
    # the layers' own weights stacked, as the scanned-layer idioms take them
    rewritten = _rewrite.as_scan(traced.jaxpr, start, size, repeats, stacked_arguments=True)
    if rewritten is None:
        return None
    rewritten = _rewrite.scan_remaining(*rewritten, min_repeats=MIN_REPEATS,
                                        stacked_arguments=True)
    seconds = _predict_program(*rewritten, features.backend, features.target, model)
    where = f" starting at {block['source']}" if block.get("source") else ""
    return _scan(seconds, repeats, f"{size} operations{where}",
                 LAYER_IDIOMS.get(block.get("library", ""), ""))


def _scan(seconds: float, repeats: int, block: str, idiom: str = "") -> Alternative:
    return Alternative(
        "scan", seconds,
        f"Run the {repeats} identical blocks of {block} with jax.lax.scan (or "
        f"lax.fori_loop) over one block instead of unrolling them."
        + (f" {idiom}" if idiom else ""),
        "Runtime is usually within a few percent of the unrolled loop; XLA no longer fuses "
        "across iterations. lax.scan(..., unroll=k) trades some compile time back for speed.")


def _split_alternative(features: Features, traced, model) -> Alternative | None:
    if features["jaxpr_inner_jit_count"] < 1:
        return None
    parts, glue = _rewrite.inner_jit_parts(traced.jaxpr)
    if not parts:
        return None
    programs = parts + ([glue] if glue is not None else [])
    seconds = sum(_predict_program(fn, shapes, features.backend, features.target, model)
                  for fn, shapes, _ in programs)
    sources = [j["source"] for j in features.info.get("inner_jits", []) if j.get("source")]
    where = f" (called at {sources[0]})" if sources else ""
    return _split(seconds, [name for _, _, name in parts], where, glue is not None)


def _split(seconds: float, names: list[str], where: str, glue: bool) -> Alternative:
    return Alternative(
        "split_inner_jits", seconds,
        f"Call the inner jitted functions ({', '.join(sorted(set(names)))}){where} from "
        f"outside the outer jit, so each distinct one compiles once on its own "
        f"({len(names)} programs{' plus the glue around them' if glue else ''}).",
        "Each call becomes a separate dispatch with its results in device memory: no fusion "
        "across the boundaries, plus ~10-50 µs dispatch overhead per call.")


def _constants_alternative(features: Features, traced, model) -> Alternative | None:
    if features["jaxpr_const_bytes"] < CONSTANT_BYTES:
        return None
    fn, shapes = _rewrite.constants_as_arguments(traced.jaxpr)
    seconds = _predict_program(fn, shapes, features.backend, features.target, model)
    return Alternative(
        "constants_as_arguments", seconds,
        f"Pass the {int(features['jaxpr_const_count'])} captured arrays "
        f"({_fmt_bytes(features['jaxpr_const_bytes'])}) as arguments instead of closing "
        "over them, so XLA does not embed and constant-fold them.",
        "No runtime cost once the arrays live on the device; they stop being baked into "
        "the executable.")


def _scan_text_alternative(text: str, features: Features, model) -> Alternative | None:
    """`_scan_alternative` made on StableHLO text (`_hlo_rewrite.scan_text`)."""
    scanned = _hlo_rewrite.scan_text(text, min_repeats=MIN_REPEATS)
    if scanned is None:
        return None
    seconds = _predict_text(scanned.text, features, model)
    return _scan(seconds, scanned.repeats, f"{scanned.size} StableHLO operations")


def _split_text_alternative(text: str, features: Features, model) -> Alternative | None:
    """`_split_alternative` made on StableHLO text (`_hlo_split.inner_jit_texts`)."""
    parts, glue = _hlo_split.inner_jit_texts(text)
    if not parts:
        return None
    programs = [part for _, part in parts] + ([glue] if glue is not None else [])
    seconds = sum(_predict_text(program, features, model) for program in programs)
    return _split(seconds, [name for name, _ in parts], "", glue is not None)


def _predict_text(text: str, features: Features, model) -> float:
    from costmodel.features import from_stablehlo

    rewritten = from_stablehlo(text, backend=features.backend, target=features.target)
    return predict_features(rewritten, model=model).compile_seconds


def _embedded_constants_alternative(features: Features, model) -> Alternative | None:
    """Constants passed as arguments, from the features alone: the module's dense
    constants become one more parameter of as many bytes."""
    if features["dense_constant_bytes"] < CONSTANT_BYTES:
        return None
    values = dict(features.values)
    values.update(dense_constant_bytes=0.0, largest_constant_bytes=0.0,
                  param_count=values["param_count"] + 1,
                  input_bytes=values["input_bytes"] + features["dense_constant_bytes"])
    lighter = Features(values, features.backend, features.target,
                       features.jaxlib_version, features.host_cpu_count)
    return Alternative(
        "constants_as_arguments", predict_features(lighter, model=model).compile_seconds,
        f"The module embeds {_fmt_bytes(features['dense_constant_bytes'])} of dense "
        "constants: pass them as arguments so XLA does not constant-fold them.",
        "No runtime cost once the arrays live on the device.")


NONE_FOUND = " (no repeated blocks, inner jits or large constants found)."


def decide(whole: Prediction, alternatives: list[Alternative], budget_seconds: float,
           none_found: str = NONE_FOUND) -> Advice:
    """Pick keep or the cheapest alternative and say why in a sentence or two;
    `none_found` ends the reason when no alternative was found at all."""
    keep = Alternative("keep", whole.compile_seconds, "Keep the program as one jit.",
                       "Fastest runtime: XLA sees and fuses the whole program.")
    options = sorted([keep] + alternatives, key=lambda a: a.predicted_compile_seconds)
    best = options[0]
    predicted = _fmt_seconds(whole.compile_seconds)
    budget = _fmt_seconds(budget_seconds)
    saves = best.predicted_compile_seconds <= (1 - MIN_SAVING) * whole.compile_seconds
    if whole.compile_seconds <= budget_seconds:
        split = False
        reason = (f"Predicted compile ≈ {predicted}, within your budget of {budget}: "
                  "keep it as one jit.")
        if best.strategy != "keep" and saves:
            reason += (f" ({best.strategy} would bring it to "
                       f"≈ {_fmt_seconds(best.predicted_compile_seconds)} if that matters.)")
    elif best.strategy != "keep" and saves:
        split = True
        reason = (f"Predicted compile ≈ {predicted} exceeds your budget of {budget}. "
                  f"{best.description} Predicted ≈ "
                  f"{_fmt_seconds(best.predicted_compile_seconds)}.")
    else:
        split = False
        reason = (f"Predicted compile ≈ {predicted} exceeds your budget of {budget}, but no "
                  "split found here saves much: keep it as one jit"
                  + (none_found if not alternatives else "."))
    return Advice(split, reason, tuple(options), whole, budget_seconds)


def advise_features(features: Features, budget_seconds: float = 10.0, model=None) -> Advice:
    """Advice from a feature vector alone (HTTP `features`): keep, or constants passed as
    arguments; a vector holds no program to rewrite into a loop or split."""
    budget_seconds = check_budget(budget_seconds)
    whole = predict_features(features, model=model)
    found = _embedded_constants_alternative(features, model)
    return decide(whole, [found] if found is not None else [], budget_seconds,
                  none_found=" (no large constants found; a feature vector holds no program "
                             "to look for repeated blocks or inner jits in: send its "
                             "StableHLO text for those).")


def advise_stablehlo(text: str, features: Features, budget_seconds: float = 10.0,
                     model=None) -> Advice:
    """Advice for a program given as StableHLO text (`features` are the text's, so it
    passed the text guard: it is not checked again): the same
    alternatives `advise_program` rewrites a trace into, made on the text instead
    (`_hlo_rewrite`, `_hlo_split`). The text names no source lines, so descriptions name none."""
    budget_seconds = check_budget(budget_seconds)
    whole = predict_features(features, model=model)
    alternatives = [alt for alt in (_scan_text_alternative(text, features, model),
                                    _split_text_alternative(text, features, model),
                                    _embedded_constants_alternative(features, model))
                    if alt is not None]
    return decide(whole, alternatives, budget_seconds)


def advise_program(features: Features, traced, budget_seconds: float, model) -> Advice:
    """Advice for a program from its features and its trace (None for a program given
    lowered: then only "keep" is considered). `costmodel.advise` and `Stage.advise`."""
    budget_seconds = check_budget(budget_seconds)
    whole = predict_features(features, model=model)
    alternatives = []
    if traced is not None:
        for make in (_scan_alternative, _split_alternative, _constants_alternative):
            alt = make(features, traced, model)
            if alt is not None:
                alternatives.append(alt)
    return decide(whole, alternatives, budget_seconds)
