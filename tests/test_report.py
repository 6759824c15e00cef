"""Tests for the INTERNAL HTML/JSON fidelity report."""

from __future__ import annotations

import json
import shutil
import subprocess
import tempfile
from html.parser import HTMLParser
from pathlib import Path

import pytest
from test_metrics import mixed_schema, mixed_table

from splice_assets.evaluation.report import INTERNAL_BANNER, build_report


class _Collector(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.imgs: list[str] = []
        self.external: list[str] = []
        self.headings: list[str] = []
        self._in_h = False
        self.tags: list[str] = []

    def handle_starttag(self, tag, attrs):
        self.tags.append(tag)
        attrs = dict(attrs)
        for key in ("src", "href"):
            value = attrs.get(key)
            if value is not None and not value.startswith("data:"):
                self.external.append(value)
        if tag == "img":
            self.imgs.append(attrs.get("src", ""))
        if tag in ("h1", "h2"):
            self._in_h = True
            self.headings.append("")

    def handle_endtag(self, tag):
        if tag in ("h1", "h2"):
            self._in_h = False

    def handle_data(self, data):
        if self._in_h:
            self.headings[-1] += data


@pytest.fixture(scope="module")
def report(tmp_path_factory):
    schema = mixed_schema()
    train, holdout = mixed_table(1200, 1, schema=schema), mixed_table(600, 2, schema=schema)
    synthetic = mixed_table(1000, 3, shift=0.3, schema=schema)
    facts = {"release_id": "rel-<script>alert(1)</script>", "epsilon": 1.0, "delta": 1e-9, "budget_left": 2.0}
    out = tmp_path_factory.mktemp("report")
    return build_report(train, holdout, synthetic, schema, facts, seed=0, out_dir=out), schema


def test_html_is_internal_self_contained_and_escaped(report):
    result, _ = report
    text = result.html_path.read_text(encoding="utf-8")
    assert text.splitlines()[0].startswith("<!-- INTERNAL")
    parser = _Collector()
    parser.feed(text)
    parser.close()
    assert parser.headings[0].startswith("INTERNAL") and parser.headings[0] == INTERNAL_BANNER
    assert len(parser.imgs) >= 7 + 3  # one marginal per column + heatmaps, TSTR, detection
    assert all(src.startswith("data:image/png;base64,") for src in parser.imgs)
    assert parser.external == []
    assert "script" not in parser.tags and "link" not in parser.tags
    assert "<script>alert(1)" not in text and "&lt;script&gt;" in text
    for heading in (
        "Summary",
        "Pairwise associations",
        "Detection",
        "Distance to closest record",
        "Schema expectations",
    ):
        assert any(h.startswith(heading) for h in parser.headings), heading
    assert "empirical evidence, not a guarantee" in text


def test_json_metrics(report):
    result, _ = report
    data = json.loads(result.json_path.read_text(encoding="utf-8"))
    assert data["internal"] is True
    assert data["release_facts"]["epsilon"] == 1.0
    head = data["metrics"]["headline"]
    assert {"tvd_1way", "tvd_2way", "tvd_3way", "sliced_w1", "mmd", "tstr_roc_auc", "trtr_roc_auc"} <= set(head)
    assert set(data["references"]) == {"independent", "real_halves"}
    assert (
        data["references"]["real_halves"]["headline"]["tvd_2way"]
        < data["references"]["independent"]["headline"]["tvd_2way"]
    )
    assert data["expectations"]["success"] is True
    assert result.seconds > 0 and result.metrics.n_synthetic == 1000


def test_screenshot_if_chromium_available(report):
    browser = shutil.which("chromium") or shutil.which("chromium-browser")
    if browser is None:
        pytest.skip("chromium not installed")
    result, _ = report
    shot = Path(tempfile.mkdtemp()) / "report.png"
    cmd = [browser, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
           "--disable-background-networking", "--disable-component-update", "--disable-sync",
           f"--user-data-dir={tempfile.mkdtemp()}", f"--screenshot={shot}", "--window-size=1280,2000",
           result.html_path.resolve().as_uri()]  # fmt: skip
    try:
        subprocess.run(cmd, capture_output=True, timeout=60, check=False)
    except subprocess.TimeoutExpired:
        pytest.skip("chromium timed out")
    assert shot.exists() and shot.stat().st_size > 10_000
