"""Inline SVG charts for the report: no library, no script, nothing fetched, so the HTML file is the whole report."""

from __future__ import annotations

from collections.abc import Sequence
from html import escape

WIDTH, HEIGHT, PAD = 560, 260, 48


def line_chart(points: dict[int, float], title: str) -> str:
    """pass^k against k: one point per k, y from 0 to 1, each point labelled with its value."""
    if not points:
        return f'<svg xmlns="http://www.w3.org/2000/svg" role="img" aria-label="{escape(title)}"></svg>'
    ks = sorted(points)
    span = max(ks[-1] - ks[0], 1)
    inner_w, inner_h = WIDTH - 2 * PAD, HEIGHT - 2 * PAD

    def xy(k: int, v: float) -> tuple[float, float]:
        return PAD + (k - ks[0]) / span * inner_w, PAD + (1 - v) * inner_h

    parts = _frame(title)
    for tick in (0.0, 0.25, 0.5, 0.75, 1.0):
        y = PAD + (1 - tick) * inner_h
        parts.append(f'<line x1="{PAD}" y1="{y:.1f}" x2="{WIDTH - PAD}" y2="{y:.1f}" stroke="#ddd"/>')
        parts.append(f'<text x="{PAD - 6}" y="{y + 4:.1f}" text-anchor="end" font-size="11">{tick:.2f}</text>')
    path = " ".join(f"{x:.1f},{y:.1f}" for x, y in (xy(k, points[k]) for k in ks))
    parts.append(f'<polyline points="{path}" fill="none" stroke="#2563eb" stroke-width="2"/>')
    for k in ks:
        x, y = xy(k, points[k])
        parts.append(f'<circle cx="{x:.1f}" cy="{y:.1f}" r="4" fill="#2563eb"/>')
        parts.append(f'<text x="{x:.1f}" y="{y - 9:.1f}" text-anchor="middle" font-size="11">{points[k]:.3f}</text>')
        parts.append(f'<text x="{x:.1f}" y="{HEIGHT - PAD + 18}" text-anchor="middle" font-size="11">k={k}</text>')
    return _close(parts, title)


def bar_chart(bars: Sequence[tuple[str, float]], title: str, unit: str = "$") -> str:
    """One horizontal bar per label, scaled to the largest, each with its value."""
    height = PAD + 22 * max(len(bars), 1) + 16
    top = max((v for _, v in bars), default=0.0) or 1.0
    label_w, inner_w = 190, WIDTH - 190 - 90
    parts = _frame(title, height)
    for i, (label, value) in enumerate(bars):
        y = PAD + 22 * i
        w = value / top * inner_w
        parts.append(
            f'<text x="{label_w - 6}" y="{y + 13}" text-anchor="end" font-size="11">{escape(label[:30])}</text>'
        )
        parts.append(f'<rect x="{label_w}" y="{y}" width="{w:.1f}" height="16" fill="#16a34a"/>')
        parts.append(f'<text x="{label_w + w + 4:.1f}" y="{y + 13}" font-size="11">{unit}{value:.6f}</text>')
    return _close(parts, title, height)


def _frame(title: str, height: int = HEIGHT) -> list[str]:
    return [
        f'<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {WIDTH} {height}" width="{WIDTH}" height="{height}" '
        f'role="img" aria-label="{escape(title)}" font-family="sans-serif">',
        f'<text x="{WIDTH / 2}" y="20" text-anchor="middle" font-size="14">{escape(title)}</text>',
    ]


def _close(parts: list[str], title: str, height: int = HEIGHT) -> str:
    return "\n".join([*parts, f"<title>{escape(title)}</title>", "</svg>"])
