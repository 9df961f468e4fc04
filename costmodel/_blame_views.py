"""Blame as a call tree, and the tree as pictures: an HTML icicle chart and Chrome
trace-event JSON (Perfetto and chrome://tracing open it).

Each source line's seconds are split among the call stacks its ops were reached through
(in proportion to their ops), and every frame of a stack is a node holding what runs
below it, so a node's width is the predicted compile seconds of everything it called.
"""

from __future__ import annotations

import html
import zlib
from dataclasses import dataclass, field
from typing import Any

from costmodel.features.regions import OUTSIDE


@dataclass
class Node:
    """A frame of the call tree: a function at a source line, and what ran below it."""

    name: str
    source: str
    seconds: float = 0.0
    peak_memory_bytes: float = 0.0
    children: dict = field(default_factory=dict)

    def child(self, name: str, source: str) -> Node:
        key = (name, source)
        if key not in self.children:
            self.children[key] = Node(name, source)
        return self.children[key]

    def ordered(self) -> list[Node]:
        return sorted(self.children.values(), key=lambda n: (-n.seconds, n.source))

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "source": self.source, "seconds": self.seconds,
                "peak_memory_bytes": self.peak_memory_bytes,
                "children": [c.to_dict() for c in self.ordered()]}


def _shared_frames(tallies) -> int:
    """How many outermost frames every stack shares (the code that called costmodel),
    leaving each stack at least its last frame."""
    stacks = [s for t in tallies.values() for s in t.stacks if s]
    if not stacks:
        return 0
    limit = min(len(s) for s in stacks) - 1
    common = 0
    while common < limit and all(s[common] == stacks[0][common] for s in stacks):
        common += 1
    return common


def call_tree(blame, tallies) -> Node:
    """The regions of `blame` nested by the call stacks in `tallies` (see the module doc),
    the frames every stack shares (the caller of costmodel) left out."""
    root = Node("program", "", blame.compile_seconds, blame.peak_memory_bytes)
    shared = _shared_frames(tallies)
    for region in blame.regions:
        tally = tallies.get(region.source)
        stacks = dict(tally.stacks) if tally is not None and tally.stacks else {}
        total_ops = sum(stacks.values())
        if not stacks or total_ops <= 0 or region.source == OUTSIDE:
            node = root.child(region.name or region.source, region.source)
            node.seconds += region.seconds
            node.peak_memory_bytes += region.peak_memory_bytes
            continue
        for stack, ops in stacks.items():
            share = ops / total_ops
            node = root
            for name, source in stack[shared:]:
                node = node.child(name, source)
                node.seconds += region.seconds * share
                node.peak_memory_bytes += region.peak_memory_bytes * share
    return root


def trace_events(root: Node) -> dict[str, Any]:
    """Chrome trace-event JSON: one complete event per node, children laid out inside
    their parent, 1 predicted second = 1 s of trace time."""
    events: list[dict] = []

    def emit(node: Node, start_us: float, depth: int) -> None:
        events.append({"name": _label(node),
                       "cat": "blame", "ph": "X", "pid": 1, "tid": 1, "ts": start_us,
                       "dur": node.seconds * 1e6,
                       "args": {"source": node.source, "seconds": node.seconds,
                                "peak_memory_bytes": node.peak_memory_bytes,
                                "depth": depth}})
        offset = start_us
        for child in node.ordered():
            emit(child, offset, depth + 1)
            offset += child.seconds * 1e6

    emit(root, 0.0, 0)
    return {"traceEvents": events, "displayTimeUnit": "ms",
            "otherData": {"what": "costmodel blame: predicted compile seconds by call stack"}}


WIDTH, ROW = 1200, 22
# Bar labels are set in a 12 px monospace font, whose characters are 0.6 em wide in the
# common ones (DejaVu, Liberation, Courier): a label is cut to what its bar holds.
FONT_PX, CHAR_PX, PAD_PX = 12, 7.4, 3


def clip(text: str, chars: int) -> str:
    """`text` cut from the right to `chars` characters, an ellipsis marking the cut."""
    if len(text) <= chars:
        return text
    return text[:chars - 1] + "…" if chars > 1 else ""


