"""The blame page renders: headless Chromium draws its icicle chart.

Skipped when no Chromium is installed; CI installs it and sets
COSTMODEL_REQUIRE_CHROMIUM=1, which turns that skip into a failure.
"""

import colorsys
import os
import re
import shutil
import subprocess

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import costmodel

WINDOW = (1280, 720)
TOLERANCE = 8  # per channel, 0-255: antialiasing at rectangle edges aside


def _chromium() -> str:
    for name in ("chromium", "chromium-browser", "google-chrome"):
        if path := shutil.which(name):
            return path
    if os.environ.get("COSTMODEL_REQUIRE_CHROMIUM") == "1":
        pytest.fail("COSTMODEL_REQUIRE_CHROMIUM=1 but no chromium is on PATH")
    pytest.skip("no chromium on PATH (CI installs it)")


def _screenshot(page, tmp_path) -> np.ndarray:
    from PIL import Image

    png = tmp_path / "shot.png"
    subprocess.run(
        [_chromium(), "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic",
         "--no-first-run", "--disable-background-networking", "--disable-component-update",
         "--disable-sync", "--hide-scrollbars", "--force-device-scale-factor=1",
         f"--user-data-dir={tmp_path / 'profile'}", f"--screenshot={png}",
         f"--window-size={WINDOW[0]},{WINDOW[1]}", page.as_uri()],
        check=True, capture_output=True, timeout=60)
    return np.asarray(Image.open(png).convert("RGB"), dtype=int)


def _fills(html: str) -> list[np.ndarray]:
    """The RGB colour of every rectangle the page draws, in drawing order (root first)."""
    colours = []
    for hue, sat, light in re.findall(r'fill="hsl\((\d+),(\d+)%,(\d+)%\)"', html):
        rgb = colorsys.hls_to_rgb(int(hue) / 360, int(light) / 100, int(sat) / 100)
        colours.append(np.round(np.array(rgb) * 255).astype(int))
    return colours


def _matching(shot: np.ndarray, colour: np.ndarray) -> np.ndarray:
    return np.all(np.abs(shot - colour) <= TOLERANCE, axis=-1)


def program(x, w):
    s = jnp.sum(jnp.sin(x))
    for _ in range(30):
        x = jnp.tanh(x @ w)
    return s + jnp.sum(jax.nn.softmax(x))


def test_headless_chromium_draws_the_icicle_chart(tmp_path):
    x, w = (jax.ShapeDtypeStruct(s, jnp.float32) for s in ((8, 32), (32, 32)))
    html = costmodel.blame(program, x, w).html()
    page = tmp_path / "blame.html"
    page.write_text(html)
    shot = _screenshot(page, tmp_path)
    fills = _fills(html)
    assert len(fills) >= 3
    # the root row spans the chart's full width (1200 px) in its own colour
    rows, cols = np.nonzero(_matching(shot, fills[0]))
    assert cols.size > 0.5 * 1200 * 18, "the chart's top row was not drawn"
    assert cols.max() - cols.min() > 1100 and rows.min() > 40  # below the page's heading
    # and the rows under it are drawn too, in their colours, below the root row
    below = [c for c in fills[1:] if _matching(shot[rows.max() + 1:], c).sum() > 200]
    assert len(below) >= 2


def a_helper_whose_qualified_name_is_long_enough_to_be_cut(x, w):
    for _ in range(200):
        x = jnp.tanh(x @ w)
    return x


def calls_the_long_named_helper_twice(x, w):
    a = a_helper_whose_qualified_name_is_long_enough_to_be_cut(x, w)
    b = a_helper_whose_qualified_name_is_long_enough_to_be_cut(x * 2, w)
    return jnp.sum(jnp.sin(a) + b)


