"""Draw a dashboard offline, as SVG, from its definition and synthetic data (the picture in docs/monitoring.md).

    python -m components.k8s.dashboards_picture            # writes docs/gpu-dashboard.svg

The panels, their titles, kinds, units and grid positions come from the dashboard JSON that
components/k8s/dashboards.py builds (the one Grafana loads); the numbers and curves are made up,
deterministic, and the picture says so. Standard library only: no plotting dependency, and a test
checks that the committed picture is the one this draws (it cannot drift from the dashboard).
"""

from __future__ import annotations

import math
import sys
from pathlib import Path
from typing import Any
from xml.sax.saxutils import escape

from components.k8s import dashboards

OUT = Path(__file__).resolve().parents[2] / "docs" / "gpu-dashboard.svg"
WIDTH = 1200
COL = WIDTH / 24  # Grafana's grid: 24 columns
ROW = 30  # px per grid row unit
HEADER = 56
BG, PANEL, BORDER, TEXT, DIM = "#111217", "#181b1f", "#2c3235", "#d8d9da", "#8e8e8e"
PALETTE = ("#73bf69", "#f2cc0c", "#5794f2", "#ff9830", "#f2495c", "#b877d9", "#8ab8ff", "#96d98d")
SYNTHETIC_STATS = {"GPUs": "16", "GPUs allocated to pods": "16", "Mean GPU utilisation": "87 %",
                   "Tensor pipe active": "41 %", "GPU power": "9.8 kW", "GPUs with an XID": "0"}


def _rand(seed: int):
    """A small deterministic generator (LCG): the same picture on every machine."""
    state = seed * 2654435761 % 2**32 or 1

    def nxt() -> float:
        nonlocal state
        state = (1103515245 * state + 12345) % 2**31
        return state / 2**31
    return nxt


def _series(panel_id: int, unit: str | None, n_lines: int = 8, points: int = 90) -> list[list[float]]:
    r = _rand(panel_id)
    lines = []
    for i in range(n_lines):
        base = 0.55 + 0.35 * r() if unit in ("percent", "percentunit") else 0.35 + 0.4 * r()
        amp, phase = 0.08 + 0.1 * r(), 6.28 * r()
        ys = []
        for t in range(points):
            dip = -0.45 if 40 <= t <= 46 and i == 2 else 0.0  # one GPU stalls for a while
            ys.append(min(0.98, max(0.02, base + amp * math.sin(t / 7 + phase) + 0.04 * (r() - 0.5) + dip)))
        lines.append(ys)
    return lines


def _panel_svg(p: dict[str, Any]) -> list[str]:
    g = p["gridPos"]
    x, y, w, h = g["x"] * COL + 4, HEADER + g["y"] * ROW + 4, g["w"] * COL - 8, g["h"] * ROW - 8
    title = escape(p.get("title", ""))
    if p["type"] == "row":
        return [f'<text x="{x + 4:.0f}" y="{y + 16:.0f}" fill="{TEXT}" font-size="14" font-weight="600">'
                f'&#9662; {title}</text>']
    out = [f'<rect x="{x:.0f}" y="{y:.0f}" width="{w:.0f}" height="{h:.0f}" rx="4" fill="{PANEL}" '
           f'stroke="{BORDER}"/>',
           f'<text x="{x + 8:.0f}" y="{y + 18:.0f}" fill="{TEXT}" font-size="12" font-weight="600">{title}</text>']
    unit = (p.get("fieldConfig") or {}).get("defaults", {}).get("unit")
    if p["type"] == "stat":
        value = SYNTHETIC_STATS.get(p.get("title", ""), "42")
        color = PALETTE[0] if value not in ("0",) else PALETTE[2]
        out.append(f'<text x="{x + w / 2:.0f}" y="{y + h / 2 + 18:.0f}" fill="{color}" font-size="30" '
                   f'font-weight="700" text-anchor="middle">{escape(value)}</text>')
    elif p["type"] == "timeseries":
        px, py, pw, ph = x + 40, y + 28, w - 52, h - 44
        for frac, label in ((0, "0"), (0.5, "50"), (1, "100")):
            yy = py + ph * (1 - frac)
            out.append(f'<line x1="{px:.0f}" y1="{yy:.1f}" x2="{px + pw:.0f}" y2="{yy:.1f}" stroke="{BORDER}"/>')
            if unit in ("percent", "percentunit"):
                out.append(f'<text x="{px - 6:.0f}" y="{yy + 4:.1f}" fill="{DIM}" font-size="10" '
                           f'text-anchor="end">{label}%</text>')
        n = 1 if "by run pod" in p.get("title", "") else 8
        for i, ys in enumerate(_series(p["id"], unit, n_lines=n)):
            pts = " ".join(f"{px + pw * t / (len(ys) - 1):.1f},{py + ph * (1 - v):.1f}" for t, v in enumerate(ys))
            out.append(f'<polyline points="{pts}" fill="none" stroke="{PALETTE[i % len(PALETTE)]}" '
                       f'stroke-width="1.4"/>')
    elif p["type"] == "table":
        cols = ("node", "gpu", "modelName", "XID")
        for j, c in enumerate(cols):
            out.append(f'<text x="{x + 10 + j * w / 4:.0f}" y="{y + 44:.0f}" fill="{DIM}" font-size="11">{c}</text>')
        out.append(f'<text x="{x + 10:.0f}" y="{y + 70:.0f}" fill="{DIM}" font-size="11" font-style="italic">'
                   'no GPU has reported an XID</text>')
    return out


def draw(model: dict[str, Any]) -> str:
    panels = model["panels"]
    height = HEADER + max(p["gridPos"]["y"] + p["gridPos"]["h"] for p in panels) * ROW + 12
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{height}" '
           f'viewBox="0 0 {WIDTH} {height}" font-family="Helvetica, Arial, sans-serif">',
           f'<rect width="{WIDTH}" height="{height}" fill="{BG}"/>',
           f'<text x="12" y="26" fill="{TEXT}" font-size="18" font-weight="700">{escape(model["title"])}</text>',
           '<text x="12" y="46" fill="#ff9830" font-size="12">SYNTHETIC DATA: layout, titles and units from '
           'components/k8s/dashboards.py; numbers and curves are made up</text>',
           f'<text x="{WIDTH - 12}" y="26" fill="{DIM}" font-size="12" text-anchor="end">node: All &#183; '
           'last 3 hours</text>']
    for p in panels:
        out += _panel_svg(p)
    out.append("</svg>")
    return "\n".join(out) + "\n"


def gpu_picture() -> str:
    return draw(dashboards.gpu_board("rltrain").model())


def main(argv: list[str] | None = None) -> int:
    OUT.parent.mkdir(parents=True, exist_ok=True)
    OUT.write_text(gpu_picture())
    print(f"wrote {OUT}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
