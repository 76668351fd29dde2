"""The plots of examples/scaling/report.py: mfu_step_time.png,
step_breakdown.png, memory.png and, with a plan, plan_vs_measured.png, from
the rows of sweep_results.collect() (and apply_plan()).

Kept apart from the figures (sweep_results.py) and the tables (report.py)
because only this needs matplotlib: without it report.py still writes the
tables. Two details of the drawing exist to keep every label readable:

- Stacked bars get their headroom set by hand. Each segment's bottom is a
  sticky edge for matplotlib's autoscaling, so an empty top segment (a
  layout without staging memory, or without bubble) pins the y-limit to the
  tallest bar's top: it touched the frame and the legend sat on it. The
  limit is 1.25 x the tallest bar, and the legend goes in that band.
- The labels of plan_vs_measured.png are placed one by one, in the rows'
  order, on rings of growing radius around their point (eight directions
  each), at the first spot that stays inside the axes and covers no earlier
  label, no other point or its surroundings (a label close to another point
  reads as that point's), not the legend and not the line predicted =
  measured; one away from its point gets a thin grey line to it, which may
  not cross a label or a point either. Where no spot is free, the one that
  covers least. Layouts with nearly the same measured and predicted times
  (the ZeRO stages, 1F1B against AFAB) sit on top of each other, and the
  fixed offset of before printed their names over each other.
"""
import os
import sys

from sweep_results import MEMORY_PARTS

HEADROOM = 1.25  # y-limit of a stacked bar plot over its tallest bar: the legend's band
LABEL_RADII = (5, 12, 22, 34, 48, 64)  # points from a point to its label, tried in order
LABEL_DIRECTIONS = ((1, 1), (1, -1), (-1, 1), (-1, -1), (1, 0), (-1, 0), (0, 1), (0, -1))
MARKER_HALF = 3.5  # points: half the side of a scatter point's default marker, with a margin
OTHER_MARKER_HALF = 7  # points: how close a label may come to another layout's point (closer reads as its label)


def mib(b):
    return None if b is None else b / 2**20


def stacked_headroom(ax, tops, ncol):
    """Room above the tallest stacked bar, and the legend in it (module docstring)."""
    top = max(tops, default=0.0)
    if top > 0:
        ax.set_ylim(0, top * HEADROOM)
    ax.legend(fontsize=8, loc="upper center", ncol=ncol, frameon=False)


def overlap(a, b):
    """The area two display boxes (x0, y0, x1, y1) share."""
    w = min(a[2], b[2]) - max(a[0], b[0])
    h = min(a[3], b[3]) - max(a[1], b[1])
    return w * h if w > 0 and h > 0 else 0.0


def area(box):
    return (box[2] - box[0]) * (box[3] - box[1])


def crosses(segment, box):
    """Whether a straight line between two display points passes through a
    box (Liang and Barsky's clipping: the part of the line inside each of the
    box's four half-planes, intersected)."""
    (x0, y0), (x1, y1) = segment
    dx, dy = x1 - x0, y1 - y0
    t0, t1 = 0.0, 1.0
    for p, q in ((-dx, x0 - box[0]), (dx, box[2] - x0), (-dy, y0 - box[1]), (dy, box[3] - y0)):
        if p == 0:
            if q < 0:
                return False  # parallel to this edge and outside it
        elif p < 0:
            t0 = max(t0, q / p)
        else:
            t1 = min(t1, q / p)
    return t0 <= t1


