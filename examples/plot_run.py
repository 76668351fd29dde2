#!/usr/bin/env python3
"""Plot training runs: training and validation loss in one panel, then tokens/s,
MFU, gradient norm and learning rate per step, several runs overlaid, with
every restart and resume marked.

    examples/plot_run.py runs/a runs/b/metrics.jsonl [--out runs.png] [--label A --label B]

RUN is a run folder (its metrics.jsonl, see launch/run/run_folder.h) or a metrics
JSONL file (--log-file). Step records carry "step" and "loss", and "val_loss"
on steps that validated; validation-only records carry "step" and "val_loss";
other event records ("event": ...) are skipped. A step written twice (a run
resumed from an older checkpoint keeps the abandoned attempt's records before
its resume marker) keeps its last record. Values written as null (a
non-finite, skipped step) leave a gap.

Restarts are drawn as dotted vertical lines in the run's colour at the step
the run went on from: a {"event": "resume", "step": S} record after some
steps were logged (a resume at the very start, --resume auto with nothing
saved yet, is not one), and a step record whose step is not past the one
before it with no resume record between (logs of earlier runs appended to
the same file, files written before resume records existed).

Without --out the PNG goes beside the first RUN: RUN/plot.png for a run
folder, FILE.png (its .jsonl dropped) for a metrics file. So the example in
the README writes into the run, never over a tracked picture.

Needs matplotlib: when this Python lacks it, the script re-executes itself
under /usr/bin/python3 (where launch/setup_env.sh installs
python3-matplotlib) if that one has it, else exits 1 with one line saying
what to install (examples/plot_python.py). Draws with the Agg backend, no
display needed.
"""
import argparse
import json
import os
import sys

import plot_python  # examples/plot_python.py: the one way to find a Python with matplotlib

# (series, record keys tried in order, scale applied to the values)
SERIES = [
    ("training loss", ("loss",), 1.0),
    ("validation loss", ("val_loss",), 1.0),
    ("tokens / s", ("tokens_per_s", "tokens_per_second"), 1.0),
    ("MFU (%)", ("mfu",), 100.0),
    ("gradient norm", ("grad_norm",), 1.0),
    ("learning rate", ("lr",), 1.0),
]
# (panel title, the series it overlays); the first panel spans the top row.
PANELS = [
    ("loss", ("training loss", "validation loss")),
    ("tokens / s", ("tokens / s",)),
    ("MFU (%)", ("MFU (%)",)),
    ("gradient norm", ("gradient norm",)),
    ("learning rate", ("learning rate",)),
]
RESTART_GID = "restart"  # gid "restart I" on run I's restart lines and notes, for whoever inspects the figure


def metrics_path(run):
    if os.path.isdir(run):
        path = os.path.join(run, "metrics.jsonl")
        if not os.path.exists(path):
            sys.exit(f"plot_run.py: run folder '{run}' has no metrics.jsonl")
        return path
    if not os.path.exists(run):
        sys.exit(f"plot_run.py: '{run}' is neither a run folder nor a metrics file")
    return run


def read_run(path):
    """({series: ([steps], [values])}, [(step, kind)]) from one metrics file.

    kind is "resume" (a resume record) or "restart" (steps going back with no
    resume record before them); step is where the run went on from."""
    by_step = {}
    restarts = []
    last_step = None    # the last step record's step
    resumed = False     # a resume record since that step record
    with open(path) as f:
        for number, line in enumerate(f, 1):
            line = line.strip()
            if not line:
                continue
            try:
                record = json.loads(line)
            except json.JSONDecodeError:
                # A run killed mid-write may leave a partial last line.
                print(f"plot_run.py: {path}:{number}: not JSON, skipped", file=sys.stderr)
                continue
            if not isinstance(record, dict):
                continue
            if record.get("event") == "resume":
                step = record.get("step")
                # Before any step, a resume marks no restart: --resume auto's
                # fresh start, or a run that continues another's checkpoint.
                if last_step is not None and isinstance(step, (int, float)):
                    restarts.append((step, "resume"))
                    resumed = True
                continue
            if "event" in record or "step" not in record:
                continue
            step = record["step"]
            if "loss" in record:  # a step record, not a validation-only one
                if last_step is not None and step <= last_step and not resumed:
                    restarts.append((step - 1, "restart"))
                last_step, resumed = step, False
            by_step.setdefault(step, {}).update(record)
    series = {}
    for name, keys, scale in SERIES:
        steps, values = [], []
        for step in sorted(by_step):
            record = by_step[step]
            value = next((record[k] for k in keys if k in record), None)
            if isinstance(value, (int, float)):
                steps.append(step)
                values.append(value * scale)
        series[name] = (steps, values)
    return series, restarts


