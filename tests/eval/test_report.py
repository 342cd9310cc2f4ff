"""The self-contained HTML report: content, escaping, and rendering in headless Chromium.

The Chromium tests run when a ``chromium`` (Debian package) or Chrome binary is on
PATH and are skipped otherwise; each browser call takes about a second.
"""

from __future__ import annotations

import base64
import hashlib
import html
import importlib.util
import os
import re
import shutil
import struct
import subprocess
import sys
import zlib
from html.parser import HTMLParser
from pathlib import Path
from types import ModuleType

import numpy as np
import pytest

from verifiers.eval.report import histogram, write_report
from verifiers.eval.summary import fmt_stat, summarize


def _fixtures() -> ModuleType:
    name = "vf_tests_eval_fixtures_b"
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, Path(__file__).with_name("_fixtures_b.py"))
        module = importlib.util.module_from_spec(spec)  # type: ignore[arg-type]
        sys.modules[name] = module
        spec.loader.exec_module(module)  # type: ignore[union-attr]
    return sys.modules[name]


fx = _fixtures()


@pytest.fixture(scope="module")
def real_run(tmp_path_factory: pytest.TempPathFactory):
    return fx.build_run(tmp_path_factory.mktemp("out"))


@pytest.fixture(scope="module")
def report(real_run) -> Path:
    return write_report(real_run.run_dir)


class Tags(HTMLParser):
    """Every start tag with its attributes, and the text of <script> elements."""

    def __init__(self) -> None:
        super().__init__()
        self.tags: list[tuple[str, dict[str, str | None]]] = []
        self.scripts: list[str] = []
        self._in_script = False

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append((tag, dict(attrs)))
        self._in_script = tag == "script"

    def handle_endtag(self, tag: str) -> None:
        self._in_script = False

    def handle_data(self, data: str) -> None:
        if self._in_script:
            self.scripts.append(data)


def parse(text: str) -> Tags:
    p = Tags()
    p.feed(text)
    return p


# -- the file --------------------------------------------------------------------------------


def test_default_location_and_self_contained(real_run, report: Path) -> None:
    assert report == real_run.run_dir / "report.html"
    text = report.read_text(encoding="utf-8")
    tags = parse(text)
    names = [t for t, _ in tags.tags]
    assert "link" not in names and "iframe" not in names and "img" not in names
    assert names.count("script") == 1 and names.count("style") == 1
    for tag, attrs in tags.tags:
        for attr in ("src", "href", "srcset", "action"):
            value = attrs.get(attr)
            assert value is None or value.startswith("#"), (tag, attr, value)
    assert "@import" not in text and "url(" not in text
    # The Content-Security-Policy allows exactly the inline script that is there (by hash), nothing remote.
    (csp,) = [
        a["content"] for t, a in tags.tags if t == "meta" and a.get("http-equiv") == "Content-Security-Policy"
    ]
    digest = base64.b64encode(hashlib.sha256(tags.scripts[0].encode()).digest()).decode()
    assert f"'sha256-{digest}'" in csp and "default-src 'none'" in csp


def test_model_output_is_escaped(report: Path) -> None:
    text = report.read_text(encoding="utf-8")
    assert fx.HOSTILE not in text
    assert html.escape(fx.HOSTILE) in text
    assert not any(a.get("id") == "pwn" for _, a in parse(text).tags)


def test_summary_numbers_are_those_of_summarize(real_run, report: Path) -> None:
    text = report.read_text(encoding="utf-8")
    meta = real_run.metadata
    s = summarize(real_run.results, meta.rollouts_per_example, wall_s=meta.duration_s)
    assert f'id="reward-stat">{html.escape(fmt_stat(s.reward))}<' in text
    assert f'id="n-rollouts">{s.n}<' in text and f'id="n-errored">{s.n_errored}<' in text
    for k, v in s.pass_at_k.items():
        assert f"<tr><td>{k}</td><td>{v:.4f}</td>" in text
    for name, stat in s.metrics.items():
        assert f"<tr><td>{name}</td><td>{stat.mean:.4f}</td><td>{stat.std:.4f}</td>" in text
    assert "<td>ServerError</td><td>2</td>" in text and "<td>reward:fragile</td><td>3</td>" in text
    assert f"{s.tokens.prompt_total:,}" in text