def bar_label(node: Node, share: float, chars: int) -> str:
    """What a bar `chars` characters wide says: its share of the whole, then its file:line
    whole (or not at all), then as much of its function's name as fits, cut from the
    right; "" when not even the share fits."""
    parts = [f"{share:.1%}" if share < 0.095 else f"{share:.0%}"]  # 9.5%+ rounds to 2 digits
    if len(parts[0]) > chars:
        return ""
    source = node.source if node.source and node.source != node.name else ""
    if source and len(parts[0]) + 1 + len(source) <= chars:
        parts.append(source)
    room = chars - len(" ".join(parts)) - 1
    if room >= min(len(node.name), 4):  # a name cut shorter than that tells nothing
        parts.append(clip(node.name, room))
    return " ".join(parts)


def icicle_html(root: Node, title: str,
                table: tuple[tuple[str, ...], list[tuple[str, ...]]] | None = None,
                kind: str = "predicted", memory_note: str | None = None) -> str:
    """A self-contained page: the call tree as an icicle chart (SVG, no scripts); each
    rectangle's width is its node's compile seconds, `kind` "predicted" (blame) or
    "measured" (profile), its label its share and source line, its tooltip the figures.
    `table` (a header and rows) is shown below. `memory_note` says why the nodes carry no
    host memory (a profile measures none); without it each tooltip shows theirs."""
    rects: list[str] = []
    depth_max = [0]
    total = max(root.seconds, 1e-12)

    def draw(node: Node, x: float, depth: int) -> None:
        width = WIDTH * node.seconds / total
        depth_max[0] = max(depth_max[0], depth)
        if width < 0.5:
            return
        y = depth * ROW
        hue = zlib.crc32((node.source or node.name).encode()) % 360  # stable across runs
        share = node.seconds / total
        tip = f"{_label(node)}: {node.seconds:.3g} s {kind} ({share:.1%})"
        if memory_note is None:
            tip += f", host memory {node.peak_memory_bytes / 1e6:.3g} MB {kind}"
        label = bar_label(node, share, int((width - 2 * PAD_PX) // CHAR_PX))
        rects.append(
            f'<g><title>{html.escape(tip)}</title>'
            f'<rect x="{x:.2f}" y="{y}" width="{width:.2f}" height="{ROW - 2}" '
            f'fill="hsl({hue},60%,70%)" stroke="#fff"/>'
            + (f'<text x="{x + PAD_PX:.2f}" y="{y + 15}">{html.escape(label)}</text>'
               if label else "")
            + "</g>")
        offset = x
        for child in node.ordered():
            draw(child, offset, depth + 1)
            offset += WIDTH * child.seconds / total

    draw(root, 0.0, 0)
    height = (depth_max[0] + 1) * ROW
    return ("<!doctype html><html><head><meta charset='utf-8'>"
            f"<title>{html.escape(title)}</title><style>body{{font-family:sans-serif}} "
            f"#icicle text{{font-family:monospace;font-size:{FONT_PX}px;fill:#000}} "
            "table{border-collapse:collapse;margin-top:1em} "
            "td,th{padding:2px 10px;text-align:left} td.n,th.n{text-align:right} "
            "tr:nth-child(even){background:#f2f2f2}</style></head><body>"
            f"<h2>{html.escape(title)}</h2><p>Width: {kind} compile seconds; rows: the "
            "call stack, the program on top. Each bar: its share, its file:line, its "
            "function; hover for figures."
            + (f" {html.escape(memory_note)}" if memory_note else "") + "</p>"
            f"<svg id='icicle' xmlns='http://www.w3.org/2000/svg' width='{WIDTH}' "
            f"height='{height}'>{''.join(rects)}</svg>"
            f"{_table_html(*table) if table else ''}</body></html>")


def _table_html(header: tuple[str, ...], rows: list[tuple[str, ...]]) -> str:
    """A plain table; the columns between the first and the last hold numbers
    (right-aligned)."""
    def cells(tag: str, values: tuple[str, ...]) -> str:
        return "".join(f"<{tag}{' class=n' if 0 < i < len(values) - 1 else ''}>"
                       f"{html.escape(v)}</{tag}>" for i, v in enumerate(values))
    body = "".join(f"<tr>{cells('td', row)}</tr>" for row in rows)
    return f"<table id='regions'><tr>{cells('th', header)}</tr>{body}</table>"


def _label(node: Node) -> str:
    if not node.source or node.source == node.name:
        return node.name
    return f"{node.name} ({node.source})"
