"""The model card: what a model was trained on, how well it does held out, its plots."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pandas as pd

from costmodel.models.novelty import Widening

from ..fitting.estimator import TARGETS
from ..fitting.fit import families, model_params
from ..fitting.recipe import ADDED_TERMS, BASELINE_FORMS, BASELINE_TERMS
from . import metrics
from .by_placement import card_section as placement_section
from .evaluate import (
    EXTRAPOLATION_TEST_FROM,
    EXTRAPOLATION_TRAIN_BELOW,
    SPLITS,
    backend_label,
)
from .interval_widening import CORPUS_COVERAGE, widening_reports
from .outside import card_section


def markdown_table(report: dict) -> str:
    """The report as a markdown table: one line per split, backend, target and model."""
    lines = ["| split | backend | target | model | median fold | p90 fold | within 2x "
             "| Spearman | 90% coverage | n |", "|" + " --- |" * 10]

    def fmt(value) -> str:
        return "-" if value is None or (isinstance(value, float) and np.isnan(value)) \
            else f"{value:.3g}" if isinstance(value, float) else str(value)

    for split in (*SPLITS, "leave_library_out_over_1s"):
        for label, by_target in report.get(split, {}).items():
            for name, by_model in by_target.items():
                for model, m in by_model.items():
                    cells = [split, label, name, model] + [fmt(m.get(k)) for k in (
                        *metrics.METRIC_NAMES, "n")]
                    lines.append("| " + " | ".join(cells) + " |")
    for label, floor in report.get("noise_floor", {}).items():
        m = floor["compile_seconds"]
        lines.append(f"| noise floor | {label} | compile_seconds | repeats vs their median | "
                     f"{fmt(m['median_fold'])} | {fmt(m['p90_fold'])} | | | | {m['n']} |")
    return "\n".join(lines) + "\n"


# How the card names each widened quantity, and what its bench programs are.
QUANTITY_WORDS = {"compile_seconds": ("compile-time", "timings"),
                  "peak_rss_bytes": ("host-memory", "host-memory measurements")}


def widening_section(reports: dict[str, dict]) -> list[str]:
    """Markdown lines on how the bench programs widened each quantity's interval
    (`interval_widening.widening_reports`; none: no lines)."""
    if not reports:
        return []
    lines = ["## Intervals widened for programs unlike the training rows", ""]
    for quantity, widening in reports.items():
        lines += [_widening_paragraph(widening, *QUANTITY_WORDS[quantity]), ""]
    return lines


def _widening_paragraph(widening: dict, name: str, measured: str) -> str:
    benches = sorted(widening["coverage_before"])

    def shares(key: str) -> str:
        return ", ".join(f"{b} {widening[key][b]:.0%}" for b in benches)

    rule = Widening.from_dict(widening)
    fitted_on = (f"{widening['programs']} {measured} of {widening['libraries']} libraries, "
                 f"each library weighing the same; `training/evaluation/interval_widening.py`")
    if rule.uses_distance:
        growth = f"max(1, d / {rule.onset:.1f})^{rule.power:g}"
        formula = growth if rule.factor == 1 else f"{rule.factor:.2f} x {growth}"
        band = CORPUS_COVERAGE
        corpus = widening.get("leave_library_out_coverage", band[0])
        kept = ("" if band[0] <= corpus <= band[1] else
                " (no such rule keeps them within it here: this one is the narrowest over "
                "the bench programs and those held-out rows together)")
        opening = (f"Programs far from every training row miss the held-out-library {name} "
                   f"interval above more often than near ones, so its log offsets are "
                   f"multiplied by {formula}, d a program's distance from the training rows "
                   f"(`costmodel.models.novelty`): the narrowest such rule that puts "
                   f"{widening['coverage']:.0%} of the stored bench programs inside "
                   f"({fitted_on}) among those that keep the corpus's libraries held out "
                   f"covered {band[0]:.0%}-{band[1]:.0%}{kept}.")
    else:
        opening = (f"The {name} interval's log offsets are multiplied by "
                   f"{rule.factor:.2f}, the smallest factor of at least 1 that puts "
                   f"{widening['coverage']:.0%} of the stored bench programs inside "
                   f"({fitted_on}).")
    lines = [f"{opening} Coverage before: {shares('coverage_before')}; after: "
             f"{shares('coverage_after')}. With each library's programs scored against a "
             f"rule fitted without them: {shares('coverage_library_held_out')} "
             f"({widening['coverage_library_held_out']['all']:.0%} over all)."]
    if "leave_library_out_coverage" in widening:
        scale = widening["mean_scale"]
        lines.append(f"The library-held-out evaluation's intervals cover "
                     f"{widening['leave_library_out_coverage_before']:.0%} as fitted (the "
                     f"table's figure) and {widening['leave_library_out_coverage']:.0%} "
                     f"widened. The log width grows {scale['benches']:.2f}x on average on "
                     f"the bench programs and {scale['leave_library_out']:.2f}x on the "
                     f"corpus's held-out rows.")
    return " ".join(lines)


_FORM_WORDS = {"overhead": "a fixed cost plus a power law",
               "within": "a power law with exponents fitted within families",
               "pooled": "a power law"}


def headline(report: dict, label: str) -> str:
    """One sentence on compile-time accuracy with each family held out, against baselines."""
    lofo = report["leave_family_out"][label]["compile_seconds"]
    ours, base = lofo["costmodel"], lofo["power_law"]
    gain = 1 - np.log(ours["median_fold"]) / np.log(base["median_fold"])
    floor = report["noise_floor"][label]["compile_seconds"]["median_fold"]
    extra = report["extrapolation"][label]["compile_seconds"]["costmodel"]
    drift = report.get("drift", {}).get(label, {})
    raw = drift.get("leave_family_out_measured", {}).get("median_fold")
    return (f"With each program family held out of training, compile time is predicted within "
            f"a median factor of {ours['median_fold']:.2f} (90th percentile "
            f"{ours['p90_fold']:.2f}, Spearman {ours['spearman']:.2f}); the 90% interval covers "
            f"{ours['coverage']:.0%}. The median |log error| is {gain:.0%} below the op-count "
            f"power law's; {_repeats_sentence(floor)} Trained on compiles under "
            f"{EXTRAPOLATION_TRAIN_BELOW:g} s, "
            f"compiles of {EXTRAPOLATION_TEST_FROM:g} s and more are predicted within a median "
            f"factor of {extra['median_fold']:.2f} (n={extra['n']}). Compile seconds are "
            f"scored at the median reference time (measured seconds divided by "
            f"(ref / median ref)^{drift.get('reference_power', 0):.2f}); against seconds as "
            f"measured under the sweep's varying load the median factor is "
            f"{raw or float('nan'):.2f}.")


def _repeats_sentence(floor: float | None) -> str:
    """The noise floor's clause; rows timed once each (`--max-repeats 1`) have none."""
    if floor is None:
        return "each program was timed once, so the rows give no noise floor."
    return f"repeated measurements of one program differ from their median by a factor of {floor:.2f}."