def test_every_rollout_with_tool_calls_and_errors(real_run, report: Path) -> None:
    text = report.read_text(encoding="utf-8")
    tags = parse(text).tags
    details = {a["id"]: a for t, a in tags if t == "details"}
    assert set(details) == {f"r-{r.example_id}-{r.rollout_index}" for r in real_run.results}
    for r in real_run.results:
        a = details[f"r-{r.example_id}-{r.rollout_index}"]
        expected = "rollout" if r.error else ("scoring" if r.scoring_errors else "")
        assert a["data-error"] == expected
        assert ("has-error" in (a["class"] or "")) == bool(expected)
        assert float(a["data-reward"] or "nan") == r.reward
    assert text.count('class="tool-call"') == sum(
        len(m.get("tool_calls") or []) for r in real_run.results for m in r.completion
    )
    assert html.escape('{"a": 10, "b": ') in text  # malformed arguments as sent
    assert "not valid JSON" in text and "fragile cannot score answer 2" in text
    assert '<div class="error"><b>ServerError</b> in model' in text


def test_out_path_and_no_leftover_temp_files(real_run, tmp_path: Path) -> None:
    out = write_report(real_run.run_dir, tmp_path / "sub" / "r.html")
    assert out == tmp_path / "sub" / "r.html" and out.stat().st_size > 1000
    assert sorted(p.name for p in out.parent.iterdir()) == ["r.html"]


def test_histogram_bins() -> None:
    bins = histogram([0.0, 0.05, 0.5, 0.99, 1.0, 1.0])
    assert len(bins) == 10 and (bins[0][0], bins[-1][1]) == (0.0, 1.0)
    assert [c for *_, c in bins] == [2, 0, 0, 0, 0, 1, 0, 0, 0, 3]  # 1.0 lands in the last bin
    wide = histogram([-2.0, 0.0, 3.0])
    assert (wide[0][0], wide[-1][1]) == (-2.0, 3.0) and sum(c for *_, c in wide) == 3
    assert sum(c for *_, c in histogram([1.5] * 4)) == 4  # constant values outside [0, 1]
    assert histogram([]) == []


# -- in a real browser ---------------------------------------------------------------------


def _browser() -> str | None:
    for name in ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable"):
        path = shutil.which(name)
        if path:
            return path
    return None


BROWSER = _browser()
needs_browser = pytest.mark.skipif(
    BROWSER is None, reason="no chromium binary on PATH (apt-get install chromium)"
)


def chromium(*args: str, profile: Path) -> subprocess.CompletedProcess[str]:
    assert BROWSER is not None
    cmd = [
        BROWSER,
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--no-first-run",
        "--disable-extensions",
        f"--user-data-dir={profile}",
        *args,
    ]
    return subprocess.run(
        cmd, capture_output=True, text=True, timeout=60, env={**os.environ, "HOME": str(profile)}
    )


