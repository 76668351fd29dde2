#!/usr/bin/env python3
"""Plot training runs: loss, validation loss, tokens/s, MFU, gradient norm and
learning rate per step, one panel each, several runs overlaid.

    examples/plot_run.py runs/a runs/b/metrics.jsonl --out runs.png [--label A --label B]

RUN is a run folder (its metrics.jsonl, see launch/run/run_folder.h) or a metrics
JSONL file (--log-file). Step records carry "step" and "loss"; validation
records carry "step" and "val_loss"; event records ("event": ...) are
skipped. A step written twice (a resumed run) keeps its last record. Values
written as null (a non-finite, skipped step) leave a gap.

Needs matplotlib (launch/setup_env.sh installs python3-matplotlib for
/usr/bin/python3); draws with the Agg backend, no display needed.
"""
import argparse
import json
import os
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

# (panel title, record keys tried in order, scale applied to the values)
PANELS = [
    ("training loss", ("loss",), 1.0),
    ("validation loss", ("val_loss",), 1.0),
    ("tokens / s", ("tokens_per_s", "tokens_per_second"), 1.0),
    ("MFU (%)", ("mfu",), 100.0),
    ("gradient norm", ("grad_norm",), 1.0),
    ("learning rate", ("lr",), 1.0),
]


def metrics_path(run):
    if os.path.isdir(run):
        path = os.path.join(run, "metrics.jsonl")
        if not os.path.exists(path):
            sys.exit(f"plot_run.py: run folder '{run}' has no metrics.jsonl")
        return path
    if not os.path.exists(run):
        sys.exit(f"plot_run.py: '{run}' is neither a run folder nor a metrics file")
    return run


def read_series(path):
    """{key: ([steps], [values])} from one metrics file."""
    by_step = {}
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
            if "event" in record or "step" not in record:
                continue
            by_step.setdefault(record["step"], {}).update(record)
    series = {}
    for title, keys, scale in PANELS:
        steps, values = [], []
        for step in sorted(by_step):
            record = by_step[step]
            value = next((record[k] for k in keys if k in record), None)
            if isinstance(value, (int, float)):
                steps.append(step)
                values.append(value * scale)
        series[title] = (steps, values)
    return series


def default_label(run):
    path = os.path.normpath(run)
    if os.path.basename(path) == "metrics.jsonl":
        path = os.path.dirname(path) or path
    return os.path.basename(path) or path


def plot(runs, labels, out, title=None):
    fig, axes = plt.subplots(3, 2, figsize=(11, 10), constrained_layout=True)
    for run, label in zip(runs, labels):
        series = read_series(metrics_path(run))
        for ax, (name, _, _) in zip(axes.flat, PANELS):
            steps, values = series[name]
            if steps:
                marker = "o" if name == "validation loss" or len(steps) < 30 else None
                ax.plot(steps, values, label=label, marker=marker, markersize=3)
    for ax, (name, _, _) in zip(axes.flat, PANELS):
        ax.set_title(name)
        ax.set_xlabel("step")
        ax.grid(True, alpha=0.3)
        if ax.lines:
            ax.legend(fontsize=8)
        else:
            ax.text(0.5, 0.5, "no data", ha="center", va="center", transform=ax.transAxes, color="gray")
    if title:
        fig.suptitle(title)
    fig.savefig(out, dpi=110)
    plt.close(fig)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("runs", nargs="+", metavar="RUN", help="run folder or metrics JSONL file")
    parser.add_argument("--out", default="run.png", help="PNG to write (default run.png)")
    parser.add_argument("--label", action="append", default=[], help="legend label per RUN, in order (default: its name)")
    parser.add_argument("--title", help="figure title")
    args = parser.parse_args(argv)
    if args.label and len(args.label) != len(args.runs):
        parser.error(f"{len(args.label)} --label for {len(args.runs)} runs: give one per run or none")
    labels = args.label or [default_label(r) for r in args.runs]
    plot(args.runs, labels, args.out, args.title)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
