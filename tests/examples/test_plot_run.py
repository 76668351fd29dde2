"""examples/plot_run.py on synthetic metrics: a run folder and a JSONL file
overlaid (with events, validation records, a resumed step, a null value and a
partial last line) give one PNG; bad arguments are refused."""
import json
import math
import os
import subprocess
import sys
import tempfile
import unittest

SCRIPT = os.path.join(os.environ.get("ENGINE_SOURCE_DIR", os.path.join(os.path.dirname(__file__), "..", "..")),
                      "examples", "plot_run.py")
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