def read_series(path):
    """{series: ([steps], [values])} from one metrics file."""
    return read_run(path)[0]


def default_label(run):
    path = os.path.normpath(run)
    if os.path.basename(path) == "metrics.jsonl":
        path = os.path.dirname(path) or path
    return os.path.basename(path) or path


def default_out(run):
    """Beside the run: RUN/plot.png for a folder, FILE.png for a metrics file."""
    if os.path.isdir(run):
        return os.path.join(run, "plot.png")
    stem = run[:-len(".jsonl")] if run.endswith(".jsonl") else run
    return stem + ".png"


def plot(runs, labels, out, title=None):
    """Writes the PNG; returns what it drew, read back from the figure's artists:
    {"panels": {title: [curve labels]}, "restart_lines": {title: count},
     "restarts": {run label: [(step, kind)]}}."""
    import matplotlib

    matplotlib.use("Agg")  # files only, no display
    import matplotlib.pyplot as plt

    fig = plt.figure(figsize=(11, 10), constrained_layout=True)
    grid = fig.add_gridspec(3, 2)
    axes = [fig.add_subplot(grid[0, :])] + [fig.add_subplot(grid[r, c]) for r in (1, 2) for c in (0, 1)]
    notes = 0  # restart notes written, over all runs: each a row lower than the last, three rows round
    for i, (run, label) in enumerate(zip(runs, labels)):
        color = f"C{i % 10}"
        series, restarts = read_run(metrics_path(run))
        for ax, (_, names) in zip(axes, PANELS):
            for name in names:
                steps, values = series[name]
                if not steps:
                    continue
                validation = name == "validation loss"
                marker = "o" if validation or len(steps) < 30 else None
                ax.plot(steps, values, color=color, marker=marker, markersize=3, linestyle="--" if validation else "-",
                        label=f"{label}, {name}" if len(names) > 1 else label)
            for n, (step, kind) in enumerate(restarts):
                # One legend entry per run, in the loss panel, which names each
                # line's step (staggered downwards, so that nearby ones stay apart).
                ax.axvline(step, color=color, linestyle=":", linewidth=1.2, alpha=0.8, gid=f"{RESTART_GID} {i}",
                           label=f"{label}, restarts" if n == 0 and ax is axes[0] else "_restart")
                if ax is axes[0]:
                    ax.annotate(f"{kind} at {step:g}", (step, 1.0), xycoords=("data", "axes fraction"),
                                xytext=(2, -2 - 10 * (notes % 3)), textcoords="offset points", fontsize=7,
                                color=color, va="top", gid=f"{RESTART_GID} {i}")
                    notes += 1

    def restart_artists(artists, i):
        return [a for a in artists if a.get_gid() == f"{RESTART_GID} {i}"]

    drawn = {"panels": {}, "restart_lines": {}, "restarts": {}}
    for ax, (name, _) in zip(axes, PANELS):
        ax.set_title(name)
        ax.set_xlabel("step")
        ax.grid(True, alpha=0.3)
        curves = [line for line in ax.get_lines() if not str(line.get_gid()).startswith(RESTART_GID)]
        drawn["panels"][name] = [line.get_label() for line in curves]
        drawn["restart_lines"][name] = len(ax.get_lines()) - len(curves)
        if curves:
            ax.legend(fontsize=8)
        else:
            ax.text(0.5, 0.5, "no data", ha="center", va="center", transform=ax.transAxes, color="gray")
    for i, label in enumerate(labels):
        lines, texts = restart_artists(axes[0].get_lines(), i), restart_artists(axes[0].texts, i)
        drawn["restarts"][label] = [(line.get_xdata()[0], text.get_text().split(" at ")[0])
                                    for line, text in zip(lines, texts)]
    if title:
        fig.suptitle(title)
    fig.savefig(out, dpi=110)
    plt.close(fig)
    return drawn


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("runs", nargs="+", metavar="RUN", help="run folder or metrics JSONL file")
    parser.add_argument("--out", help="PNG to write (default: beside the first RUN, RUN/plot.png or FILE.png)")
    parser.add_argument("--label", action="append", default=[], help="legend label per RUN, in order (default: its name)")
    parser.add_argument("--title", help="figure title")
    args = parser.parse_args(argv)
    if args.label and len(args.label) != len(args.runs):
        parser.error(f"{len(args.label)} --label for {len(args.runs)} runs: give one per run or none")
    for run in args.runs:
        metrics_path(run)  # a missing run is refused before anything else
    plot_python.ensure("plot_run.py")
    labels = args.label or [default_label(r) for r in args.runs]
    out = args.out or default_out(args.runs[0])
    plot(args.runs, labels, out, args.title)
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