# Run in the page by the test alone (the page itself has no scripts): what Chromium laid
# out for each bar's label and where the table lies.
_PROBE = """<script>
const labels = [];
for (const g of document.querySelectorAll('#icicle g')) {
  const rect = g.querySelector('rect'), text = g.querySelector('text');
  if (!text) continue;
  labels.push({text: text.textContent, width: text.getComputedTextLength(),
               x: +text.getAttribute('x'), y: +text.getAttribute('y'),
               left: +rect.getAttribute('x'), right: +rect.getAttribute('x') +
               +rect.getAttribute('width')});
}
const table = document.getElementById('regions');
const probe = document.createElement('pre');
probe.id = 'probe';
probe.textContent = JSON.stringify({labels: labels,
  svgBottom: document.getElementById('icicle').getBoundingClientRect().bottom,
  tableTop: table ? table.getBoundingClientRect().top : null,
  rows: table ? Array.from(table.rows, r => Array.from(r.cells, c => c.textContent)) : []});
document.body.appendChild(probe);
</script>"""


def _laid_out(html_text: str, tmp_path) -> dict:
    import html as html_lib
    import json

    page = tmp_path / "probed.html"
    page.write_text(html_text.replace("</body>", _PROBE + "</body>"))
    dom = subprocess.run(
        [_chromium(), "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         f"--user-data-dir={tmp_path / 'probe-profile'}", f"--window-size={WINDOW[0]},{WINDOW[1]}",
         "--dump-dom", page.as_uri()],
        check=True, capture_output=True, timeout=60, text=True).stdout
    found = re.search(r'<pre id="probe">(.*?)</pre>', dom, re.S)
    assert found, "the probe did not run"
    return json.loads(html_lib.unescape(found.group(1)))


SHARE = re.compile(r"^\d+(\.\d)?%(?= |$)")
SOURCE = re.compile(r"\S+\.py:\d+")


def test_bar_labels_show_their_share_and_whole_file_line(tmp_path):
    x, w = (jax.ShapeDtypeStruct(s, jnp.float32) for s in ((8, 32), (32, 32)))
    blame = costmodel.blame(calls_the_long_named_helper_twice, x, w)
    html_text = blame.html()
    sources = {r.source for r in blame.regions} | _sources(blame.tree)
    laid = _laid_out(html_text, tmp_path)
    labels = laid["labels"]
    assert len(labels) >= 5
    with_source = []
    for label in labels:
        share = SHARE.match(label["text"])
        assert share, label  # every label starts with its bar's share
        # Chromium's own text measure: the label ends inside its bar, never under the next
        assert label["x"] + label["width"] <= label["right"] - 1, label
        if found := SOURCE.search(label["text"]):
            assert found.group(0) in sources, label  # file:line whole, never cut
            with_source.append(label)
    # both callers' lines and the helper's loop are labelled, the long name cut from the
    # right (its start kept), an ellipsis marking the cut
    assert len({SOURCE.search(lb["text"]).group(0) for lb in with_source}) >= 3
    cut = [lb["text"] for lb in with_source if lb["text"].endswith("…")]
    assert cut and all("calls_the" in t or "a_helper" in t for t in cut), cut
    # the table sits below the chart, one row per region, each file:line whole
    assert laid["tableTop"] > laid["svgBottom"]
    header, *rows = laid["rows"]
    assert header[0] == "source" and len(rows) == len(blame.regions)
    assert [row[0] for row in rows] == [r.source for r in blame.regions]
    assert [row[2] for row in rows] == [f"{r.share:.1%}" for r in blame.regions]

    # and the shares are drawn: dark text pixels where each label's share is written
    page = tmp_path / "blame.html"
    page.write_text(html_text)
    shot = _screenshot(page, tmp_path)
    top = _svg_top(shot, _fills(html_text)[0])
    for label in labels:
        chars = len(SHARE.match(label["text"]).group(0))
        left, bottom = int(label["x"]) + _SVG_LEFT, top + int(label["y"])
        box = shot[bottom - 10:bottom + 1, left:left + int(chars * 7.2)]
        dark = (box.sum(axis=-1) < 250).sum()
        assert dark >= 4 * chars, (label["text"], dark)


_SVG_LEFT = 8  # the body's default margin


def _svg_top(shot: np.ndarray, root_fill: np.ndarray) -> int:
    rows, _ = np.nonzero(_matching(shot, root_fill))
    return int(rows.min())


def _sources(node) -> set[str]:
    return {node.source} | {s for child in node.children.values() for s in _sources(child)}
