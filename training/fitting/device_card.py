"""The TPU model card's section on compile times measured on the chip
(`device_correction.py` writes it after fitting)."""

from __future__ import annotations

from pathlib import Path

CARD_HEADING = "## On the chip"
# how the section's line on the interval's widening for strangers starts (`widening_line`)
WIDENING_START = "Programs of libraries no fit had seen"


def widening_line(report: dict) -> str:
    """The card's line on the interval's widening (`device_widening`'s report)."""
    before = report["coverage_before"].values()
    if report.get("power"):
        rule = (f"{report['factor']:.2f} x max(1, d / {report['onset']:.1f}) ^ "
                f"{report['power']:g}, d the program's distance from the training rows (a "
                f"mean {report['mean_scale']:.2f} for those programs"
                + (f", {report['held_out_mean_scale']:.2f} for the libraries held out above"
                   if "held_out_mean_scale" in report else "") + ")")
    else:
        rule = f"{report['factor']:.2f}"
    held = (f"; the libraries held out above {100 * report['held_out_coverage_after']:.0f}%"
            if "held_out_coverage_after" in report else "")
    return (f"{WIDENING_START} (outside suites scored as shipped before any joined a fit, "
            f"{report['programs']} programs of {report['libraries']} libraries) fell inside "
            f"the interval above {100 * min(before):.0f}-{100 * max(before):.0f}% of the "
            f"time, so `predict` multiplies its log offsets by {rule}: "
            f"{100 * report['coverage_library_held_out']:.0f}% of those programs fall inside, "
            f"each library scored against a rule fitted without it{held} "
            "(`training/evaluation/device_widening.py`).")


def card_section(figures: dict, about: dict) -> str:
    """The model card's section on compile times measured on the chip."""
    real = figures["real_libraries"]
    rows = [("the model with the device correction", real["corrected"])]
    rows += [(label, real[key]) for key, label in (
        ("model_times_constant", "the model times one constant"),
        ("power_law", "the op-count power law times one constant"),
        ("cpu_times_constant", "the program's measured CPU compile times one constant"),
        ("sweep_here", "the deviceless compile measured in the sweep, as it is"))
        if key in real]
    lines = [CARD_HEADING, "",
             f"Compile seconds on a {about.get('chip') or 'TPU'} chip's own host "
             f"({about.get('host_cpu_count')} cores, libtpu {about.get('libtpu')}), what "
             "`predict` answers for this target: the model's prediction times a device "
             f"correction fitted on {figures['n']} programs compiled on the chip ("
             f"{figures['n'] - figures.get('outside', {}).get('n', 0)} of them also deviceless "
             "in the sweep). Each of the "
             f"{real['n']} programs of real libraries is scored with its library held out "
             "of the model and of the correction; every constant is fitted on the other "
             "libraries.", "",
             "| predictor | median fold | p90 fold | median abs log error |",
             "| --- | --- | --- | --- |"]
    lines += [f"| {label} | {f['median_fold']:.2f} | {f['p90_fold']:.2f} | "
              f"{f['median_abs_log']:.3f} |" for label, f in rows]
    c = real["corrected"]
    lines += ["", f"Spearman {c['spearman']:.2f}; the 90% interval covers "
              f"{100 * c['coverage']:.0f}%."]
    if "outside" in figures:
        o, own = figures["outside"], figures["corpus_real_libraries"]
        lines += [f"Of them, {o['n']} are programs of libraries no sweep row holds (the outside "
                  "libraries' programs, `bench/evaluations/tpu_outside.py`, each program's label "
                  "over all the calls that compiled it): median "
                  f"fold {o['corrected']['median_fold']:.2f}, p90 {o['corrected']['p90_fold']:.2f}, "
                  f"covered {100 * o['corrected']['coverage']:.0f}%; the corpus's {own['n']}: "
                  f"{own['corrected']['median_fold']:.2f}, p90 {own['corrected']['p90_fold']:.2f}, "
                  f"covered {100 * own['corrected']['coverage']:.0f}%. The interval weighs each "
                  "library the same."]
    if about.get("widening"):
        lines += [widening_line(about["widening"])]
    if about.get("part_factors"):
        k = about["part_factors"]
        lines += [f"The correction is blended (weight {about['parts_weight']}) with part "
                  "models: each part of the compile libtpu's log names, predicted for the "
                  "sweep machine, times its factor for the chip's host (HLO passes "
                  f"{k['hlo']:.2f}, backend {k['backend']:.2f}, the rest {k['other']:.2f})."]
    if about.get("chip_model_weight"):
        lines += [f"That blend is blended again (weight {about['chip_model_weight']}) with a "
                  "chip model: the model's recipe fitted on the sweep's deviceless rows and "
                  "the chip's rows together, the host one more input."]
    if isinstance(about.get("labels"), dict):
        f, raw = about["labels"]["position_factor"], figures.get("real_libraries_raw_labels")
        lines += ["A program's chip seconds are taken at one process state: a compile on the "
                  "chip's host gets faster the more its process has compiled, so each label "
                  "is fitted over all its compiles with the compiles before each in its "
                  f"process and the call as terms (`device_labels`; the first three compiles "
                  f"{f[0]:.2f}x the average, after {about['labels']['position_edges'][-1]} "
                  f"{f[-1]:.2f}x)."
                  + ("" if raw is None else
                     f" Against each program's raw median instead: median fold "
                     f"{raw['median_fold']:.2f}, p90 {raw['p90_fold']:.2f}.")]
    if "fresh_rss_over_50MB" in real:
        m = real["fresh_rss_over_50MB"]
        lines += [f"Host RSS growth above 50 MB, measured deviceless in a fresh process on "
                  f"the chip's host ({m['n']} programs): median fold "
                  f"{m['with_host_bytes']['median_fold']:.2f} (bias "
                  f"{m['with_host_bytes']['bias']:.2f}) with the host's "
                  f"{about.get('rss_added_mb', 0):.0f} MB added, "
                  f"{m['model']['median_fold']:.2f} (bias {m['model']['bias']:.2f}) as the "
                  "sweep machine's prediction."]
    return "\n".join(lines) + "\n"


