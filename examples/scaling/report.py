#!/usr/bin/env python3
"""Tables and plots of a scaling sweep (examples/scaling/sweep.sh), and the
planner's predictions against the measurements.

    python3 examples/scaling/report.py DIR [--skip K] [--plan PLAN_JSON]

DIR holds runs/NAME/ (one `train` run folder per layout: config.json,
metrics.jsonl) and, when sweep.sh made it, sweep_status.tsv (the layouts in
order, with each run's exit code). Writes DIR/results.csv, DIR/results.md,
DIR/mfu_step_time.png, DIR/step_breakdown.png, DIR/memory.png and, with a
plan, DIR/plan_vs_measured.png; prints a short summary.

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
import json
import math
import os
import statistics
import sys

LAYOUT_KEYS = ("tp", "pp", "dp", "micro_batch", "zero", "recompute", "schedule", "sequence_parallel")
# config.json (flag names) -> layout key
CONFIG_KEYS = {"tp": "tp", "pp": "pp", "dp": "dp", "micro-batch": "micro_batch", "zero": "zero",
               "recompute": "recompute", "pipeline-schedule": "schedule", "sequence-parallel": "sequence_parallel"}
MEMORY_PARTS = ("weights", "grads", "optimizer", "activations", "staging")


def normalize_layout(values):
    """The eight layout keys in one spelling: ints, lower-case names, 0/1."""
    out = {}
    for key in LAYOUT_KEYS:
        value = values.get(key)
        if value is None or value == "":
            out[key] = None
        elif key in ("recompute", "schedule"):
            out[key] = str(value).strip().lower()
        elif key == "sequence_parallel":
            if isinstance(value, str):
                out[key] = 1 if value.strip().lower() in ("1", "true", "yes", "on") else 0
            else:
                out[key] = 1 if value else 0
        else:
            out[key] = int(value)
    # The planner lists each layout in one canonical form: ZeRO means
    # nothing with one replica, the schedule nothing with one stage,
    # sequence parallelism nothing without tensor parallelism.
    if out.get("dp") == 1:
        out["zero"] = 0
    if out.get("pp") == 1:
        out["schedule"] = "1f1b"
    if out.get("tp") == 1:
        out["sequence_parallel"] = 0
    return out


def layout_tuple(layout):
    return tuple(layout[k] for k in LAYOUT_KEYS)


# ---- reading a sweep ------------------------------------------------------------------

def read_status(out_dir):
    """[(layout, run folder, exit_code, wall_s, {key: value})] in the order run, or None."""
    path = os.path.join(out_dir, "sweep_status.tsv")
    if not os.path.exists(path):
        return None
    rows = []
    with open(path, newline="") as f:
        for row in csv.DictReader(f, delimiter="\t"):
            keys = dict(kv.split("=", 1) for kv in (row.get("layout_keys") or "").split() if "=" in kv)
            rows.append((row["layout"], row.get("run") or row["layout"], int(row["exit_code"]),
                         float(row["wall_s"] or "nan"), keys))
    return rows


def read_jsonl(path):
    """(step records, events) of a metrics file; a line cut short is skipped."""
    steps, events = {}, []
    with open(path) as f:
        for line in f:
            try:
                record = json.loads(line)
            except ValueError:
                continue
            if not isinstance(record, dict):
                continue
            if "event" in record:
                events.append(record)
            elif "step" in record and "step_time_s" in record:  # not validation-only records
                steps[record["step"]] = record  # a repeated step (a restart): the later one
    return [steps[k] for k in sorted(steps)], events


def median_of(records, get):
    values = []
    for r in records:
        try:
            v = get(r)
        except (KeyError, TypeError):
            continue
        if v is not None and isinstance(v, (int, float)) and math.isfinite(v):
            values.append(float(v))
    return statistics.median(values) if values else None


def memory_of(events):
    """{'planned': {part: bytes}, 'allocated': {...}}, largest over the memory events (ranks)."""
    result = {}
    for event in events:
        if event.get("event") != "memory":
            continue
        for kind in ("planned", "allocated"):
            parts = event.get(kind)
            if not isinstance(parts, dict):
                continue
            into = result.setdefault(kind, {})
            for part, value in parts.items():
                if isinstance(value, (int, float)):
                    into[part] = max(into.get(part, value), value)
    return result


def measure_run(run_dir, skip):
    """The figures of one run folder (None where not measured)."""
    m = {"steps_used": 0}
    metrics = os.path.join(run_dir, "metrics.jsonl")
    if not os.path.exists(metrics):
        return m
    records, events = read_jsonl(metrics)
    used = records[skip:] if len(records) > skip else records[-1:]
    m["steps_used"] = len(used)
    m["step_s"] = median_of(used, lambda r: r["step_time_s"])
    # The spread says how far to trust the median: on a shared machine a few
    # slow steps are common, a wide spread means the whole run was disturbed.
    times = sorted(r["step_time_s"] for r in used if isinstance(r.get("step_time_s"), (int, float)))
    if len(times) >= 2:
        q1, _, q3 = statistics.quantiles(times, n=4)
        m["step_iqr_s"] = q3 - q1
    m["tokens_per_s"] = median_of(used, lambda r: r["tokens_per_s"])
    m["mfu"] = median_of(used, lambda r: r["mfu"])
    for axis in ("tp", "pp", "dp", "world"):
        m["wait_" + axis + "_s"] = median_of(used, lambda r, a=axis: r["wait_seconds_" + a])
    m["exposed_dp_rank0_s"] = median_of(used, lambda r: r["exposed_comm_s"])
    for axis in ("tp", "dp", "pp"):
        m["bytes_" + axis] = median_of(used, lambda r, a=axis: r["comm_bytes"][a])
    m["peak_memory_bytes"] = median_of(used, lambda r: r["peak_memory_bytes"])
    m["memory"] = memory_of(events)

    # The split of the step (module docstring); one rank logs no waits: all compute.
    if m["step_s"] is not None:
        dp = m["wait_dp_s"] if m["wait_dp_s"] is not None else m["exposed_dp_rank0_s"]
        m["exposed_comm_s"] = (m["wait_tp_s"] or 0.0) + (dp or 0.0)
        m["bubble_s"] = (m["wait_pp_s"] or 0.0) + (m["wait_world_s"] or 0.0)
        m["compute_s"] = m["step_s"] - m["exposed_comm_s"] - m["bubble_s"]
    return m


def read_layout_config(run_dir):
    path = os.path.join(run_dir, "config.json")
    if not os.path.exists(path):
        return {}
    with open(path) as f:
        config = json.load(f)
    return {CONFIG_KEYS[k]: v for k, v in config.items() if k in CONFIG_KEYS}


def measure_pass(runs_dir, run, code, wall, keys, skip):
    run_dir = os.path.join(runs_dir, run)
    # The run's resolved configuration wins: it holds the defaults the layout left out.
    row = {"run": run, "exit_code": code, "wall_s": wall, **normalize_layout({**keys, **read_layout_config(run_dir)})}
    row.update(measure_run(run_dir, skip))
    if code is not None and code != 0:
        row["status"] = "failed (exit %d)" % code
    elif row.get("step_s") is None:
        row["status"] = "no steps"
    else:
        row["status"] = "ok"
    return row


def collect(out_dir, skip):
    """One row per layout. Of a layout's passes (sweep.sh --repeat; runs/NAME, runs/NAME@2, ...) the one
    with the smallest median step speaks for it: disturbances on a shared machine only add time."""
    runs_dir = os.path.join(out_dir, "runs")
    status = read_status(out_dir)
    if status is None:  # report.py over folders made some other way: every run folder, by name
        runs = sorted(d for d in os.listdir(runs_dir) if os.path.isdir(os.path.join(runs_dir, d))) \
            if os.path.isdir(runs_dir) else []
        status = [(run.split("@")[0], run, None, None, {}) for run in runs]
    passes = {}  # layout -> its passes, in the order the layouts first ran
    for layout, run, code, wall, keys in status:
        passes.setdefault(layout, []).append(measure_pass(runs_dir, run, code, wall, keys, skip))
    rows = []
    for layout, measured in passes.items():
        ok = [p for p in measured if p["status"] == "ok"]
        row = dict(min(ok, key=lambda p: p["step_s"]) if ok else measured[-1])
        row["layout"] = layout
        row["passes"] = len(measured)
        row["step_s_passes"] = " ".join("%.6g" % p["step_s"] for p in ok)
        rows.append(row)
    return rows


# ---- the plan -------------------------------------------------------------------------

def spearman(xs, ys):
    """Spearman's rank correlation: Pearson's r of the ranks, ties given their average rank."""
    def ranks(values):
        order = sorted(range(len(values)), key=lambda i: values[i])
        r = [0.0] * len(values)
        i = 0
        while i < len(order):
            j = i
            while j + 1 < len(order) and values[order[j + 1]] == values[order[i]]:
                j += 1
            for k in range(i, j + 1):
                r[order[k]] = (i + j) / 2 + 1  # ranks i+1 .. j+1, averaged
            i = j + 1
        return r
    if len(xs) != len(ys) or len(xs) < 2:
        return None
    rx, ry = ranks(xs), ranks(ys)
    mx, my = sum(rx) / len(rx), sum(ry) / len(ry)
    sxy = sum((a - mx) * (b - my) for a, b in zip(rx, ry))
    sxx = sum((a - mx) ** 2 for a in rx)
    syy = sum((b - my) ** 2 for b in ry)
    return sxy / math.sqrt(sxx * syy) if sxx > 0 and syy > 0 else None


def apply_plan(rows, plan_path):
    """Adds the predictions to the rows; returns the comparison's summary."""
    with open(plan_path) as f:
        plan = json.load(f)
    if not isinstance(plan, list):
        raise SystemExit("report.py: plan '%s' is not a JSON array" % plan_path)
    by_layout = {}
    for entry in plan:
        try:
            by_layout.setdefault(layout_tuple(normalize_layout(entry)), entry)
        except (TypeError, ValueError):
            continue  # an entry without the layout keys cannot match a run
    for row in rows:
        entry = by_layout.get(layout_tuple(row))
        row["predicted"] = entry is not None
        if entry is None:
            continue
        row["predicted_step_s"] = entry.get("step_seconds")
        row["predicted_mfu"] = entry.get("mfu")
        row["predicted_memory_bytes"] = entry.get("memory_bytes_per_device")
        row["predicted_fits"] = entry.get("fits")
        memory = row.get("memory") or {}
        for kind in ("planned", "allocated"):
            total = (memory.get(kind) or {}).get("total")
            predicted = row["predicted_memory_bytes"]
            row["memory_equals_" + kind] = None if total is None or predicted is None else int(predicted) == int(total)

    compared = [r for r in rows if r["status"] == "ok" and r.get("predicted_step_s") is not None]
    summary = {"plan": plan_path, "plan_entries": len(plan), "matched": sum(1 for r in rows if r.get("predicted")),
               "compared": len(compared)}
    summary["spearman_rho"] = spearman([r["predicted_step_s"] for r in compared], [r["step_s"] for r in compared])
    if compared:
        # The planner's pick among the layouts measured: the fastest predicted of those it says fit.
        fitting = [r for r in compared if r.get("predicted_fits") is not False] or compared
        pick = min(fitting, key=lambda r: r["predicted_step_s"])
        best = min(compared, key=lambda r: r["step_s"])
        summary.update(top_pick=pick["layout"], top_pick_measured_s=pick["step_s"], best=best["layout"],
                       best_measured_s=best["step_s"], top_pick_within_10pct=pick["step_s"] <= 1.10 * best["step_s"])
    for kind in ("planned", "allocated"):
        checks = [r.get("memory_equals_" + kind) for r in rows if r.get("predicted")]
        known = [c for c in checks if c is not None]
        # True only when every matched layout has the figure and it agrees.
        summary["memory_equals_" + kind] = bool(known) and len(known) == len(checks) and all(known)
        summary["memory_mismatches_" + kind] = [r["layout"] for r in rows if r.get("memory_equals_" + kind) is False]
        summary["memory_missing_" + kind] = [r["layout"] for r in rows
                                            if r.get("predicted") and r.get("memory_equals_" + kind) is None]
    return summary