def place_labels(ax, points, labels, fontsize=7, lines=()):
    """Annotates each (x, y) in data coordinates with its label at the first
    free spot (module docstring); where none is free, at the spot overlapping
    least. `lines`: ((x0, y0), (x1, y1)) segments in data coordinates that
    labels should not cover either. Call it once the axes' limits and
    position are final. Works in display pixels, boxes as (x0, y0, x1, y1)."""
    fig = ax.figure
    renderer = fig.canvas.get_renderer()
    px = fig.dpi / 72.0  # display pixels per point
    frame = tuple(ax.get_window_extent(renderer).extents)
    centers = [tuple(ax.transData.transform(p)) for p in points]
    m, far = MARKER_HALF * px, OTHER_MARKER_HALF * px
    points_near = [(cx - m, cy - m, cx + m, cy + m) for cx, cy in centers]  # each point, for its own label
    taken = [(cx - far, cy - far, cx + far, cy + far) for cx, cy in centers]  # the points, then the labels placed
    if ax.get_legend() is not None:
        taken.append(tuple(ax.get_legend().get_window_extent(renderer).extents))
    # The lines drawn so far (from a label's middle to its point), and the caller's.
    leaders = [tuple(tuple(ax.transData.transform(p)) for p in line) for line in lines]
    for index, ((cx, cy), point, label) in enumerate(zip(centers, points, labels)):
        probe = ax.text(0, 0, label, fontsize=fontsize)
        size = probe.get_window_extent(renderer)
        probe.remove()
        w, h = size.width + 2 * px, size.height + 2 * px  # a point of space all round
        best = None
        for radius in LABEL_RADII:
            for dx, dy in LABEL_DIRECTIONS:
                # The text's corner (or edge middle) nearest the point sits `radius` points from it.
                x0 = cx + dx * radius * px - (w - px if dx < 0 else w / 2 if dx == 0 else px)
                y0 = cy + dy * radius * px - (h - px if dy < 0 else h / 2 if dy == 0 else px)
                box = (x0, y0, x0 + w, y0 + h)
                others = [t for i, t in enumerate(taken) if i != index]
                cost = overlap(box, points_near[index]) + sum(overlap(box, t) for t in others)
                cost += 10 * (area(box) - overlap(box, frame))  # what sticks out of the axes
                # A line through a label hides it as much as a label on it.
                cost += w * h / 4 * sum(crosses(line, box) for line in leaders)
                leader = ((x0 + w / 2, y0 + h / 2), (cx, cy)) if radius > LABEL_RADII[0] else None
                if leader is not None:  # nor may a line run through a label or another point
                    cost += w * h / 4 * sum(crosses(leader, t) for t in others)
                if best is None or cost < best[0]:
                    best = (cost, radius, dx, dy, box, leader)
                if cost == 0:
                    break
            if best[0] == 0:
                break
        _, radius, dx, dy, box, line = best
        ha = "right" if dx < 0 else "center" if dx == 0 else "left"
        va = "top" if dy < 0 else "center" if dy == 0 else "bottom"
        thin = dict(arrowstyle="-", color="gray", linewidth=0.5, shrinkA=0, shrinkB=3)
        ax.annotate(label, point, xytext=(dx * radius, dy * radius), textcoords="offset points", fontsize=fontsize,
                    ha=ha, va=va, arrowprops=thin if line is not None else None)
        taken.append((box[0] + px, box[1] + px, box[2] - px, box[3] - px))  # the text itself: a point apart is enough
        if line is not None:
            leaders.append(line)