def write_widening_line(model: Path, report: dict) -> None:
    """Put the widening's line in the card's section, in place of an earlier one."""
    write_section_line(model, widening_line(report), WIDENING_START)


def write_section_line(model: Path, line: str, start: str) -> None:
    """Put `line` in the card's section in place of the one beginning with `start`, or
    after the line on the outside programs."""
    card = model / "MODEL_CARD.md"
    if not card.is_file() or CARD_HEADING not in card.read_text():
        return
    text = card.read_text()
    begin, end = _section_span(text)
    lines = text[begin:end].rstrip("\n").splitlines()
    at = next((i for i, old in enumerate(lines) if old.startswith(start)), None)
    if at is not None:
        lines[at] = line
    else:
        at = next((i + 1 for i, old in enumerate(lines) if old.startswith("Of them,")),
                  len(lines))
        lines.insert(at, line)
    card.write_text(text[:begin] + "\n".join(lines) + "\n\n" + text[end:])


def _section_span(text: str) -> tuple[int, int]:
    """Where the card's "On the chip" section starts, and where the next section does (or
    the card ends)."""
    start = text.index(CARD_HEADING)
    end = text.find("\n## ", start + 1)
    return start, len(text) if end < 0 else end + 1


def write_card_section(model: Path, section: str) -> None:
    """Put `section` in the model card, in place of an earlier one, before its limits."""
    card = model / "MODEL_CARD.md"
    if not card.is_file():
        return
    text = card.read_text()
    if CARD_HEADING in text:
        start, end = _section_span(text)
        text = text[:start] + text[end:]
    at = text.find("## Limits")
    text = text[:at] + section + "\n" + text[at:] if at >= 0 else text + "\n" + section
    card.write_text(text)
