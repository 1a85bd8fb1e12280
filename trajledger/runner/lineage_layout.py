"""Where each box, edge and label of a lineage picture goes: a layered layout without overlaps.

Scope: the geometry of ``trajledger lineage --format html`` (and ``impact``): boxes of known
sizes in layers (each edge runs from an upper box down to a lower one), in the manner of
Sugiyama. An edge that spans layers passes through a narrow slot reserved in each layer it
crosses, so no edge runs through a box (edges to one box with one label share their slots);
boxes are ordered within their layer by the mean position of their neighbours (fewer
crossings) and placed as near them as the order allows; each edge's label sits just above the
lower box, one label per label text there ("batch ×40"), in rows that the gap above the layer
is made tall enough for. By construction no two boxes overlap, no label overlaps a box or
another label, and every label is within its box's column; `overlaps` checks it. Text widths
are reckoned for a monospace font (`CHAR_EM` of the font size per character): the renderer
sizes boxes and cuts names with the same reckoning. Also: `short_names`, names cut to a width
that stay distinct where the full names differ.
Non-scope: what the boxes say, colours, SVG (``runner.lineage``).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from itertools import pairwise
from typing import Any

__all__ = [
    "CHAR_EM",
    "Label",
    "Layout",
    "Link",
    "Rect",
    "layout",
    "overlaps",
    "short_names",
    "text_width",
]

CHAR_EM = 0.62
"""Advance of one character of the picture's monospace font, in ems: at most 0.62 for the
usual ones (DejaVu Sans Mono, Menlo and Courier 0.6, Consolas 0.55)."""

LABEL_FONT = 10
"""Font size of edge labels, px."""
LABEL_H = 15
"""Height of an edge label's box, px."""
LABEL_PAD = 4
"""Horizontal padding inside an edge label's box, px."""
GAP_X = 28
"""Horizontal gap between boxes (and slots) of one layer, px."""
GAP_Y = 34
"""Vertical gap between layers, before the rows of labels it holds, px."""
ROW_GAP = 3
"""Gap between rows of labels, and between the lowest row and its box, px."""
SLOT_W = 8
"""Width of the slot an edge reserves in each layer it passes through, px."""
MARGIN = 16
"""Margin around the picture, px."""
SWEEPS = 4
"""Ordering and placement passes (each: down the layers, then up)."""


def text_width(text: str, font_px: float) -> float:
    """Width of ``text`` in the picture's monospace font at ``font_px``."""
    return len(text) * CHAR_EM * font_px


@dataclass(frozen=True)
class Rect:
    """An axis-aligned rectangle: top-left corner and size, px."""

    x: float
    y: float
    w: float
    h: float

    def meets(self, other: Rect) -> bool:
        """Whether the two overlap (touching edges do not count)."""
        return (self.x < other.x + other.w and other.x < self.x + self.w
                and self.y < other.y + other.h and other.y < self.y + self.h)


@dataclass(frozen=True)
class Link:
    """An edge to lay out, from the box drawn above (``upper``) to the box drawn below.

    ``label`` is written once per lower box for all its links with that label (counted);
    ``arrow`` is the end the arrowhead points at: ``lower`` or ``upper``; ``dashed`` draws a
    record's link apart from an artifact's."""

    upper: str
    lower: str
    label: str
    arrow: str = "lower"
    dashed: bool = False


@dataclass(frozen=True)
class Label:
    """An edge label placed: its text (``role`` or ``role ×N``), its box, the box it labels."""

    text: str
    rect: Rect
    lower: str


@dataclass(frozen=True)
class Path:
    """A laid-out edge: points from the upper box's bottom (through the slots of the layers
    between) to the top of its label over the lower box; the link it draws."""

    points: tuple[tuple[float, float], ...]
    link: Link


