#!/usr/bin/env python3
"""Goodput under injected failures, against the checkpoint interval.

A job that fails every M seconds on average (its MTBF) loses, per failure,
the work since its last checkpoint plus the time to restart; a job that
checkpoints often loses little per failure but pays the save time delta at
every checkpoint. Young (1974) put the best interval between checkpoints at
tau = sqrt(2 delta M); Daly (2006, "A higher order estimate of the optimum
checkpoint interval for restart dumps") refined it to

    tau = sqrt(2 delta M) [1 + sqrt(delta / 2M) / 3 + (delta / 2M) / 9] - delta   (delta < 2M).

This benchmark measures it on the real engine: it calibrates the step time s,
the save time delta and the restart cost R from a short run, then trains the
same job under launch/supervise once per checkpoint interval, with a rank
killed by SIGKILL after exponentially distributed times of mean M
(ENGINE_TEST_MTBF, launch/resilience/fault_injection.h; the same seed for every interval,
so each sees the same failure times), and reads the goodput supervise reports:
time in steps that counted over wall time. Next to it, the first-order model

    goodput(tau) = (1 - (R + (tau + delta) / 2) / M) / (1 + delta / tau)

(a save every tau seconds of work; each failure costs the restart and, on
average, half an interval of lost work).

Usage (from the repository root, after building):
    python3 examples/benchmarks/goodput.py --build build --data "data/demo/*_train_*.bin" --mtbf 30

Results of a run are recorded in examples/benchmarks/RESULTS.md.
"""
import argparse
import json
import math
import os
import shlex
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))


def read_jsonl(path):
    records = []
    with open(path) as f:
        for line in f:
            try:
                records.append(json.loads(line))
            except json.JSONDecodeError:
                pass  # a line cut short by a killed process
    return records


def train_command(args, steps, interval, ckpt, log):
    command = [] if args.np <= 1 else ["mpirun", "--oversubscribe", "-np", str(args.np)]
    command += [os.path.join(args.build, "launch", "train"), "--train-data", args.data, "--steps", str(steps),
                "--checkpoint-dir", ckpt, "--checkpoint-interval", str(interval), "--log-file", log,
                "--device", "cpu", "--peak-tflops", "1", "--collective-timeout", "60"]
    return command + shlex.split(args.model)


def calibrate(args, work):
    """Step time s, save time delta and restart cost R from one clean run."""
    log = os.path.join(work, "calibrate.jsonl")
    start = time.monotonic()
    subprocess.run(train_command(args, args.calibration_steps, 5, os.path.join(work, "ck_cal"), log),
                   check=True, stdout=subprocess.DEVNULL)
    wall = time.monotonic() - start
    records = read_jsonl(log)
    steps = [r["step_time_s"] for r in records if "step_time_s" in r]
    saves = [r["seconds"] for r in records if r.get("event") == "checkpoint"]
    step = statistics.median(steps)
    delta = statistics.mean(saves)
    # What is neither a step nor a save: start-up and shut-down, which every
    # restart pays again (plus supervise's backoff).
    restart = max(0.0, wall - sum(steps) - sum(saves)) + args.backoff
    return step, delta, restart


def daly_interval(delta, mtbf):
    if delta >= 2 * mtbf:
        return mtbf
    x = delta / (2 * mtbf)
    return math.sqrt(2 * delta * mtbf) * (1 + math.sqrt(x) / 3 + x / 9) - delta


def predicted_goodput(tau, delta, restart, mtbf):
    return max(0.0, 1 - (restart + (tau + delta) / 2) / mtbf) / (1 + delta / tau)


def run_with_failures(args, work, interval, seed):
    tag = "every_%d" % interval
    ckpt, log, report = (os.path.join(work, tag + suffix) for suffix in ("_ck", ".jsonl", ".json"))
    env = dict(os.environ, ENGINE_TEST_MTBF="%g:%d" % (args.mtbf, seed), OMP_NUM_THREADS=str(args.threads))
    command = [os.path.join(ROOT, "launch", "supervise"), "--max-restarts", "1000", "--backoff", str(args.backoff),
               "--max-backoff", str(args.backoff), "--report", report, "--"]
    command += train_command(args, args.steps, interval, ckpt, log) + ["--resume", "auto"]
    subprocess.run(command, env=env, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    with open(report) as f:
        return json.load(f)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--build", default="build", help="build directory holding launch/train")
    parser.add_argument("--data", required=True, help="training shards (glob)")
    parser.add_argument("--model", default="--model gpt-demo --n-layer 4 --n-embd 384 --n-head 6 "
                        "--micro-batch 8 --seq-len 128 --batch-tokens 1024",
                        help="model and batch flags for train")
    parser.add_argument("--np", type=int, default=1, help="ranks (mpirun -np) ; 1 runs train alone")
    parser.add_argument("--threads", type=int, default=2, help="OMP_NUM_THREADS per rank")
    parser.add_argument("--mtbf", type=float, default=30.0, help="mean seconds between injected failures")
    parser.add_argument("--steps", type=int, default=200, help="steps of each run")
    parser.add_argument("--calibration-steps", type=int, default=20)
    parser.add_argument("--backoff", type=float, default=0.1, help="supervise's wait before a restart")
    parser.add_argument("--factors", default="0.25,0.5,1,2,4",
                        help="checkpoint intervals to try, as multiples of Daly's optimum")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--out", help="write the results as JSON here")
    args = parser.parse_args()

    with tempfile.TemporaryDirectory(prefix="goodput_") as work:
        step, delta, restart = calibrate(args, work)
        tau = daly_interval(delta, args.mtbf)
        optimum_steps = max(1, round(tau / step))
        print("calibration: step %.3f s, save delta %.3f s, restart R %.2f s; MTBF M %.0f s" %
              (step, delta, restart, args.mtbf))
        print("Young sqrt(2 delta M) = %.2f s; Daly %.2f s = %d steps" %
              (math.sqrt(2 * delta * args.mtbf), tau, optimum_steps))
        intervals = sorted({max(1, round(optimum_steps * float(f))) for f in args.factors.split(",")})
        rows = []
        for interval in intervals:
            report = run_with_failures(args, work, interval, args.seed)
            row = {"interval_steps": interval, "interval_s": interval * step, "failures": report["restarts"],
                   "wall_s": report["wall_s"], "goodput": report["goodput"],
                   "predicted": predicted_goodput(interval * step, delta, restart, args.mtbf)}
            rows.append(row)
            print("  every %4d steps (%6.1f s): %2d failures, wall %6.1f s, goodput %5.1f%% (model %5.1f%%)" %
                  (interval, row["interval_s"], row["failures"], row["wall_s"], 100 * row["goodput"],
                   100 * row["predicted"]), flush=True)

    print("\n| checkpoint every | interval (s) | failures | wall (s) | goodput measured | goodput model |")
    print("|---|---|---|---|---|---|")
    for r in rows:
        mark = " (Daly)" if r["interval_steps"] == optimum_steps else ""
        print("| %d steps%s | %.1f | %d | %.1f | %.1f%% | %.1f%% |" %
              (r["interval_steps"], mark, r["interval_s"], r["failures"], r["wall_s"], 100 * r["goodput"],
               100 * r["predicted"]))
    if args.out:
        with open(args.out, "w") as f:
            json.dump({"step_s": step, "save_s": delta, "restart_s": restart, "mtbf_s": args.mtbf,
                       "daly_s": tau, "daly_steps": optimum_steps, "runs": rows}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
