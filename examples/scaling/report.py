#!/usr/bin/env python3
"""Tables and plots of a scaling sweep (examples/scaling/sweep.sh), and the
planner's predictions against the measurements.

    python3 examples/scaling/report.py DIR [--skip K] [--plan PLAN_JSON] [--no-plots]

DIR holds runs/NAME/ (one `train` run folder per layout: config.json,
metrics.jsonl) and, when sweep.sh made it, sweep_status.tsv (the layouts in
order, with each run's exit code). Writes DIR/results.csv, DIR/results.md,
DIR/mfu_step_time.png, DIR/step_breakdown.png, DIR/memory.png and, with a
plan, DIR/plan_vs_measured.png; prints a short summary. The figures come
from sweep_results.py, the plots from report_plots.py (the only part that
needs matplotlib: where this Python lacks it the script re-executes itself
under /usr/bin/python3 if that one has it, examples/plot_python.py, else it
writes the tables only).

Per layout (its least disturbed pass when sweep.sh --repeat ran it more than
once: the pass with the smallest median step), after dropping the first K step records (warm-up: allocator,
caches, the first collectives' setup), the medians of the step time,
tokens/s, MFU and of the measured waits per axis (launch/run/metrics.h), and:

    exposed communication = wait tp + wait dp
    bubble                = wait pp + wait world
    compute               = step - exposed communication - bubble

Each wait is the mean over ranks of the seconds blocked in that group's
communication (parallel/communicator.h, "Time accounting"). wait dp covers
what exposed_comm_s (rank 0's wait for the gradient reductions) covers, on
every rank and with ZeRO's parameter gathers, so it is used; for logs without
the wait fields, exposed_comm_s stands in. wait world is the wait at the
step's loss and gradient-norm sums: with pp > 1 the later stages idle there
while the first stage finishes its last backward, the tail of the pipeline
bubble (without pp it is load imbalance, usually a few ms). The parts are
medians taken one by one, and compute is what is left, so the three add up
to the median step.

The plan (the planner's `plan --json --all`: a JSON array of objects with
tp, pp, dp, micro_batch, zero, recompute, schedule, sequence_parallel,
step_seconds, tflops_per_device, mfu, memory_bytes_per_device, fits) is
matched to the layouts on those eight keys.
"""
import argparse
import csv
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
# Its sibling modules, and examples/plot_python.py, however this file is loaded.
sys.path[:0] = [p for p in (HERE, os.path.dirname(HERE)) if p not in sys.path]

import plot_python  # noqa: E402  (examples/plot_python.py: the one way to find a Python with matplotlib)
from report_plots import write_plots  # noqa: E402,F401  (the pictures; the only part needing matplotlib)
from sweep_results import LAYOUT_KEYS, MEMORY_PARTS, apply_plan, collect, spearman  # noqa: E402,F401

# ---- writing ---------------------------------------------------------------------------

def fmt(value, spec, scale=None, suffix=""):
    if value is None:
        return ""
    return format(value * scale if scale is not None else value, spec) + suffix


def fmt_bytes(b):
    if b is None:
        return ""
    for unit, size in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if b >= size:
            return "%.2f %s" % (b / size, unit)
    return "%d B" % b


CSV_COLUMNS = (["layout", "status", "exit_code", "wall_s", "run", "passes", "step_s_passes"] + list(LAYOUT_KEYS) +
               ["steps_used", "step_s", "step_iqr_s", "tokens_per_s", "mfu", "compute_s", "exposed_comm_s", "bubble_s",
                "wait_tp_s", "wait_dp_s", "wait_pp_s", "wait_world_s", "exposed_dp_rank0_s",
                "bytes_tp", "bytes_dp", "bytes_pp", "peak_memory_bytes"] +
               ["planned_" + p for p in MEMORY_PARTS + ("total",)] +
               ["allocated_" + p for p in MEMORY_PARTS + ("total",)])
PLAN_COLUMNS = ["predicted_step_s", "predicted_mfu", "predicted_memory_bytes", "predicted_fits",
                "memory_equals_planned", "memory_equals_allocated"]