@dataclass
class Layout:
    """A placed picture: boxes by id, labels, edge paths and the canvas size."""

    boxes: dict[str, Rect] = field(default_factory=dict)
    labels: list[Label] = field(default_factory=list)
    paths: list[Path] = field(default_factory=list)
    width: float = 0.0
    height: float = 0.0


def layout(
    sizes: Mapping[str, tuple[float, float]],
    layer_of: Mapping[str, int],
    links: Sequence[Link],
    order: Callable[[str], Any] = str,
) -> Layout:
    """Lay out boxes ``sizes`` (``{id: (width, height)}``) in the layers ``layer_of`` (0 at
    the top) with the edges ``links`` (each from a layer above to one below).

    Steps:
        1. Layers, with a slot for each edge in each layer it passes through.
        2. Order each layer by the mean position of its neighbours, sweeping down and up
           (ties: ``order`` of the box ids).
        3. The labels over each lower box: one per label text, in rows within its column.
        4. Vertical positions: each gap tall enough for its layer's rows of labels.
        5. Horizontal positions: each box as near the mean of its neighbours as its order and
           the gaps allow (least squares, `_pack`), sweeping down and up; then the whole moved
           to the margin.
        6. Label boxes and edge paths.

    Raises:
        ValueError: a link whose upper box is not in a layer above its lower box.
    """
    # (1)
    depth = max(layer_of.values(), default=0)
    layers: list[list[str]] = [[] for _ in range(depth + 1)]
    for box in sorted(sizes, key=order):
        layers[layer_of[box]].append(box)
    width = {b: sizes[b][0] for b in sizes}
    height = {b: sizes[b][1] for b in sizes}
    chains: list[list[str]] = []  # per link: its upper box, slots, lower box
    slots: dict[tuple[str, str, int], str] = {}
    for link in links:
        top, bottom = layer_of[link.upper], layer_of[link.lower]
        if top >= bottom:
            raise ValueError(f"link {link.upper} -> {link.lower}: the upper box is in layer "
                             f"{top}, not above layer {bottom}")
        chain = [link.upper]
        for k in range(top + 1, bottom):
            # Links to one box with one label share their slot in each layer: they run down
            # together to the label they share (as Graphviz's "concentrate").
            slot = slots.get((link.lower, link.label, k))
            if slot is None:
                slot = slots[(link.lower, link.label, k)] = f"\x00{len(slots)}"
                layers[k].append(slot)
                width[slot], height[slot] = SLOT_W, 0.0
            chain.append(slot)
        chains.append([*chain, link.lower])
    ups: dict[str, list[str]] = {}
    downs: dict[str, list[str]] = {}
    for chain in chains:
        for a, b in pairwise(chain):
            if b not in downs.setdefault(a, []):
                downs[a].append(b)
                ups.setdefault(b, []).append(a)
    # (2)
    for _ in range(SWEEPS):
        for k in range(1, len(layers)):
            _reorder(layers[k], layers[k - 1], ups)
        for k in range(len(layers) - 2, -1, -1):
            _reorder(layers[k], layers[k + 1], downs)
    # (3)
    groups: dict[str, dict[str, list[Link]]] = {}
    for link in links:
        groups.setdefault(link.lower, {}).setdefault(link.label, []).append(link)
    rows: dict[str, list[list[tuple[str, float]]]] = {}
    for box, by_text in groups.items():
        rows[box] = _label_rows(
            [f"{t} ×{len(ls)}" if len(ls) > 1 else t for t, ls in by_text.items()],
            width[box] + GAP_X - 2 * ROW_GAP)
    # (4)
    y: dict[str, float] = {}
    top_y = float(MARGIN)
    for layer in layers:
        n_rows = max((len(rows.get(b, [])) for b in layer), default=0)
        top_y += (GAP_Y if top_y > MARGIN else 0) + n_rows * (LABEL_H + ROW_GAP)
        tall = max((height[b] for b in layer), default=0.0)
        for b in layer:
            y[b] = top_y
            if b.startswith("\x00"):
                height[b] = tall  # an edge passes straight down through the layer
        top_y += tall
    # (5)
    x: dict[str, float] = {}
    for layer in layers:
        _pack(layer, width, x, {})
    widest = max((x[lay[-1]] + width[lay[-1]] for lay in layers if lay), default=0.0)
    for layer in layers:
        if layer:
            shift = (widest - (x[layer[-1]] + width[layer[-1]])) / 2
            for b in layer:
                x[b] += shift
    for _ in range(SWEEPS):
        for k in range(1, len(layers)):
            _pack(layers[k], width, x, _wanted(layers[k], ups, x, width))
        for k in range(len(layers) - 2, -1, -1):
            _pack(layers[k], width, x, _wanted(layers[k], downs, x, width))
    left = min((x[b] - _spill(b, rows, width) for b in x), default=0.0)
    for b in x:
        x[b] += MARGIN - left
    # (6)
    out = Layout()
    for b in sizes:
        out.boxes[b] = Rect(x[b], y[b], sizes[b][0], sizes[b][1])
    ports: dict[tuple[str, str], tuple[float, float]] = {}
    for box, box_rows in rows.items():
        texts = list(groups[box])
        k = 0
        for r, row in enumerate(box_rows):
            row_w = sum(w for _, w in row) + ROW_GAP * (len(row) - 1)
            lx = x[box] + (width[box] - row_w) / 2
            ly = y[box] - (r + 1) * (LABEL_H + ROW_GAP)
            for text, w in row:
                out.labels.append(Label(text, Rect(lx, ly, w, LABEL_H), box))
                ports[(box, texts[k])] = (lx + w / 2, ly)
                lx += w + ROW_GAP
                k += 1
    starts = _starts(chains, x, width)
    for n, (chain, link) in enumerate(zip(chains, links, strict=True)):
        first = chain[0]
        points = [(starts[n], y[first] + height[first])]
        for s in chain[1:-1]:
            points += [(x[s] + SLOT_W / 2, y[s]), (x[s] + SLOT_W / 2, y[s] + height[s])]
        # It ends on top of its label, which sits just over the lower box.
        port, label_top = ports[(link.lower, link.label)]
        points.append((port, label_top))
        out.paths.append(Path(tuple(points), link))
    out.width = max((r.x + r.w for r in [*out.boxes.values(), *(lb.rect for lb in out.labels)]),
                    default=0.0) + MARGIN
    out.height = top_y + MARGIN
    return out


