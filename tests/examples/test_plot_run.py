"""examples/plot_run.py on synthetic metrics: a run folder and a JSONL file
overlaid (with events, validation records, a resumed step, a null value and a
partial last line) give one PNG; bad arguments are refused. Training and
validation loss share a panel and restarts are marked (checked on the
figure's own artists), on the records of a real resumed run too; the PNG
goes beside the run by default; without matplotlib the script re-executes
itself under /usr/bin/python3, or says in one line what to install."""
import json
import math
import os
import re
import shutil
import subprocess
import sys
import tempfile
import unittest

SOURCE = os.environ.get("ENGINE_SOURCE_DIR", os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
SCRIPT = os.path.join(SOURCE, "examples", "plot_run.py")
sys.path.insert(0, os.path.dirname(SCRIPT))
import plot_run  # noqa: E402


def write_metrics(path, steps, scale, partial_tail=False):
    with open(path, "w") as f:
        f.write(json.dumps({"event": "memory", "planned": {}}) + "\n")
        for s in range(1, steps + 1):
            record = {"step": s, "loss": scale * 5.5 / math.sqrt(s), "grad_norm": 1.0 / s, "lr": 1e-3 * min(1, s / 5),
                      "step_time_s": 0.1, "tokens_per_s": 1000.0 + s, "mfu": 0.3}
            if s == 7:
                record["grad_norm"] = None  # a skipped, non-finite step
            f.write(json.dumps(record) + "\n")
            if s % 5 == 0:
                f.write(json.dumps({"step": s, "val_loss": scale * 5.0 / math.sqrt(s)}) + "\n")
        f.write(json.dumps({"event": "resume", "step": 10}) + "\n")
        f.write(json.dumps({"step": 10, "loss": 9.0, "lr": 1e-3}) + "\n")  # the resumed run wrote step 10 again
        f.write(json.dumps({"event": "summary", "status": "done"}) + "\n")
        if partial_tail:
            f.write('{"step": 21, "lo')


# The records of a real run (build/launch/train --model gpt-micro, checkpoints every 10 steps): killed after
# step 45 and resumed by --resume auto from step 40 (which dropped 41-45), run to 60, then resumed again from
# the checkpoint of step 20 (which dropped the second attempt's 41-60 and kept the first's 21-40 before the
# resume record). Figures trimmed to the fields the plot reads.
def write_real_resumed_run(path):
    memory = {"event": "memory", "planned": {"total": 4734976}, "allocated": {"total": 4734976}}

    def step(s, attempt):
        record = {"step": s, "loss": 5.5 - 0.025 * s + 0.01 * attempt, "grad_norm": 1.2, "lr": 1e-3 * (1 - s / 70),
                  "mfu": 0.02, "step_time_s": 0.2, "tokens_per_second": 5000.0}
        if s % 10 == 0:
            record["val_loss"] = 5.3 - 0.02 * s
        return record

    records = [memory] + [step(s, 0) for s in range(1, 41)]
    records += [{"async": True, "event": "checkpoint", "step": 40, "seconds": 0.03}, memory,
                {"attempt": 0, "damaged_skipped": 0, "event": "resume", "from": "R/checkpoints/step_00000040",
                 "step": 40},
                {"event": "summary", "first_step": 40, "last_step": 60}, memory,
                {"attempt": 0, "damaged_skipped": 0, "event": "resume", "from": "R/checkpoints/step_00000020",
                 "step": 20}]
    records += [step(s, 2) for s in range(21, 61)] + [{"event": "summary", "first_step": 20, "last_step": 60}]
    with open(path, "w") as f:
        for r in records:
            f.write(json.dumps(r) + "\n")


class PlotRun(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory()
        self.dir = self.tmp.name
        os.makedirs(os.path.join(self.dir, "run_a"))
        write_metrics(os.path.join(self.dir, "run_a", "metrics.jsonl"), 20, 1.0)
        write_metrics(os.path.join(self.dir, "b.jsonl"), 20, 1.2, partial_tail=True)

    def tearDown(self):
        self.tmp.cleanup()

    def test_series_skip_events_keep_the_last_record_of_a_step(self):
        series = plot_run.read_series(os.path.join(self.dir, "run_a", "metrics.jsonl"))
        steps, losses = series["training loss"]
        self.assertEqual(steps, list(range(1, 21)))
        self.assertEqual(losses[9], 9.0)
        self.assertEqual(series["validation loss"][0], [5, 10, 15, 20])
        self.assertNotIn(7, series["gradient norm"][0])
        self.assertAlmostEqual(series["MFU (%)"][1][0], 30.0)

    def test_writes_one_png_of_two_runs(self):
        out = os.path.join(self.dir, "runs.png")
        done = subprocess.run([sys.executable, SCRIPT, os.path.join(self.dir, "run_a"), os.path.join(self.dir, "b.jsonl"),
                               "--label", "A", "--label", "B", "--out", out], capture_output=True, text=True)
        self.assertEqual(done.returncode, 0, done.stderr)
        self.assertIn("not JSON, skipped", done.stderr)
        with open(out, "rb") as f:
            self.assertEqual(f.read(8), b"\x89PNG\r\n\x1a\n")
        self.assertGreater(os.path.getsize(out), 10000)

    def test_restarts_found(self):
        self.assertEqual(plot_run.read_run(os.path.join(self.dir, "run_a", "metrics.jsonl"))[1], [(10, "resume")])
        real = os.path.join(self.dir, "real.jsonl")
        write_real_resumed_run(real)
        series, restarts = plot_run.read_run(real)
        self.assertEqual(restarts, [(40, "resume"), (20, "resume")])
        self.assertEqual(series["training loss"][0], list(range(1, 61)))
        self.assertAlmostEqual(series["training loss"][1][29], 5.5 - 0.025 * 30 + 0.02)  # the last attempt's
        self.assertEqual(series["validation loss"][0], [10, 20, 30, 40, 50, 60])  # from the step records
        # Steps going back with no resume record (another run appended to the same --log-file): a restart
        # from the step before; a resume before any step (--resume auto starting fresh) is none.
        appended = os.path.join(self.dir, "appended.jsonl")
        with open(appended, "w") as f:
            f.write(json.dumps({"event": "resume", "step": 0, "from": None}) + "\n")
            for s in (1, 2, 3, 4, 5, 6, 1, 2, 3):
                f.write(json.dumps({"step": s, "loss": 5.0}) + "\n")
                if s == 6:
                    f.write(json.dumps({"step": 6, "val_loss": 4.0}) + "\n")  # same step: not going back
        self.assertEqual(plot_run.read_run(appended)[1], [(0, "restart")])

    def test_one_loss_panel_and_restart_lines_in_every_panel(self):
        real = os.path.join(self.dir, "real.jsonl")
        write_real_resumed_run(real)
        drawn = plot_run.plot([real, os.path.join(self.dir, "b.jsonl")], ["real", "B"],
                              os.path.join(self.dir, "p.png"))
        self.assertEqual(list(drawn["panels"]), ["loss", "tokens / s", "MFU (%)", "gradient norm", "learning rate"])
        self.assertEqual(drawn["panels"]["loss"], ["real, training loss", "real, validation loss",
                                                   "B, training loss", "B, validation loss"])
        self.assertEqual(drawn["restarts"], {"real": [(40, "resume"), (20, "resume")], "B": [(10, "resume")]})
        self.assertEqual(set(drawn["restart_lines"].values()), {3})  # every panel, each run's
        self.assertIn("real", drawn["panels"]["tokens / s"])  # tokens_per_second, the C++ field's name

    def test_png_beside_the_run_by_default(self):
        cwd = os.path.join(self.dir, "cwd")
        os.makedirs(cwd)
        for run, want in (("run_a", os.path.join("run_a", "plot.png")), ("b.jsonl", "b.png")):
            done = subprocess.run([sys.executable, SCRIPT, os.path.join(self.dir, run)], cwd=cwd,
                                  capture_output=True, text=True)
            self.assertEqual(done.returncode, 0, done.stderr)
            self.assertTrue(os.path.exists(os.path.join(self.dir, want)), want)
            self.assertIn("wrote " + os.path.join(self.dir, want), done.stdout)
        self.assertEqual(os.listdir(cwd), [])

    def test_readme_examples_write_no_tracked_file(self):
        # The plot examples in the READMEs write into a run folder, never over a picture the repository keeps.
        for readme in ("README.md", os.path.join("examples", "README.md"), os.path.join("launch", "run", "README.md")):
            with open(os.path.join(SOURCE, readme)) as f:
                for line in f:
                    if "plot_run.py" in line and "--out" in line:
                        out = re.search(r"--out\s+(\S+)", line).group(1).strip("`")
                        self.assertFalse(out.startswith("examples/"), f"{readme}: {line.strip()}")

    def test_without_matplotlib_one_line_saying_what_to_install(self):
        # A matplotlib that fails to import, for this Python and for /usr/bin/python3 alike.
        fake = os.path.join(self.dir, "fake")
        os.makedirs(os.path.join(fake, "matplotlib"))
        with open(os.path.join(fake, "matplotlib", "__init__.py"), "w") as f:
            f.write("raise ImportError('No module named matplotlib (this test)')\n")
        out = os.path.join(self.dir, "x.png")
        done = subprocess.run([sys.executable, SCRIPT, os.path.join(self.dir, "run_a"), "--out", out],
                              capture_output=True, text=True, env=dict(os.environ, PYTHONPATH=fake))
        self.assertEqual(done.returncode, 1, done.stderr)
        self.assertEqual(len(done.stderr.strip().splitlines()), 1, done.stderr)
        self.assertIn("plot_run.py: needs matplotlib", done.stderr)
        self.assertIn("apt-get install python3-matplotlib", done.stderr)
        self.assertIn("pip install matplotlib", done.stderr)
        self.assertFalse(os.path.exists(out))

    def test_reexecutes_under_the_system_python(self):
        system = "/usr/bin/python3"
        if not os.access(system, os.X_OK) or subprocess.run([system, "-c", "import matplotlib"],
                                                           capture_output=True).returncode != 0:
            self.skipTest("no /usr/bin/python3 with matplotlib")
        # A Python without matplotlib: a virtual environment of the system's, without its site-packages.
        venv = os.path.join(self.dir, "venv")
        if subprocess.run([system, "-m", "venv", "--without-pip", venv], capture_output=True).returncode != 0:
            self.skipTest("cannot make a virtual environment (python3-venv)")
        python = os.path.join(venv, "bin", "python")
        self.assertNotEqual(subprocess.run([python, "-c", "import matplotlib"], capture_output=True).returncode, 0)
        out = os.path.join(self.dir, "venv.png")
        env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
        done = subprocess.run([python, SCRIPT, os.path.join(self.dir, "run_a"), "--out", out], capture_output=True,
                              text=True, env=env)
        self.assertEqual(done.returncode, 0, done.stderr)
        with open(out, "rb") as f:
            self.assertEqual(f.read(8), b"\x89PNG\r\n\x1a\n")
        shutil.rmtree(venv)

    def test_refuses_a_missing_run_and_mismatched_labels(self):
        out = os.path.join(self.dir, "x.png")
        done = subprocess.run([sys.executable, SCRIPT, os.path.join(self.dir, "nope"), "--out", out],
                              capture_output=True, text=True)
        self.assertNotEqual(done.returncode, 0)
        self.assertIn("neither a run folder nor a metrics file", done.stderr)
        done = subprocess.run([sys.executable, SCRIPT, os.path.join(self.dir, "b.jsonl"), "--label", "A", "--label", "B",
                               "--out", out], capture_output=True, text=True)
        self.assertNotEqual(done.returncode, 0)
        self.assertFalse(os.path.exists(out))


if __name__ == "__main__":
    unittest.main()
