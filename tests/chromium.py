"""Rendering a self-contained HTML page in headless Chromium (Debian's `chromium`), for the tests
of the reports that qverify writes (suite summary.html, impact report.html): a screenshot, and
whether it shows something other than a blank page. Tests skip with a reason where it is absent."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

CHROMIUM = next((found for name in ("chromium", "chromium-browser") if (found := shutil.which(name))), None)
needs_chromium = pytest.mark.skipif(
    CHROMIUM is None, reason="chromium not installed (Debian: apt-get install chromium)"
)


def screenshot(page: Path, work: Path, size: tuple[int, int] = (1000, 1400)) -> Image.Image:
    """The page rendered at `size` (width, height) pixels, as an RGB image."""
    shot = work / "shot.png"
    command = [
        CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
        "--disable-component-update", "--disable-sync", "--no-first-run", "--hide-scrollbars",
        f"--user-data-dir={work / 'profile'}", f"--window-size={size[0]},{size[1]}", f"--screenshot={shot}",
        page.as_uri(),
    ]  # fmt: skip
    done = subprocess.run(command, capture_output=True, text=True, timeout=120, check=False)
    assert shot.is_file(), done.stderr[-2000:]
    image = Image.open(shot).convert("RGB")
    assert image.size == size
    return image


def assert_not_blank(image: Image.Image, min_inked: float = 0.02, min_colours: int = 50) -> np.ndarray:
    """Enough pixels differ from the background, in enough colours (text, tables, pictures; not a
    flat page). Returns the pixels (n, 3) for further checks."""
    pixels = np.asarray(image).reshape(-1, 3)
    colours, counts = np.unique(pixels, axis=0, return_counts=True)
    background = colours[np.argmax(counts)]
    inked = float(np.mean(np.any(pixels != background, axis=1)))
    assert inked > min_inked, f"the page looks blank: {inked:.2%} of the pixels differ from the background"
    assert len(colours) > min_colours
    return pixels