def _terms(backend: str, kind: str, defaults: dict, target: str = "compile_seconds"):
    """The size counts of `kind` ("baseline_terms" or "added_terms") a backend's model uses."""
    return {**defaults, **model_params(backend).get(kind, {})}.get(target, ())


def _anchor_words(artifact) -> str:
    """A sentence per target whose prediction has a ceiling from another's (`Anchor`)."""
    if artifact is None:
        return ""
    words = ""
    for target, fitted in artifact.predictor.targets.items():
        anchor = fitted.anchor
        if anchor is not None:
            margin = f", plus a margin of {anchor.margin:.1f}" if anchor.margin else ""
            held = (f", raised by {anchor.per_held_byte:g} bytes per byte of "
                    f"{' and '.join(anchor.held)}" if anchor.per_held_byte else "")
            words += (f" {target} has a ceiling from {anchor.source}: where its log prediction "
                      f"lies above {anchor.slope:.3f} x log {anchor.source} + "
                      f"{anchor.intercept:.2f} (a line fitted to the real programs' "
                      f"labels{margin}{held}), it moves {anchor.weight:.2f} of the way down "
                      f"to it (the weight whose out-of-fold predictions err least); intervals "
                      f"are set around that.")
    return words


def write_card(path: Path, manifest: dict, report: dict, rows: pd.DataFrame,
               figures: Sequence[Path], artifact=None, outside_results: Path | None = None
               ) -> Path:
    """Write the model card: what it was trained on, how well it does, and the plots; with
    `artifact` and `outside_results` (a folder of bench results), also how it does on the
    stored out-of-corpus bench programs."""
    seconds = pd.to_numeric(rows["compile_seconds"], errors="coerce")
    counts = pd.Series(families(rows)).value_counts().sort_index()
    label = backend_label(manifest["backend"], manifest["target"])
    env = manifest["environment"]
    text = [f"# {manifest['name']} ({manifest['version']})", "",
            f"Predicts compile seconds, peak host-RSS growth and executable bytes of JAX "
            f"programs compiled for `{label}`, from StableHLO features (schema "
            f"{manifest['schema_version']}), each with a 90% interval.", "",
            headline(report, label), "",
            "## Method", "",
            "Per target, in log space: a baseline in a few size counts carries growth beyond "
            "the largest measured compile (trees cannot extrapolate), and gradient-boosted "
            "trees on all features correct its residual, learning each kind of program's "
            "level from its op mix. Baselines: "
            + "; ".join(f"{t}: {_FORM_WORDS[BASELINE_FORMS[t]]} in "
                        f"{', '.join(_terms(manifest['backend'], 'baseline_terms', BASELINE_TERMS, t))}"
                        for t in TARGETS)
            + ". Added to the compile-time baseline, each as a power law of its own (a cost "
            "that adds to the rest rather than scaling it): "
            + ", ".join(_terms(manifest["backend"], "added_terms", ADDED_TERMS))
            + ". Compile seconds are first divided by the fitted power of the reference "
            "program's time measured alongside, so predictions are for a machine as fast as "
            "the sweep's median; `costmodel.training.measure.calibrate` scales them to another "
            "machine. Intervals are split-conformal on out-of-fold residuals with whole "
            "families (real programs: whole libraries) held out, per tercile of predicted "
            "size; where the data holds enough real programs, their residuals alone set "
            "the intervals." + _anchor_words(artifact), "",
            "## Data", "",
            f"- {len(rows)} measured compiles (status ok), {len(counts)} families, "
            f"fingerprint `{manifest['training_data']['fingerprint']}`",
            f"- compile seconds {seconds.min():.3g} to {seconds.max():.3g} "
            f"(median {seconds.median():.3g})",
            f"- jax {', '.join(manifest['jax_versions'])}; "
            f"{', '.join(map(str, env['cpu_model']))}, {', '.join(map(str, env['cpu_count']))} "
            f"cores; harness {', '.join(env['harness_version'])}",
            f"- reference program median {manifest['reference_seconds'] or 0:.3g} s", "",
            "| family | rows |", "| --- | --- |"]
    text += [f"| {f} | {n} |" for f, n in counts.items()]
    text += ["", "## Evaluation", "",
             "Fold error is max(pred/actual, actual/pred). Memory ratios are taken on "
             "bytes + offset (1 MiB peak RSS, 1 KiB executable). `power_law`: log target "
             "linear in log op count; `linear`: ridge on log1p of every feature.", "",
             markdown_table(report)]
    text += widening_section(widening_reports(report))
    if artifact is not None and outside_results is not None:
        text += card_section(artifact, outside_results, manifest["backend"], manifest["target"])
    text += placement_section(report.get("by_placement"))
    text += ["## Limits", "",
             "- The corpus is synthetic families and, where measured, real programs of 16 "
             "public libraries (held out a library at a time above); programs unlike all of "
             "them (see the per-family plot for how far a held-out family can be off) get "
             "wider errors.",
             "- Beyond the largest measured compile only the power law speaks; compile time of "
             "very long unrolled chains grows faster than any op-count power law fitted here.",
             "", "## Plots", ""]
    text += [f"![{fig.stem}]({fig.name})" for fig in figures]
    path.write_text("\n".join(text) + "\n")
    return path