def write_plots(out_dir, rows, plan_summary):
    try:
        import matplotlib
    except ImportError:
        import plot_python  # examples/plot_python.py, on the path report.py set

        print(plot_python.missing_message("report") + "; no plots written", file=sys.stderr)
        return
    matplotlib.use("Agg")  # files only, no display
    import matplotlib.pyplot as plt

    ok = [r for r in rows if r["status"] == "ok"]
    names = [r["layout"] for r in ok]
    x = list(range(len(ok)))
    width = max(6.0, 0.55 * len(ok) + 2)

    def finish(fig, ax, name):
        ax.set_xticks(x)
        ax.set_xticklabels(names, rotation=45, ha="right", fontsize=8)
        fig.tight_layout()
        fig.savefig(os.path.join(out_dir, name), dpi=120)
        plt.close(fig)

    # MFU and step time per layout.
    fig, (ax_t, ax_m) = plt.subplots(2, 1, figsize=(width, 6.5), sharex=True)
    ax_t.bar(x, [r["step_s"] * 1e3 for r in ok], color="tab:blue")
    ax_t.set_ylabel("step time (ms)")
    ax_t.set_title("Step time and MFU per layout (medians)")
    ax_m.bar(x, [(r.get("mfu") or 0) * 100 for r in ok], color="tab:green")
    ax_m.set_ylabel("MFU (%)")
    finish(fig, ax_m, "mfu_step_time.png")

    # Where the step goes.
    fig, ax = plt.subplots(figsize=(width, 4.5))
    bottom = [0.0] * len(ok)
    for key, label, color in (("compute_s", "compute", "tab:blue"), ("exposed_comm_s", "exposed communication",
                                                                     "tab:orange"), ("bubble_s", "bubble", "tab:red")):
        values = [max(0.0, (r.get(key) or 0.0) * 1e3) for r in ok]
        ax.bar(x, values, bottom=bottom, label=label, color=color)
        bottom = [b + v for b, v in zip(bottom, values)]
    ax.set_ylabel("ms per step")
    ax.set_title("Step time: compute, exposed communication, pipeline bubble")
    stacked_headroom(ax, bottom, ncol=3)
    finish(fig, ax, "step_breakdown.png")

    # Memory per rank (the planned parts of the largest rank; allocated total as a marker).
    fig, ax = plt.subplots(figsize=(width, 4.5))
    have = [bool((r.get("memory") or {}).get("planned")) for r in ok]
    bottom = [0.0] * len(ok)
    for part, color in zip(MEMORY_PARTS, ("tab:blue", "tab:orange", "tab:green", "tab:red", "tab:purple", "tab:gray")):
        values = [mib(((r.get("memory") or {}).get("planned") or {}).get(part) or 0) for r in ok]
        ax.bar(x, values, bottom=bottom, label=part, color=color)
        bottom = [b + v for b, v in zip(bottom, values)]
    allocated = [(i, mib(((r.get("memory") or {}).get("allocated") or {}).get("total"))) for i, r in enumerate(ok)]
    allocated = [(i, v) for i, v in allocated if v is not None]
    if allocated:
        ax.plot([i for i, _ in allocated], [v for _, v in allocated], "k_", markersize=14, label="allocated total")
    for i, known in enumerate(have):
        if not known:
            ax.text(i, 0, "no memory\nevent", ha="center", va="bottom", fontsize=7, rotation=90)
    ax.set_ylabel("MiB per rank (largest rank)")
    ax.set_title("Planned memory per rank")
    stacked_headroom(ax, bottom + [v for _, v in allocated], ncol=3)
    finish(fig, ax, "memory.png")

    if plan_summary is None:
        return
    compared = [r for r in ok if r.get("predicted_step_s") is not None]
    fig, ax = plt.subplots(figsize=(6, 6))
    measured = [r["step_s"] * 1e3 for r in compared]
    predicted = [r["predicted_step_s"] * 1e3 for r in compared]
    ax.scatter(measured, predicted)
    ax.margins(0.12)  # room for the labels of the points at the edges
    if compared:
        lo, hi = min(measured + predicted), max(measured + predicted)
        ax.plot([lo, hi], [lo, hi], "k--", linewidth=1, label="predicted = measured")
        ax.legend(fontsize=8, loc="upper left")  # fixed, as the labels avoid it
    rho = plan_summary.get("spearman_rho")
    ax.set_title("Planner vs measurement (Spearman rho %s)" % ("n/a" if rho is None else "%.2f" % rho))
    ax.set_xlabel("measured step time (ms)")
    ax.set_ylabel("predicted step time (ms)")
    fig.tight_layout()
    # The labels last: their places are worked out where the points finally are.
    diagonal = [((lo, lo), (hi, hi))] if compared else []
    place_labels(ax, list(zip(measured, predicted)), [r["layout"] for r in compared], lines=diagonal)
    fig.savefig(os.path.join(out_dir, "plan_vs_measured.png"), dpi=120)
    plt.close(fig)
