"""One transformer layer drawn side by side: training kernels in the left column, inference kernels in the right,
each aligned group's kernels joined by lines coloured by the group's relation (same / fused / split / different
implementation; a kernel on one side only has no line). An inline SVG for the HTML report (:func:`layer_svg`, a
``<title>`` per box holds the full kernel name) and a matplotlib PNG for the Markdown report (:func:`layer_png`),
both from one geometry (:func:`layer_geometry`) of the ``alignment_groups`` rows of the layer
(:func:`tilake.reports.alignment.alignment_facts` ``groups[layer]``: ``train_kernels`` / ``infer_kernels`` are the
op types ``' → '``-joined, in launch order).
"""
from __future__ import annotations

import html
import io
from pathlib import Path
from typing import Any, Dict, List, NamedTuple, Optional, Sequence

from tilake.files import atomic_write_bytes
from tilake.reports.labels import label

RELATION_COLOURS = {"same": "#2ca02c", "fused": "#ff7f0e", "split": "#9467bd", "different_impl": "#d62728",
                    "only_train": "#7f7f7f", "only_infer": "#7f7f7f"}
"""Line and box-edge colour per relation (``kernel_alignment.relation``)."""
MOST_GROUPS = 60
"""Groups drawn per layer; the rest are counted under the picture (the table beside it lists them all)."""

WIDTH, BOX_W, BOX_H, GAP, GROUP_GAP, TOP = 900, 330, 20, 3, 9, 46
LEFT_X, RIGHT_X = 40, WIDTH - 10 - BOX_W


class Box(NamedTuple):
    """One kernel: ``side`` train | infer, top ``y`` (px), its op type ``name``, the group's ``relation``."""

    side: str
    y: float
    name: str
    relation: str
    group: int


class Link(NamedTuple):
    """A line from a training box's right edge (``y0``, its middle) to an inference box's left edge (``y1``)."""

    y0: float
    y1: float
    relation: str


class Geometry(NamedTuple):
    """What :func:`layer_geometry` lays out: boxes, links, the group positions and the picture height (px)."""

    boxes: List[Box]
    links: List[Link]
    group_rows: List[tuple]   # (group position, y of its first row, relation)
    height: float
    not_drawn: int


def _kernels(text: Optional[str]) -> List[str]:
    return [k.strip() for k in str(text).split("→") if k.strip()] if text else []


def layer_geometry(groups: Sequence[Dict[str, Any]], most: int = MOST_GROUPS) -> Geometry:
    """Lay out the first ``most`` groups of one layer: each group takes as many rows as its longer side has
    kernels; every training kernel of a group is joined to every inference kernel of it (a fused group: several
    lines into one box, a split group: one box into several)."""
    boxes: List[Box] = []
    links: List[Link] = []
    rows: List[tuple] = []
    y = TOP
    for g in list(groups)[:most]:
        rel = str(g.get("relation") or "same")
        left, right = _kernels(g.get("train_kernels")), _kernels(g.get("infer_kernels"))
        n = max(len(left), len(right), 1)
        rows.append((g.get("position"), y, rel))
        h = n * (BOX_H + GAP) - GAP

        pos = int(g.get("position") or 0)
        ly, ry = (_place(boxes, names, side, y, h, rel, pos) for names, side in ((left, "train"), (right, "infer")))
        links += [Link(a, b, rel) for a in ly for b in ry]
        y += h + GROUP_GAP
    return Geometry(boxes, links, rows, y + 4, max(0, len(groups) - most))


def _place(boxes: List[Box], names: List[str], side: str, y: float, h: float, rel: str, pos: int) -> List[float]:
    """Append one side's boxes of a group, centred in the group's ``h`` px from ``y``; returns their middles."""
    top = y + (h - (len(names) * (BOX_H + GAP) - GAP)) / 2
    out = []
    for i, name in enumerate(names):
        by = top + i * (BOX_H + GAP)
        boxes.append(Box(side, by, name, rel, pos))
        out.append(by + BOX_H / 2)
    return out


def short(name: str, most: int = 46) -> str:
    """``name`` cut to ``most`` characters around a ``…`` (head and tail kept: GPU kernel names differ at both ends)."""
    return name if len(name) <= most else name[: most - 13] + "…" + name[-12:]


def _legend(lang: str) -> List[tuple]:
    seen = ("same", "fused", "split", "different_impl", "only_train")
    return [(RELATION_COLOURS[r], label("relation." + r, lang) if r != "only_train"
             else label("relation.only_train", lang) + " / " + label("relation.only_infer", lang)) for r in seen]