# ---- writing ---------------------------------------------------------------------------

def mib(b):
    return None if b is None else b / 2**20


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


def write_plots(out_dir, rows, plan_summary):
    try:
        import matplotlib
    except ImportError:
        print("report: matplotlib is missing (Debian: apt install python3-matplotlib): no plots written",
              file=sys.stderr)
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
    ax.legend(fontsize=8)
    finish(fig, ax, "step_breakdown.png")

    # Memory per rank (the planned parts of the largest rank; allocated total as a marker).
    fig, ax = plt.subplots(figsize=(width, 4.5))
    have = [bool((r.get("memory") or {}).get("planned")) for r in ok]
    bottom = [0.0] * len(ok)
    for part, color in zip(MEMORY_PARTS, ("tab:blue", "tab:orange", "tab:green", "tab:red", "tab:purple")):
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
    ax.legend(fontsize=8)
    finish(fig, ax, "memory.png")

    if plan_summary is None:
        return
    compared = [r for r in ok if r.get("predicted_step_s") is not None]
    fig, ax = plt.subplots(figsize=(6, 6))
    measured = [r["step_s"] * 1e3 for r in compared]
    predicted = [r["predicted_step_s"] * 1e3 for r in compared]
    ax.scatter(measured, predicted)
    for r, mx, py in zip(compared, measured, predicted):
        ax.annotate(r["layout"], (mx, py), fontsize=7, xytext=(3, 3), textcoords="offset points")
    if compared:
        lo, hi = min(measured + predicted), max(measured + predicted)
        ax.plot([lo, hi], [lo, hi], "k--", linewidth=1, label="predicted = measured")
        ax.legend(fontsize=8)
    rho = plan_summary.get("spearman_rho")
    ax.set_title("Planner vs measurement (Spearman rho %s)" % ("n/a" if rho is None else "%.2f" % rho))
    ax.set_xlabel("measured step time (ms)")
    ax.set_ylabel("predicted step time (ms)")
    fig.tight_layout()
    fig.savefig(os.path.join(out_dir, "plan_vs_measured.png"), dpi=120)
    plt.close(fig)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("out_dir", help="the sweep's folder (runs/NAME/metrics.jsonl, sweep_status.tsv)")
    parser.add_argument("--skip", type=int, default=3, help="leading steps left out as warm-up (default 3)")
    parser.add_argument("--plan", help="the planner's `plan --json --all` output (default: OUT_DIR/plan.json if any)")
    args = parser.parse_args(argv)
    plan = args.plan
    if plan is None and os.path.exists(os.path.join(args.out_dir, "plan.json")):
        plan = os.path.join(args.out_dir, "plan.json")

    rows = collect(args.out_dir, args.skip)
    if not rows:
        raise SystemExit("report.py: no runs in %s" % os.path.join(args.out_dir, "runs"))
    plan_summary = apply_plan(rows, plan) if plan else None
    write_csv(os.path.join(args.out_dir, "results.csv"), rows, plan_summary is not None)
    write_markdown(os.path.join(args.out_dir, "results.md"), rows, args.skip, plan_summary)
    write_plots(args.out_dir, rows, plan_summary)

    ok = [r for r in rows if r["status"] == "ok"]
    print("report: %d layouts, %d measured, %d failed or empty; results.md, results.csv and plots in %s" % (
        len(rows), len(ok), len(rows) - len(ok), args.out_dir))
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