def read_png(path: Path) -> np.ndarray:
    """Decode an 8-bit RGB/RGBA PNG into an (h, w, channels) array with zlib (no imaging library)."""
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n", "not a PNG"
    pos, idat, header = 8, b"", None
    while pos < len(data):
        (length,) = struct.unpack(">I", data[pos : pos + 4])
        kind, body = data[pos + 4 : pos + 8], data[pos + 8 : pos + 8 + length]
        pos += 12 + length
        if kind == b"IHDR":
            header = struct.unpack(">IIBBBBB", body)
        elif kind == b"IDAT":
            idat += body
    assert header is not None
    width, height, depth, color, _, _, interlace = header
    assert depth == 8 and color in (2, 6) and interlace == 0, header
    bpp = 3 if color == 2 else 4
    raw = np.frombuffer(zlib.decompress(idat), dtype=np.uint8).reshape(height, 1 + width * bpp)
    out = np.zeros((height, width * bpp), dtype=np.uint8)
    prev = np.zeros(width * bpp, dtype=np.int32)
    for y in range(height):
        f, line = raw[y, 0], raw[y, 1:].astype(np.int32)
        if f == 0:
            cur = line
        elif f == 1:  # Sub: a running sum per channel
            cur = (np.cumsum(line.reshape(width, bpp), axis=0) % 256).reshape(-1)
        elif f == 2:  # Up
            cur = (line + prev) % 256
        else:  # Average / Paeth depend on the reconstructed left pixel: per pixel
            cur = np.zeros_like(line)
            for x in range(width * bpp):
                a = cur[x - bpp] if x >= bpp else 0
                b = prev[x]
                c = prev[x - bpp] if x >= bpp else 0
                if f == 3:
                    pred = (a + b) // 2
                else:
                    p = a + b - c
                    pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
                    pred = a if pa <= pb and pa <= pc else (b if pb <= pc else c)
                cur[x] = (line[x] + pred) % 256
        out[y] = cur
        prev = cur
    return out.reshape(height, width, bpp)[:, :, :3]


@needs_browser
def test_screenshot_shows_the_page_and_the_histogram(report: Path, tmp_path: Path) -> None:
    shot = tmp_path / "shot.png"
    proc = chromium(
        f"--screenshot={shot}",
        "--window-size=1000,1500",
        "--hide-scrollbars",
        report.as_uri(),
        profile=tmp_path,
    )
    assert shot.is_file(), proc.stderr[-2000:]
    img = read_png(shot)
    assert img.shape[:2] == (1500, 1000)
    background = img[0, 0]
    non_background = np.any(img != background, axis=2).mean()
    assert non_background > 0.05, f"page looks blank ({non_background:.3%} non-background pixels)"
    # Histogram bars are drawn in #2e90fa; their pixels prove the inline SVG rendered.
    bar = np.all(np.abs(img.astype(int) - [0x2E, 0x90, 0xFA]) <= 6, axis=2).sum()
    assert bar > 2000, f"only {bar} histogram-coloured pixels"
    # Error badges (#b42318) are visible in the rollout list.
    red = np.all(np.abs(img.astype(int) - [0xB4, 0x23, 0x18]) <= 6, axis=2).sum()
    assert red > 100


@needs_browser
def test_rendered_dom_has_summary_histogram_and_working_script(
    real_run, report: Path, tmp_path: Path
) -> None:
    proc = chromium("--dump-dom", report.as_uri(), profile=tmp_path)
    dom = proc.stdout
    assert "<body" in dom, proc.stderr[-2000:]
    s = summarize(real_run.results, 3)
    assert html.escape(fmt_stat(s.reward)) in dom
    svg = re.search(r'<svg id="reward-histogram".*?</svg>', dom, re.S)
    assert svg is not None
    counts = [int(c) for c in re.findall(r'<rect class="bar"[^>]*data-count="(\d+)"', svg.group(0))]
    assert len(counts) == 10 and sum(counts) == s.n
    # The inline script ran under the CSP: it marks the body and counts the rollouts.
    assert 'data-ready="1"' in dom
    assert f"{s.n} of {s.n} rollouts shown" in dom
    # Injected markup stayed text: no element came out of the model's output.
    tags = parse(dom)
    assert not any(t == "img" or a.get("id") == "pwn" for t, a in tags.tags)
    assert len(tags.scripts) == 1 and "&lt;script&gt;window.__pwned" in dom


@needs_browser
def test_errors_link_filters_rollouts(real_run, report: Path, tmp_path: Path) -> None:
    proc = chromium("--dump-dom", report.as_uri() + "#errors", profile=tmp_path)
    dom = proc.stdout
    flagged = sum(1 for r in real_run.results if r.error is not None or r.scoring_errors)
    assert f"{flagged} of {len(real_run.results)} rollouts shown" in dom, proc.stderr[-2000:]
    hidden = re.findall(r'<details class="rollout[^"]*\bhidden\b[^"]*"', dom)
    assert len(hidden) == len(real_run.results) - flagged