def layer_svg(groups: Sequence[Dict[str, Any]], layer: int, lang: str = "zh") -> str:
    """The layer as an inline ``<svg>`` (every text escaped; a box's ``<title>`` is its full kernel name)."""
    geo = layer_geometry(groups)
    e = html.escape
    title = label("layer.picture", lang, layer=layer)
    out = [f'<svg class="layer" role="img" aria-label="{e(title)}" viewBox="0 0 {WIDTH} {geo.height:.0f}" '
           f'width="100%" style="max-width:{WIDTH}px" font-family="sans-serif" xmlns="http://www.w3.org/2000/svg"><title>{e(title)}</title>']
    x = LEFT_X
    for colour, text in _legend(lang):
        out.append(f'<rect x="{x}" y="6" width="14" height="10" fill="{colour}"/><text x="{x + 18}" y="15" '
                   f'font-size="11">{e(text)}</text>')
        x += 28 + 7 * len(text)
    side_t, side_i = label("side.train", lang), label("side.infer", lang)
    out.append(f'<text x="{LEFT_X}" y="36" font-size="12" font-weight="bold">{e(side_t)}</text>'
               f'<text x="{RIGHT_X}" y="36" font-size="12" font-weight="bold">{e(side_i)}</text>')
    for pos, y, _rel in geo.group_rows:
        out.append(f'<text x="4" y="{y + 14:.1f}" font-size="10" fill="#777">{e(str(pos))}</text>')
    for ln in geo.links:
        out.append(f'<line x1="{LEFT_X + BOX_W}" y1="{ln.y0:.1f}" x2="{RIGHT_X}" y2="{ln.y1:.1f}" '
                   f'stroke="{RELATION_COLOURS.get(ln.relation, "#333")}" stroke-width="2"/>')
    for b in geo.boxes:
        bx = LEFT_X if b.side == "train" else RIGHT_X
        colour = RELATION_COLOURS.get(b.relation, "#333")
        dash = ' stroke-dasharray="4 3"' if b.relation.startswith("only_") else ""
        out.append(f'<g><title>{e(b.name)} ({e(label("relation." + b.relation, lang) if b.relation in RELATION_COLOURS else b.relation)})</title>'
                   f'<rect x="{bx}" y="{b.y:.1f}" width="{BOX_W}" height="{BOX_H}" rx="3" fill="#fff" '
                   f'stroke="{colour}" stroke-width="1.6"{dash}/>'
                   f'<text x="{bx + 6}" y="{b.y + 14:.1f}" font-size="11" font-family="monospace">{e(short(b.name))}</text></g>')
    if geo.not_drawn:
        out.append(f'<text x="{LEFT_X}" y="{geo.height - 2:.0f}" font-size="11">'
                   f'{e(label("layer.more", lang, n=geo.not_drawn))}</text>')
    out.append("</svg>")
    return "".join(out)


def layer_png(groups: Sequence[Dict[str, Any]], layer: int, path: Path) -> Path:
    """The same picture as a PNG (matplotlib, Agg; English words only, so no CJK font is needed)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.patches import Patch, Rectangle

    geo = layer_geometry(groups)
    dpi = 100
    fig = plt.figure(figsize=(WIDTH / dpi, geo.height / dpi), dpi=dpi)
    ax = fig.add_axes([0, 0, 1, 1])
    ax.set_xlim(0, WIDTH)
    ax.set_ylim(geo.height, 0)
    ax.axis("off")
    try:
        for ln in geo.links:
            ax.plot([LEFT_X + BOX_W, RIGHT_X], [ln.y0, ln.y1], color=RELATION_COLOURS.get(ln.relation, "#333"), lw=1.6)
        for b in geo.boxes:
            bx = LEFT_X if b.side == "train" else RIGHT_X
            ax.add_patch(Rectangle((bx, b.y), BOX_W, BOX_H, facecolor="white", lw=1.3,
                                   edgecolor=RELATION_COLOURS.get(b.relation, "#333"),
                                   linestyle="--" if b.relation.startswith("only_") else "-"))
            ax.text(bx + 6, b.y + BOX_H / 2, short(b.name), va="center", fontsize=7.5, family="monospace")
        for pos, y, _rel in geo.group_rows:
            ax.text(4, y + BOX_H / 2, str(pos), va="center", fontsize=7, color="#777777")
        ax.text(LEFT_X, 34, "training", fontsize=9, weight="bold")
        ax.text(RIGHT_X, 34, "inference", fontsize=9, weight="bold")
        ax.legend(handles=[Patch(color=c, label=t) for c, t in _legend("en")], loc="upper left", ncol=5,
                  fontsize=7.5, frameon=False, bbox_to_anchor=(0.03, 1.0))
        if geo.not_drawn:
            ax.text(LEFT_X, geo.height - 4, label("layer.more", "en", n=geo.not_drawn), fontsize=8)
        buf = io.BytesIO()
        fig.savefig(buf, format="png", dpi=dpi)
    finally:
        plt.close(fig)
    return atomic_write_bytes(path, buf.getvalue())


def layer_pngs(alignment: Optional[Dict[str, Any]], out_dir: Path) -> Dict[int, str]:
    """Write ``layer_<n>_side_by_side.png`` into ``out_dir`` for every layer the report draws; returns layer → file name."""
    out: Dict[int, str] = {}
    for li, groups in ((alignment or {}).get("groups") or {}).items():
        if groups:
            out[li] = layer_png(groups, li, Path(out_dir) / f"layer_{li}_side_by_side.png").name
    return out
