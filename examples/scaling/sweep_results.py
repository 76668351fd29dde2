"""Reading a scaling sweep (examples/scaling/sweep.sh) and matching it to the
planner's predictions: the figures behind examples/scaling/report.py.

collect() reads DIR/runs/NAME/ (config.json, metrics.jsonl) in the order of
DIR/sweep_status.tsv and gives one row per layout: the medians after the
warm-up steps, the split of the step into compute, exposed communication and
bubble, the largest rank's memory (report.py's docstring says how each is
taken). apply_plan() adds the planner's predictions to those rows and ranks
the layouts against them (Spearman's rho, the planner's pick, the memory
checks). Nothing here draws or writes: report.py writes the tables,
report_plots.py the pictures, so these figures need no matplotlib.
"""
import csv
import json
import math
import os
import statistics

LAYOUT_KEYS = ("tp", "pp", "dp", "micro_batch", "zero", "recompute", "schedule", "sequence_parallel")
# config.json (flag names) -> layout key
CONFIG_KEYS = {"tp": "tp", "pp": "pp", "dp": "dp", "micro-batch": "micro_batch", "zero": "zero",
               "recompute": "recompute", "pipeline-schedule": "schedule", "sequence-parallel": "sequence_parallel"}
MEMORY_PARTS = ("weights", "grads", "optimizer", "activations", "staging", "communication")


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