def _reorder(layer: list[str], other: list[str], neighbours: Mapping[str, list[str]]) -> None:
    """Sort ``layer`` by the mean index of each box's neighbours in ``other`` (a box with none
    keeps its place)."""
    at = {b: i for i, b in enumerate(other)}
    keys = {}
    for i, b in enumerate(layer):
        near = [at[n] for n in neighbours.get(b, ()) if n in at]
        keys[b] = sum(near) / len(near) * len(layer) / max(len(other), 1) if near else float(i)
    layer.sort(key=lambda b: keys[b])


def _wanted(
    layer: list[str], neighbours: Mapping[str, list[str]], x: Mapping[str, float],
    width: Mapping[str, float],
) -> dict[str, float]:
    """Where each box of ``layer`` would like its left edge: centred under (or over) the mean
    centre of its neighbours."""
    out = {}
    for b in layer:
        near = [x[n] + width[n] / 2 for n in neighbours.get(b, ()) if n in x]
        if near:
            out[b] = sum(near) / len(near) - width[b] / 2
    return out


def _pack(
    layer: list[str], width: Mapping[str, float], x: dict[str, float],
    wanted: Mapping[str, float],
) -> None:
    """Place ``layer`` in its order, a gap apart, as near its wanted places as can be: the
    least squares placement (boxes without a wish wish to stay). With ``x_i = y_i + s_i``, ``s_i``
    the room the boxes before ``i`` take, the gaps hold exactly when ``y`` never decreases: an
    isotonic regression of the wishes less ``s``, solved by pooling adjacent violators."""
    if not layer:
        return
    offset = []
    s = 0.0
    for b in layer:
        offset.append(s)
        s += width[b] + GAP_X
    target = [wanted.get(b, x.get(b, 0.0)) - o for b, o in zip(layer, offset, strict=True)]
    blocks: list[list[float]] = []  # [mean, count]
    for t in target:
        blocks.append([t, 1.0])
        while len(blocks) > 1 and blocks[-2][0] > blocks[-1][0]:
            m2, n2 = blocks.pop()
            m1, n1 = blocks[-1]
            blocks[-1] = [(m1 * n1 + m2 * n2) / (n1 + n2), n1 + n2]
    i = 0
    for mean, count in blocks:
        for _ in range(int(count)):
            x[layer[i]] = mean + offset[i]
            i += 1


