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