def write_csv(path, rows, with_plan):
    columns = CSV_COLUMNS + (PLAN_COLUMNS if with_plan else [])
    with open(path, "w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(columns)
        for row in rows:
            memory = row.get("memory") or {}
            values = []
            for c in columns:
                if c.startswith("planned_") or c.startswith("allocated_"):
                    kind, part = c.split("_", 1)
                    v = (memory.get(kind) or {}).get(part)
                else:
                    v = row.get(c)
                values.append("" if v is None else ("%.6g" % v if isinstance(v, float) else v))
            writer.writerow(values)


def layout_label(row):
    parts = ["tp%d" % row["tp"] if row["tp"] else "", "pp%d" % row["pp"] if row["pp"] else "",
             "dp%d" % row["dp"] if row["dp"] else ""]
    return " ".join(p for p in parts if p)


def write_markdown(path, rows, skip, plan_summary):
    header = ["layout", "grid", "mb", "zero", "recompute", "schedule", "sp", "step", "tokens/s", "MFU",
              "compute", "exposed comm", "bubble", "memory/rank (planned)", "memory/rank (allocated)",
              "bytes tp", "bytes dp", "bytes pp"]
    if plan_summary:
        header += ["predicted step", "predicted memory"]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for r in rows:
        memory = r.get("memory") or {}
        ok = r["status"] == "ok"
        cells = [r["layout"] if ok else "%s (%s)" % (r["layout"], r["status"]), layout_label(r),
                 fmt(r["micro_batch"], "d"), fmt(r["zero"], "d"), r["recompute"] or "", r["schedule"] or "",
                 fmt(r["sequence_parallel"], "d"),
                 fmt(r.get("step_s"), ".1f", 1e3, " ms"), fmt(r.get("tokens_per_s"), ",.0f"),
                 fmt(r.get("mfu"), ".1f", 100, "%"),
                 fmt(r.get("compute_s"), ".1f", 1e3, " ms"), fmt(r.get("exposed_comm_s"), ".1f", 1e3, " ms"),
                 fmt(r.get("bubble_s"), ".1f", 1e3, " ms"),
                 fmt_bytes((memory.get("planned") or {}).get("total")),
                 fmt_bytes((memory.get("allocated") or {}).get("total")),
                 fmt_bytes(r.get("bytes_tp")), fmt_bytes(r.get("bytes_dp")), fmt_bytes(r.get("bytes_pp"))]
        if plan_summary:
            cells += [fmt(r.get("predicted_step_s"), ".1f", 1e3, " ms"), fmt_bytes(r.get("predicted_memory_bytes"))]
        lines.append("| " + " | ".join(cells) + " |")
    notes = ["",
             "Medians over the steps after the first %d. compute = step - exposed comm - bubble; exposed comm = "
             "blocked in tensor-parallel and data-parallel communication; bubble = blocked in pipeline transfers "
             "and at the step's world-wide sums (examples/scaling/README.md). Bytes: sent per step, all ranks "
             "together, as a ring sends them. Memory: the largest rank's." % skip]
    if any(r.get("passes", 1) > 1 for r in rows):
        notes[-1] += (" Layouts run more than once (sweep.sh --repeat): the pass with the smallest median step "
                      "(results.csv: run, step_s_passes).")
    if plan_summary:
        notes += [""] + ["- " + line for line in plan_text(plan_summary).split("\n")]
    with open(path, "w") as f:
        f.write("\n".join(lines + notes) + "\n")


def plan_text(s):
    lines = ["Plan %s: %d entries, %d layouts matched, %d compared." % (s["plan"], s["plan_entries"], s["matched"],
                                                                          s["compared"])]
    rho = s.get("spearman_rho")
    lines.append("Spearman's rho (predicted vs measured step time): %s" % ("n/a" if rho is None else "%.3f" % rho))
    if "top_pick" in s:
        lines.append("Planner's pick %s measured %.1f ms; best measured %s %.1f ms: %s" % (
            s["top_pick"], s["top_pick_measured_s"] * 1e3, s["best"], s["best_measured_s"] * 1e3,
            "within 10%" if s["top_pick_within_10pct"] else "NOT within 10%"))
    for kind in ("planned", "allocated"):
        why = []
        if s["memory_mismatches_" + kind]:
            why.append("differs: " + ", ".join(s["memory_mismatches_" + kind]))
        if s["memory_missing_" + kind]:
            why.append("no figure to compare: " + ", ".join(s["memory_missing_" + kind]))
        lines.append("Predicted memory equals the %s total for every layout: %s%s" % (
            kind, "yes" if s["memory_equals_" + kind] else "no", " (%s)" % "; ".join(why) if why else ""))
    return "\n".join(lines)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("out_dir", help="the sweep's folder (runs/NAME/metrics.jsonl, sweep_status.tsv)")
    parser.add_argument("--skip", type=int, default=3, help="leading steps left out as warm-up (default 3)")
    parser.add_argument("--plan", help="the planner's `plan --json --all` output (default: OUT_DIR/plan.json if any)")
    parser.add_argument("--no-plots", action="store_true",
                        help="the tables only: for a machine without matplotlib (sweep.sh --no-plots)")
    args = parser.parse_args(argv)
    if not args.no_plots:
        # Without matplotlib here, go on under the Python that has it (this
        # call does not return then); with none anywhere, the tables only.
        plot_python.ensure("report.py", required=False)
    plan = args.plan
    if plan is None and os.path.exists(os.path.join(args.out_dir, "plan.json")):
        plan = os.path.join(args.out_dir, "plan.json")

    rows = collect(args.out_dir, args.skip)
    if not rows:
        raise SystemExit("report.py: no runs in %s" % os.path.join(args.out_dir, "runs"))
    plan_summary = apply_plan(rows, plan) if plan else None
    write_csv(os.path.join(args.out_dir, "results.csv"), rows, plan_summary is not None)
    write_markdown(os.path.join(args.out_dir, "results.md"), rows, args.skip, plan_summary)
    if not args.no_plots:
        write_plots(args.out_dir, rows, plan_summary)

    ok = [r for r in rows if r["status"] == "ok"]
    print("report: %d layouts, %d measured, %d failed or empty; %s in %s" % (
        len(rows), len(ok), len(rows) - len(ok),
        "results.md and results.csv" if args.no_plots else "results.md, results.csv and plots", args.out_dir))
    for r in rows:
        if r["status"] != "ok":
            print("  %s: %s" % (r["layout"], r["status"]))
    if ok:
        best = min(ok, key=lambda r: r["step_s"])
        print("fastest: %s, %.1f ms a step, %.0f tokens/s, MFU %.1f%%" % (
            best["layout"], best["step_s"] * 1e3, best.get("tokens_per_s") or 0, (best.get("mfu") or 0) * 100))
    if plan_summary:
        print(plan_text(plan_summary))
    return 0


if __name__ == "__main__":
    sys.exit(main())