def _spill(box: str, rows: Mapping[str, list[list[tuple[str, float]]]],
           width: Mapping[str, float]) -> float:
    """How far a box's widest row of labels reaches left of the box."""
    widest = max((sum(w for _, w in row) + ROW_GAP * (len(row) - 1) for row in rows.get(box, [])),
                 default=0.0)
    return max(0.0, (widest - width[box]) / 2)


def _label_rows(texts: list[str], room: float) -> list[list[tuple[str, float]]]:
    """The label texts as rows of ``(text, box width)``, each row at most ``room`` wide (a text
    too wide for it alone is cut with "…")."""
    most = max(1, int((room - 2 * LABEL_PAD) / (CHAR_EM * LABEL_FONT)))
    rows: list[list[tuple[str, float]]] = []
    used = room
    for t in texts:
        if len(t) > most:
            t = t[: most - 1] + "…"
        w = text_width(t, LABEL_FONT) + 2 * LABEL_PAD
        if rows and used + ROW_GAP + w <= room:
            rows[-1].append((t, w))
            used += ROW_GAP + w
        else:
            rows.append([(t, w)])
            used = w
    return rows


def _starts(chains: Sequence[list[str]], x: Mapping[str, float],
            width: Mapping[str, float]) -> dict[int, float]:
    """Where each edge leaves its upper box: spread along the box's bottom in the order of
    where the edges go, so they do not cross as they leave."""
    by_box: dict[str, list[int]] = {}
    for n, chain in enumerate(chains):
        by_box.setdefault(chain[0], []).append(n)
    out = {}
    for box, ns in by_box.items():
        ns.sort(key=lambda n: x[chains[n][1]] + width[chains[n][1]] / 2)
        for j, n in enumerate(ns):
            out[n] = x[box] + width[box] * (j + 1) / (len(ns) + 1)
    return out


def overlaps(placed: Layout) -> list[str]:
    """Every overlap of the layout: two boxes, two labels, or a label and a box; none by
    construction (`layout`), checked by the tests on the geometry emitted."""
    rects = [(f"box {b}", r) for b, r in placed.boxes.items() if r.h > 0]
    rects += [(f"label {lb.text!r} of {lb.lower}", lb.rect) for lb in placed.labels]
    out = []
    ordered = sorted(rects, key=lambda nr: nr[1].x)
    for i, (a, ra) in enumerate(ordered):
        for b, rb in ordered[i + 1:]:
            if rb.x >= ra.x + ra.w:
                break
            if ra.meets(rb):
                out.append(f"{a} overlaps {b}")
    return out


