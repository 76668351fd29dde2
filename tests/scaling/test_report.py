"""Tests of examples/scaling/report.py on synthetic run folders and plans.

Every figure checked here is computed by hand from the records the test
writes: medians after the warm-up steps, the split of the step into compute,
exposed communication and bubble, the largest rank's memory, Spearman's rho
(with and without ties), the planner's pick and the memory checks. The
plots are checked on their own artists: the tallest stacked bar below the
top with the legend clear of every bar, and plan_vs_measured.png's labels
apart however close their points. The report's modules stay under 400
lines; without matplotlib it writes its tables and says what to install.

    ENGINE_SCALING_DIR=examples/scaling python3 -m unittest -v test_report
"""
import csv
import importlib.util
import itertools
import json
import math
import os
import subprocess
import sys
import tempfile
import unittest
from unittest import mock

HERE = os.path.dirname(os.path.abspath(__file__))
SCALING = os.environ.get("ENGINE_SCALING_DIR") or os.path.join(HERE, "..", "..", "examples", "scaling")
REPORT = os.path.join(SCALING, "report.py")


def load_report_module():
    spec = importlib.util.spec_from_file_location("scaling_report", REPORT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def step_record(step, t, tokens, mfu, tp=0.0, pp=0.0, dp=0.0, world=0.0, exposed=0.0, bytes_dp=0.0):
    return {"step": step, "loss": 5.0, "step_time_s": t, "tokens_per_s": tokens, "mfu": mfu, "hfu": mfu,
            "peak_memory_bytes": 1, "bubble_fraction": 0.0, "comm_bytes": {"tp": 0.0, "dp": bytes_dp, "pp": 0.0},
            "exposed_comm_s": exposed, "wait_seconds_tp": tp, "wait_seconds_pp": pp, "wait_seconds_dp": dp,
            "wait_seconds_world": world}


def memory_event(total, allocated_total):
    parts = {"weights": total // 5, "grads": total // 5, "optimizer": total // 5, "activations": total // 5}
    parts["staging"] = total - sum(parts.values())
    allocated = dict(parts, total=allocated_total)
    return {"event": "memory", "planned": dict(parts, total=total), "allocated": allocated}


def config(tp, pp, dp, mb, zero=0, recompute="none", schedule="1f1b", sp=False):
    # As train writes config.json: flag names as keys, sequence-parallel a bool.
    return {"model": "gpt-demo", "micro-batch": mb, "tp": tp, "pp": pp, "dp": dp, "pipeline-schedule": schedule,
            "recompute": recompute, "zero": zero, "sequence-parallel": sp}


WARM_UP = [step_record(s, 5.0, 1.0, 0.01, tp=1.0, pp=1.0, dp=1.0, world=1.0, exposed=1.0) for s in (1, 2, 3)]

RUNS = {
    # Steps 4-7: step times 0.30 0.10 0.20 0.40 -> median 0.25; dp waits -> 0.035; world 0.01.
    "dp2_z0": {
        "config": config(1, 1, 2, 8),
        "records": [{"event": "resume", "step": 0}] + WARM_UP + [
            step_record(4, 0.30, 100, 0.1, dp=0.02, world=0.01, exposed=0.05, bytes_dp=1000),
            step_record(5, 0.10, 300, 0.3, dp=0.04, world=0.01, exposed=0.05, bytes_dp=1000),
            step_record(6, 0.20, 200, 0.2, dp=0.03, world=0.01, exposed=0.05, bytes_dp=1000),
            {"step": 6, "val_loss": 3.0},  # validation-only: not a step record
            step_record(7, 0.40, 400, 0.4, dp=0.05, world=0.01, exposed=0.05, bytes_dp=1000),
            memory_event(1000, 1050), memory_event(1200, 1100),  # two ranks: the larger counts
            {"event": "summary", "status": "done"}],
    },
    # Steps 4-7: step 0.5 0.5 0.6 0.7 -> 0.55; pp waits 0.1 0.12 0.11 0.2 -> 0.115; world 0.02.
    "pp2_1f1b": {
        "config": config(1, 2, 1, 4),
        "records": WARM_UP + [step_record(4 + i, t, 50, 0.05, pp=w, world=0.02)
                              for i, (t, w) in enumerate([(0.5, 0.1), (0.5, 0.12), (0.6, 0.11), (0.7, 0.2)])] +
                   [memory_event(2000, 2000)],
    },
    # Steps 4-6: step 0.4, tp waits 0.1; no memory event.
    "tp2_sp": {
        "config": config(2, 1, 1, 8, sp=True),
        "records": WARM_UP + [step_record(s, 0.4, 80, 0.08, tp=0.1) for s in (4, 5, 6)],
    },
}
ORDER = ["dp2_z0", "pp2_1f1b", "tp2_sp", "bad"]
# (layout, run folder, exit code, keys): a first pass over the four layouts, then a second
# (sweep.sh --repeat 2) that is disturbed for dp2_z0, undisturbed for pp2_1f1b and fails for tp2_sp.
STATUS = [("dp2_z0", "dp2_z0", 0, "tp=1 pp=1 dp=2 micro_batch=8 zero=0"),
          ("pp2_1f1b", "pp2_1f1b", 0, "pp=2 micro_batch=4"),
          ("tp2_sp", "tp2_sp", 0, "tp=2 sequence_parallel=1"), ("bad", "bad", 3, "tp=4"),
          ("dp2_z0", "dp2_z0@2", 0, "tp=1 pp=1 dp=2 micro_batch=8 zero=0"),
          ("pp2_1f1b", "pp2_1f1b@2", 0, "pp=2 micro_batch=4"),
          ("tp2_sp", "tp2_sp@2", 9, "tp=2 sequence_parallel=1"), ("bad", "bad@2", 3, "tp=4")]
SECOND_PASS = {
    "dp2_z0@2": {"config": RUNS["dp2_z0"]["config"],
                 "records": WARM_UP + [step_record(s, 1.0, 10, 0.01, dp=0.5) for s in (4, 5, 6)]},
    "pp2_1f1b@2": {"config": RUNS["pp2_1f1b"]["config"],
                   "records": WARM_UP + [step_record(s, 0.3, 90, 0.09, pp=0.05) for s in (4, 5, 6)]},
}


def plan_entry(tp, pp, dp, mb, step, memory, zero=0, recompute="none", schedule="1f1b", sp=False, fits=True):
    return {"tp": tp, "pp": pp, "dp": dp, "micro_batch": mb, "zero": zero, "recompute": recompute,
            "schedule": schedule, "sequence_parallel": sp, "step_seconds": step, "tflops_per_device": 1.0,
            "mfu": 0.1, "memory_bytes_per_device": memory, "fits": fits}


UNMATCHED = plan_entry(1, 1, 2, 8, 0.01, 1, zero=3)  # a layout that was not run


class ReportTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        try:
            import matplotlib  # noqa: F401  (the plots need it; launch/setup_env.sh installs it)
        except ImportError:
            raise AssertionError("matplotlib is missing: apt-get install python3-matplotlib (launch/setup_env.sh)")
        cls.report = load_report_module()

    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory()
        self.dir = self.tmp.name
        self.write_runs(RUNS)
        os.makedirs(os.path.join(self.dir, "runs", "bad"))
        self.write_status(STATUS[:4])

    def write_runs(self, runs):
        for name, run in runs.items():
            folder = os.path.join(self.dir, "runs", name)
            os.makedirs(folder)
            with open(os.path.join(folder, "config.json"), "w") as f:
                json.dump(run["config"], f)
            with open(os.path.join(folder, "metrics.jsonl"), "w") as f:
                for r in run["records"]:
                    f.write(json.dumps(r) + "\n")
                f.write('{"step": 8, "step_ti')  # a line cut short by a crash

    def write_status(self, status):
        with open(os.path.join(self.dir, "sweep_status.tsv"), "w") as f:
            f.write("layout\trun\texit_code\twall_s\tlayout_keys\tcommand\n")
            for name, run, code, keys in status:
                f.write("%s\t%s\t%d\t1.5\t%s\tmpirun -n 2 train\n" % (name, run, code, keys))

    def tearDown(self):
        self.tmp.cleanup()

    def run_report(self, *args):
        done = subprocess.run([sys.executable, REPORT, self.dir, *args], capture_output=True, text=True, timeout=60)
        self.assertEqual(done.returncode, 0, done.stdout + done.stderr)
        return done.stdout

    def write_plan(self, entries, name="plan.json"):
        path = os.path.join(self.tmp.name, name)
        with open(path, "w") as f:
            json.dump(entries, f)
        return path

    def results(self):
        with open(os.path.join(self.dir, "results.csv")) as f:
            return {row["layout"]: row for row in csv.DictReader(f)}

    def assertPng(self, name):
        path = os.path.join(self.dir, name)
        self.assertTrue(os.path.exists(path), name)
        with open(path, "rb") as f:
            self.assertEqual(f.read(8), b"\x89PNG\r\n\x1a\n", name)

    def test_spearman_by_hand(self):
        spearman = self.report.spearman
        self.assertAlmostEqual(spearman([1, 2, 3], [10, 20, 30]), 1.0)
        self.assertAlmostEqual(spearman([1, 2, 3, 4], [9, 7, 5, 1]), -1.0)
        # ys 5 6 7 8 7: ranks 1 2 3.5 5 3.5 against 1..5: 8 / sqrt(10 * 9.5)
        self.assertAlmostEqual(spearman([1, 2, 3, 4, 5], [5, 6, 7, 8, 7]), 8 / math.sqrt(95))
        self.assertIsNone(spearman([1, 2], [3, 3]))  # no spread: undefined
        self.assertIsNone(spearman([1], [1]))

    def test_medians_split_and_memory(self):
        out = self.run_report("--skip", "3")
        rows = self.results()
        self.assertEqual(list(rows), ORDER)  # the layout file's order, the failed one included

        dp2 = rows["dp2_z0"]
        self.assertEqual(dp2["status"], "ok")
        self.assertEqual((dp2["tp"], dp2["pp"], dp2["dp"], dp2["micro_batch"], dp2["zero"], dp2["recompute"],
                          dp2["schedule"], dp2["sequence_parallel"]), ("1", "1", "2", "8", "0", "none", "1f1b", "0"))
        self.assertEqual(dp2["steps_used"], "4")
        # Quartiles of 0.1 0.2 0.3 0.4 (Python's "exclusive" method): 0.125 and 0.375.
        for key, want in (("step_s", 0.25), ("step_iqr_s", 0.25), ("tokens_per_s", 250), ("mfu", 0.25), ("wait_dp_s", 0.035),
                          ("wait_world_s", 0.01), ("exposed_dp_rank0_s", 0.05), ("exposed_comm_s", 0.035),
                          ("bubble_s", 0.01), ("compute_s", 0.205), ("bytes_dp", 1000)):
            self.assertAlmostEqual(float(dp2[key]), want, msg=key)
        self.assertEqual(int(dp2["planned_total"]), 1200)  # the larger rank's
        self.assertEqual(int(dp2["planned_weights"]), 240)
        self.assertEqual(int(dp2["allocated_total"]), 1100)

        pp2 = rows["pp2_1f1b"]
        for key, want in (("step_s", 0.55), ("wait_pp_s", 0.115), ("bubble_s", 0.135), ("exposed_comm_s", 0.0),
                          ("compute_s", 0.415)):
            self.assertAlmostEqual(float(pp2[key]), want, msg=key)

        tp2 = rows["tp2_sp"]
        self.assertEqual(tp2["sequence_parallel"], "1")
        self.assertEqual(tp2["steps_used"], "3")
        for key, want in (("step_s", 0.4), ("exposed_comm_s", 0.1), ("compute_s", 0.3)):
            self.assertAlmostEqual(float(tp2[key]), want, msg=key)
        self.assertEqual(tp2["planned_total"], "")  # no memory event: left blank

        self.assertEqual(rows["bad"]["status"], "failed (exit 3)")
        self.assertEqual(rows["bad"]["step_s"], "")

        with open(os.path.join(self.dir, "results.md")) as f:
            md = f.read()
        self.assertIn("| dp2_z0 | tp1 pp1 dp2 | 8 | 0 | none | 1f1b | 0 | 250.0 ms | 250 | 25.0% | 205.0 ms | "
                      "35.0 ms | 10.0 ms | 1.17 KiB | 1.07 KiB |", md)
        self.assertIn("bad (failed (exit 3))", md)
        self.assertNotIn("predicted", md)
        for png in ("mfu_step_time.png", "step_breakdown.png", "memory.png"):
            self.assertPng(png)
        self.assertFalse(os.path.exists(os.path.join(self.dir, "plan_vs_measured.png")))
        self.assertIn("fastest: dp2_z0, 250.0 ms", out)
        self.assertIn("bad: failed (exit 3)", out)

    def test_repeated_passes_keep_the_least_disturbed(self):
        self.write_runs(SECOND_PASS)
        self.write_status(STATUS)
        self.run_report()
        rows = self.results()
        self.assertEqual(list(rows), ORDER)
        dp2, pp2, tp2, bad = rows["dp2_z0"], rows["pp2_1f1b"], rows["tp2_sp"], rows["bad"]
        self.assertEqual((dp2["run"], dp2["passes"], dp2["step_s_passes"]), ("dp2_z0", "2", "0.25 1"))
        self.assertAlmostEqual(float(dp2["wait_dp_s"]), 0.035)  # every figure from the chosen pass
        self.assertEqual((pp2["run"], pp2["passes"], pp2["step_s_passes"]), ("pp2_1f1b@2", "2", "0.55 0.3"))
        self.assertAlmostEqual(float(pp2["bubble_s"]), 0.05)
        self.assertEqual((tp2["run"], tp2["status"]), ("tp2_sp", "ok"))  # its failed second pass is passed over
        self.assertEqual((bad["run"], bad["status"]), ("bad@2", "failed (exit 3)"))
        with open(os.path.join(self.dir, "results.md")) as f:
            self.assertIn("the pass with the smallest median step", f.read())

    def test_skip_is_a_flag(self):
        self.run_report("--skip", "0")  # the warm-up steps (5 s) now count
        rows = self.results()
        self.assertEqual(rows["dp2_z0"]["steps_used"], "7")
        self.assertAlmostEqual(float(rows["dp2_z0"]["step_s"]), 0.40)  # 0.1 0.2 0.3 0.4 5 5 5

    def test_plan_in_rank_order(self):
        plan = self.write_plan([
            plan_entry(1, 1, 2, 8, 0.20, 1200),                 # dp2_z0: planned 1200 = yes, allocated 1100 = no
            plan_entry(1, 2, 1, 4, 0.60, 2000),                 # pp2_1f1b: both equal
            plan_entry(2, 1, 1, 8, 0.30, 999, sp=True),         # tp2_sp: no memory event to compare
            UNMATCHED])
        out = self.run_report("--plan", plan)
        rows = self.results()
        self.assertAlmostEqual(float(rows["dp2_z0"]["predicted_step_s"]), 0.20)
        self.assertEqual(rows["dp2_z0"]["predicted_memory_bytes"], "1200")
        self.assertEqual(rows["dp2_z0"]["memory_equals_planned"], "True")
        self.assertEqual(rows["dp2_z0"]["memory_equals_allocated"], "False")
        self.assertEqual(rows["pp2_1f1b"]["memory_equals_allocated"], "True")
        self.assertEqual(rows["tp2_sp"]["memory_equals_planned"], "")
        self.assertEqual(rows["bad"]["predicted_step_s"], "")
        self.assertIn("4 entries, 3 layouts matched, 3 compared", out)
        self.assertIn("Spearman's rho (predicted vs measured step time): 1.000", out)
        self.assertIn("Planner's pick dp2_z0 measured 250.0 ms; best measured dp2_z0 250.0 ms: within 10%", out)
        # tp2_sp has no memory figures, so "every layout" does not hold.
        self.assertIn("equals the planned total for every layout: no (no figure to compare: tp2_sp)", out)
        self.assertIn("equals the allocated total for every layout: no (differs: dp2_z0; no figure to compare: "
                      "tp2_sp)", out)
        with open(os.path.join(self.dir, "results.md")) as f:
            md = f.read()
        self.assertIn("| 200.0 ms | 1.17 KiB |", md)
        self.assertIn("- Spearman's rho (predicted vs measured step time): 1.000", md)
        self.assertPng("plan_vs_measured.png")

    def test_plan_with_ties_and_a_pick_that_misses(self):
        # Predicted 0.3 0.6 0.3 (dp2, pp2, tp2) against measured 0.25 0.55 0.4: predicted ranks 1.5 3 1.5,
        # measured 1 3 2: rho = 1.5 / sqrt(1.5 * 2) = 0.866.
        plan = self.write_plan([plan_entry(1, 1, 2, 8, 0.30, 1200), plan_entry(1, 2, 1, 4, 0.60, 2000),
                                plan_entry(2, 1, 1, 8, 0.30, 999, sp=True)])
        out = self.run_report("--plan", plan)
        self.assertIn("Spearman's rho (predicted vs measured step time): %.3f" % (1.5 / math.sqrt(3)), out)
        # The fastest predicted layout does not fit: the pick is the next, tp2_sp, 60% slower than the best.
        plan = self.write_plan([plan_entry(1, 1, 2, 8, 0.10, 1200, fits=False), plan_entry(1, 2, 1, 4, 0.60, 2000),
                                plan_entry(2, 1, 1, 8, 0.30, 999, sp=True)], "plan2.json")
        out = self.run_report("--plan", plan)
        self.assertIn("Planner's pick tp2_sp measured 400.0 ms; best measured dp2_z0 250.0 ms: NOT within 10%", out)

    def figures(self, rows, plan_summary):
        """report_plots.write_plots' figures, kept open for inspection: {axes title: axes}."""
        import matplotlib.pyplot as plt

        import report_plots  # beside report.py, on the path loading it set
        kept = []
        with mock.patch("matplotlib.pyplot.close", side_effect=kept.append):
            report_plots.write_plots(self.dir, rows, plan_summary)
        kept = [f for f in kept if hasattr(f, "canvas")]  # figures only, not what matplotlib closes by name
        self.addCleanup(lambda: [plt.close(f) for f in kept])
        for fig in kept:
            fig.canvas.draw()
        return {ax.get_title(): ax for fig in kept for ax in fig.axes}

    def test_stacked_bars_leave_room_for_the_legend(self):
        # The recorded CPU sweep's shape: one layout without staging memory and another with, the tallest bar
        # of the one without (an empty top segment pinned the axis to the bar's top, the legend on it).
        rows = [{"layout": "l%d" % i, "status": "ok", "step_s": 0.4 + 0.01 * i, "mfu": 0.5, "compute_s": 0.4,
                 "exposed_comm_s": 0.01 * i, "bubble_s": 0.0,
                 "memory": {"planned": {"weights": 2**22, "grads": 2**22, "optimizer": 2**23,
                                        "activations": (100 - 9 * i) * 2**20, "staging": 2**22 if i % 2 else 0},
                            "allocated": {"total": 123 * 2**20}}} for i in range(8)]
        axes = self.figures(rows, None)
        for title in ("Planned memory per rank", "Step time: compute, exposed communication, pipeline bubble"):
            ax = axes[title]
            bars = [p for p in ax.patches if p.get_height() > 0]
            top = max(p.get_y() + p.get_height() for p in bars)
            self.assertGreaterEqual(ax.get_ylim()[1], 1.2 * top, title)
            legend = ax.get_legend().get_window_extent()
            for bar in bars:
                self.assertFalse(legend.overlaps(bar.get_window_extent()), title)

    def test_plan_labels_apart(self):
        # Eleven layouts, eight of them within a few ms of each other, as ZeRO stages and schedules are.
        near = [(420.8, 399.5), (422.3, 399.5), (424.0, 400.5), (424.6, 401.3), (424.2, 400.7), (482.4, 460.3),
                (484.3, 460.3), (526.0, 491.0)]
        far = [(634.2, 603.6), (635.0, 603.6), (445.0, 449.4)]
        rows = [{"layout": "layout_%02d_%s" % (i, "x" * (i % 4)), "status": "ok", "step_s": m / 1e3,
                 "predicted_step_s": p / 1e3, "mfu": 0.5, "memory": {}} for i, (m, p) in enumerate(near + far)]
        ax = self.figures(rows, {"spearman_rho": 0.98})["Planner vs measurement (Spearman rho 0.98)"]
        labels = [t for t in ax.texts if t.get_text().startswith("layout_")]
        self.assertEqual(sorted(t.get_text() for t in labels), sorted(r["layout"] for r in rows))
        boxes = {t.get_text(): t.get_window_extent() for t in labels}
        frame = ax.get_window_extent()
        for (a, box_a), (b, box_b) in itertools.combinations(boxes.items(), 2):
            self.assertFalse(box_a.overlaps(box_b), "%s over %s" % (a, b))
        for name, box in boxes.items():
            self.assertTrue(frame.x0 <= box.x0 and box.x1 <= frame.x1 and frame.y0 <= box.y0 and box.y1 <= frame.y1,
                            name)
            self.assertFalse(box.overlaps(ax.get_legend().get_window_extent()), name)

    def test_no_plots_and_no_matplotlib(self):
        self.run_report("--no-plots")
        self.assertTrue(os.path.exists(os.path.join(self.dir, "results.md")))
        self.assertFalse([f for f in os.listdir(self.dir) if f.endswith(".png")])
        # A matplotlib that fails to import, here and for /usr/bin/python3: the tables, and one line on what to install.
        fake = os.path.join(self.tmp.name, "fake")
        os.makedirs(os.path.join(fake, "matplotlib"))
        with open(os.path.join(fake, "matplotlib", "__init__.py"), "w") as f:
            f.write("raise ImportError('No module named matplotlib (this test)')\n")
        done = subprocess.run([sys.executable, REPORT, self.dir], capture_output=True, text=True, timeout=60,
                              env=dict(os.environ, PYTHONPATH=fake))
        self.assertEqual(done.returncode, 0, done.stderr)
        self.assertEqual(len(done.stderr.strip().splitlines()), 1, done.stderr)
        self.assertIn("report: needs matplotlib", done.stderr)
        self.assertIn("pip install matplotlib", done.stderr)
        self.assertIn("fastest: dp2_z0", done.stdout)
        self.assertFalse([f for f in os.listdir(self.dir) if f.endswith(".png")])

    def test_modules_stay_under_400_lines(self):
        # The project keeps a source file under about 400 lines: report.py is split by responsibility.
        for name in ("report.py", "sweep_results.py", "report_plots.py"):
            with open(os.path.join(SCALING, name)) as f:
                self.assertLess(len(f.readlines()), 400, name)

    def test_plan_json_in_the_folder_is_used(self):
        with open(os.path.join(self.dir, "plan.json"), "w") as f:
            json.dump([plan_entry(1, 2, 1, 4, 0.60, 2000)], f)
        out = self.run_report()
        self.assertIn("1 entries, 1 layouts matched, 1 compared", out)
        self.assertIn("Spearman's rho (predicted vs measured step time): n/a", out)
        self.assertIn("equals the planned total for every layout: yes", out)
        self.assertIn("equals the allocated total for every layout: yes", out)


if __name__ == "__main__":
    unittest.main()