def short_names(full: Mapping[str, str], width: int, tags: Mapping[str, str]) -> dict[str, str]:
    """Names of at most ``width`` characters, distinct for distinct items, each recognisable as
    its full name (shown in full on hover).

    A name that fits is kept. A longer one keeps its start and its end around "…". Long names
    that start alike (a family) and would be cut into the same names (they differ in the
    middle, where the cut falls) all keep a short start and the part from just before where
    the family's names begin to differ. Items whose full names are equal (two batches of one
    name) are told apart by ``tags`` (``name #3f9c0a``), as is any name still not distinct.

    Args:
        full: ``{item id: full name}``.
        width: the most characters a name may have (at least 12).
        tags: ``{item id: short tag}``, distinct (the shortest distinct digest prefixes).
    """
    width = max(width, 12)
    count: dict[str, int] = {}
    for name in full.values():
        count[name] = count.get(name, 0) + 1
    out = {item: _tagged(name, tags[item], width) if count[name] > 1 else _shorten(name, width)
           for item, name in full.items()}
    origin_cut = {item: cut for item, name in full.items()
                  if count[name] == 1 and (cut := _qualified_cut(name, width)) is not None}
    out |= origin_cut
    families: dict[str, list[str]] = {}
    for item, name in full.items():
        if count[name] == 1 and len(name) > width and item not in origin_cut:
            families.setdefault(out[item].split("…", 1)[0], []).append(item)
    for items in families.values():
        if len({out[i] for i in items}) < len(items):
            names = [full[i] for i in items]
            differ = _common_prefix(min(names), max(names))  # where the family's names part
            for item in items:
                out[item] = _around(full[item], differ, width)
    for items in _clashes(out):
        for item in items:
            out[item] = _tagged(full[item], tags[item], width)
    return out


_LOG_KEY = frozenset("0123456789abcdef")


def _qualified_cut(name: str, width: int) -> str | None:
    """An imported record's origin-qualified name (``ORIGIN+KEYHASH+NAME@VERSION``, out49)
    longer than ``width``, cut in its origin: ``vendor.ex…+f1848b3f+grid@1``. The name and
    version are kept (cut as `_shorten` cuts, past 16 characters) and so is ``KEYHASH``,
    which tells two logs of one origin name apart; cut at a fixed width, the first
    characters of the origin were all that was left of the log (out50). None: not such a
    name (signed names hold no ``+``: `ledger.names`), or it fits."""
    parts = name.split("+")
    if len(name) <= width or len(parts) != 3 or len(parts[1]) != 8 or set(parts[1]) - _LOG_KEY:
        return None
    origin, keyhash, ref = parts
    ref = _shorten(ref, min(len(ref), width - 12))  # (room for "…+KEYHASH+": 11 characters)
    head = width - 11 - len(ref)  # what is left of the origin's start
    return f"{origin[:head]}…+{keyhash}+{ref}"


def _clashes(names: Mapping[str, str]) -> list[list[str]]:
    by: dict[str, list[str]] = {}
    for item, name in names.items():
        by.setdefault(name, []).append(item)
    return [items for items in by.values() if len(items) > 1]


def _shorten(name: str, width: int) -> str:
    """``name`` in ``width`` characters: its start, "…" and its end (the end holds the version,
    and the numbers that tell a series apart, so it gets the larger part)."""
    if len(name) <= width:
        return name
    head = (width - 1) * 2 // 5
    return name[:head] + "…" + name[len(name) - (width - 1 - head):]


def _around(name: str, differ: int, width: int) -> str:
    """``name`` in ``width`` characters around its character at ``differ``: a short start,
    "…", the part from a little before ``differ`` (to the end, or cut with "…")."""
    head = max(4, width // 4)
    room = width - head - 1  # characters after "head…"
    if len(name) - differ <= room:
        return name[:head] + "…" + name[len(name) - room:]
    start = max(head, differ - (room - 1) // 3)
    return name[:head] + "…" + name[start:start + room - 1] + "…"


def _tagged(name: str, tag: str, width: int) -> str:
    """``name #tag`` in ``width`` characters (the name cut to make room)."""
    suffix = f" #{tag}"
    return _shorten(name, width - len(suffix)) + suffix


def _common_prefix(a: str, b: str) -> int:
    n = 0
    for ca, cb in zip(a, b, strict=False):
        if ca != cb:
            break
        n += 1
    return n
