"""Tests of launch/supervise, run on small Python child jobs.

Each test writes a plan (JSON) into a temporary folder; the child job reads it,
records its ENGINE_RESTART_COUNT in a trace file, appends the attempt's metrics
records, prints the attempt's stderr lines and exits as the plan says. Every
wait is bounded, and the only processes killed are ones these tests started
(supervise itself, and the child and grandchild whose pids they wrote down).

    ENGINE_SUPERVISE=launch/supervise python3 -m unittest -v test_supervise
"""
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import threading
import time
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
SUPERVISE = os.environ.get("ENGINE_SUPERVISE") or os.path.join(HERE, "..", "..", "launch", "supervise")

CHILD = r'''
import json, os, signal, subprocess, sys, time
plan = json.load(open(sys.argv[1]))
k = int(os.environ["ENGINE_RESTART_COUNT"])
with open(plan["trace"], "a") as f:
    f.write(f"{k}\n")
with open(plan["pid"], "w") as f:
    f.write(str(os.getpid()))
a = plan["attempts"][min(k, len(plan["attempts"]) - 1)]
if a.get("records"):
    with open(plan["metrics"], "a") as f:
        for r in a["records"]:  # a str is written as is: a half-written line
            f.write(r if isinstance(r, str) else json.dumps(r) + "\n")
for line in a.get("stdout", []):
    print(line, flush=True)
for line in a.get("stderr", []):
    print(line, file=sys.stderr, flush=True)
if "on_stop" in a:  # "exit_75": a clean stop; "ignore": keep running
    got = []
    def on_stop(*_):
        got.append(1)
        with open(plan["marker"], "a") as f:
            f.write("stop\n")
        if len(got) == 2 and a["on_stop"] == "abort_second":
            os._exit(138)  # what the trainer does on a second stop signal: 128 + SIGUSR1
    signal.signal(getattr(signal, a.get("trap", "SIGUSR1")), on_stop)
    if a.get("grandchild"):  # in the child's process group, like an mpirun rank
        gc = subprocess.Popen([sys.executable, "-c", plan["grandchild_code"], plan["grandchild_marker"],
                               plan["grandchild_ready"]])
        with open(plan["grandchild_pid"], "w") as f:
            f.write(str(gc.pid))
        deadline = time.monotonic() + 10
        while not os.path.exists(plan["grandchild_ready"]) and time.monotonic() < deadline:
            time.sleep(0.01)
    open(plan["ready"], "w").close()
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        if got and a["on_stop"] == "exit_75":
            sys.exit(75)
        time.sleep(0.01)
    sys.exit(3)
if a.get("kill_self"):
    os.kill(os.getpid(), signal.SIGKILL)
sys.exit(a.get("exit", 0))
'''

GRANDCHILD = r'''
import signal, sys, time
def on_usr1(*_):
    with open(sys.argv[1], "a") as f:
        f.write("usr1\n")
signal.signal(signal.SIGUSR1, on_usr1)
open(sys.argv[2], "w").close()
time.sleep(30)
'''


def step(n, seconds, **extra):
    return dict({"step": n, "loss": 3.0, "step_time_s": seconds}, **extra)


def alive(pid):
    """True while pid runs (a zombie counts as gone)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except (FileNotFoundError, ProcessLookupError, IndexError):
        return False


def wait_until(predicate, timeout=10.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.01)
    return predicate()


class Running:
    """supervise started in the background, its stderr collected by a thread."""

    def __init__(self, argv):
        self.proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        self.lines = []
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    def _read(self):
        with self.proc.stderr:
            for line in self.proc.stderr:
                self.lines.append(line.decode())

    @property
    def stderr(self):
        return "".join(self.lines)

    def finish(self, timeout=20):
        code = self.proc.wait(timeout)
        self.reader.join(5)
        return code


class SuperviseTest(unittest.TestCase):
    def setUp(self):
        tmp = tempfile.TemporaryDirectory()
        self.addCleanup(tmp.cleanup)
        self.dir = tmp.name
        self.path = lambda name: os.path.join(self.dir, name)
        self.child = self.path("child.py")
        with open(self.child, "w") as f:
            f.write(CHILD)
        self.metrics = self.path("metrics.jsonl")
        self.report = self.path("report.json")
        self.addCleanup(self.kill_leftovers)

    def kill_leftovers(self):
        """Only after a failed assertion could these still run; kill them by the pids
        they wrote, after checking the pid still runs one of our scripts."""
        for name in ("pid", "grandchild_pid"):
            try:
                with open(self.path(name)) as f:
                    pid = int(f.read())
                with open(f"/proc/{pid}/cmdline", "rb") as f:
                    ours = self.child.encode() in f.read() or name == "grandchild_pid"
                if ours and alive(pid):
                    os.kill(pid, signal.SIGKILL)
            except (OSError, ValueError):
                pass

    def argv(self, options, attempts, extra=()):
        plan = {"attempts": attempts, "trace": self.path("trace"), "pid": self.path("pid"),
                "metrics": self.metrics, "marker": self.path("marker"), "ready": self.path("ready"),
                "grandchild_code": GRANDCHILD, "grandchild_marker": self.path("grandchild_marker"),
                "grandchild_ready": self.path("grandchild_ready"), "grandchild_pid": self.path("grandchild_pid")}
        with open(self.path("plan.json"), "w") as f:
            json.dump(plan, f)
        return [sys.executable, SUPERVISE, *options, "--report", self.report, "--",
                sys.executable, self.child, self.path("plan.json"), *extra]

    def run_supervise(self, options, attempts, extra=(), timeout=30):
        return subprocess.run(self.argv(options, attempts, extra), capture_output=True, text=True, timeout=timeout)

    def start(self, options, attempts):
        running = Running(self.argv(options, attempts))
        self.addCleanup(lambda: running.proc.poll() is None and running.proc.kill())
        return running

    def trace(self):
        with open(self.path("trace")) as f:
            return f.read().split()

    def load_report(self):
        with open(self.report) as f:
            return json.load(f)

    # ---- exit codes ---------------------------------------------------------
    def test_success_first_try(self):
        r = self.run_supervise(["--metrics", self.metrics],
                               [{"exit": 0, "stdout": ["hello from the job"], "records": [step(1, 0.5)]}])
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual(r.stdout, "hello from the job\n")  # the job's stdout, untouched
        self.assertEqual(self.trace(), ["0"])
        self.assertNotIn("restarting in", r.stderr)
        self.assertRegex(r.stderr, r"supervise: goodput \d+\.\d% \(0\.5 s in 1 steps that counted, "
                                   r"of \d+\.\d s wall; 1 attempt, 0 restarts\)\n")
        report = self.load_report()
        self.assertEqual(report["outcome"], "done")
        self.assertEqual(report["restarts"], 0)
        self.assertEqual([a["exit_code"] for a in report["attempts"]], [0])
        self.assertEqual(report["attempts"][0]["cause"], "exit 0 (done)")

    def test_failure_then_success(self):
        attempts = [{"exit": 1, "stderr": ["loading", "error: NCCL timeout on rank 3", "rank 3 exiting"]},
                    {"exit": 0}]
        r = self.run_supervise(["--backoff", "0.1"], attempts)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual(self.trace(), ["0", "1"])  # ENGINE_RESTART_COUNT 0, then 1
        self.assertIn("loading\nerror: NCCL timeout on rank 3\nrank 3 exiting\n", r.stderr)  # echoed
        self.assertRegex(r.stderr, r"supervise: attempt 1 failed after \d+\.?\d* s: exit 1; "
                                   r"last error: error: NCCL timeout on rank 3; "
                                   r"restarting in 0\.1 s \(restart 1 of 3\)\n")
        report = self.load_report()
        self.assertEqual(report["outcome"], "done")
        self.assertEqual(report["restarts"], 1)
        self.assertEqual([a["exit_code"] for a in report["attempts"]], [1, 0])
        self.assertGreaterEqual(report["attempts"][1]["start_s"],
                                report["attempts"][0]["start_s"] + report["attempts"][0]["seconds"] + 0.1)

    def test_exit_75_is_passed_through_and_not_restarted(self):
        r = self.run_supervise(["--backoff", "0.1"], [{"exit": 75}, {"exit": 0}])
        self.assertEqual(r.returncode, 75, r.stderr)
        self.assertEqual(self.trace(), ["0"])
        self.assertNotIn("restarting in", r.stderr)
        self.assertIn("stopped on request", r.stderr)
        self.assertEqual(self.load_report()["outcome"], "stopped")

    def test_usage_and_data_errors_are_not_retried(self):
        for code, name in ((65, "bad input data"), (64, "usage error")):
            with self.subTest(code=code):
                os.unlink(self.path("trace")) if os.path.exists(self.path("trace")) else None
                r = self.run_supervise(["--backoff", "0.1"], [{"exit": code, "stderr": ["error: shard 3 is empty"]},
                                                              {"exit": 0}])
                self.assertEqual(r.returncode, code, r.stderr)
                self.assertEqual(self.trace(), ["0"])
                self.assertIn(f"attempt 1 failed: exit {code} ({name}); last error: error: shard 3 is empty; "
                              "restarting cannot help, not retrying", r.stderr)
                report = self.load_report()
                self.assertEqual((report["outcome"], report["restarts"]), ("not_retried", 0))

    def test_gives_up_after_max_restarts_with_doubling_backoff(self):
        attempts = [{"exit": 124, "stderr": ["Error: collective timed out after 600 s"]}]
        r = self.run_supervise(["--max-restarts", "4", "--backoff", "0.03", "--max-backoff", "0.1"], attempts)
        self.assertEqual(r.returncode, 124, r.stderr)
        self.assertEqual(self.trace(), ["0", "1", "2", "3", "4"])
        delays = re.findall(r"restarting in (\S+) s \(restart (\d) of 4\)", r.stderr)
        self.assertEqual(delays, [("0.03", "1"), ("0.06", "2"), ("0.1", "3"), ("0.1", "4")])  # 0.12 capped
        self.assertIn("supervise: giving up after 4 restarts: exit 124 (collective timeout); "
                      "last error: Error: collective timed out after 600 s\n", r.stderr)
        report = self.load_report()
        self.assertEqual((report["outcome"], report["restarts"]), ("gave_up", 4))
        self.assertEqual([a["exit_code"] for a in report["attempts"]], [124] * 5)

    def test_child_killed_by_sigkill(self):
        r = self.run_supervise(["--max-restarts", "1", "--backoff", "0.05"], [{"kill_self": True}])
        self.assertEqual(r.returncode, 137, r.stderr)
        self.assertEqual(self.trace(), ["0", "1"])
        self.assertRegex(r.stderr, r"attempt 1 failed after \S+ s: killed by SIGKILL; last error: none; "
                                   r"restarting in 0\.05 s \(restart 1 of 1\)")
        self.assertIn("giving up after 1 restart: killed by SIGKILL; last error: none\n", r.stderr)
        self.assertEqual([a["exit_code"] for a in self.load_report()["attempts"]], [137, 137])

    def test_exit_137_from_mpirun_is_named(self):
        r = self.run_supervise(["--max-restarts", "0"], [{"exit": 137}])
        self.assertEqual(r.returncode, 137, r.stderr)
        self.assertIn("giving up after 0 restarts: exit 137 (killed by SIGKILL); last error: none\n", r.stderr)

    def test_command_not_found(self):
        r = subprocess.run([sys.executable, SUPERVISE, "--report", self.report, "--",
                            self.path("no-such-program")], capture_output=True, text=True, timeout=30)
        self.assertEqual(r.returncode, 127, r.stderr)
        self.assertEqual(self.load_report()["outcome"], "not_retried")

    # ---- signals --------------------------------------------------------------
    def test_sigterm_forwards_stop_signal_to_the_main_process_only(self):
        job = self.start(["--backoff", "0.05"], [{"on_stop": "exit_75", "grandchild": True}, {"exit": 0}])
        self.assertTrue(wait_until(lambda: os.path.exists(self.path("ready"))), job.stderr)
        with open(self.path("grandchild_pid")) as f:
            grandchild = int(f.read())
        job.proc.send_signal(signal.SIGTERM)
        self.assertEqual(job.finish(), 75, job.stderr)
        with open(self.path("marker")) as f:
            self.assertEqual(f.read(), "stop\n")  # the job got SIGUSR1 once
        self.assertFalse(os.path.exists(self.path("grandchild_marker")))  # not sent to the group
        self.assertEqual(self.trace(), ["0"])
        self.assertIn("got SIGTERM (stop request 1): sent SIGUSR1 to the job", job.stderr)
        self.assertNotIn("restarting in", job.stderr)
        # The grandchild the job left behind was killed with the job's group.
        self.assertTrue(wait_until(lambda: not alive(grandchild), 5))
        self.assertEqual(self.load_report()["outcome"], "stopped")

    def test_stop_signal_option(self):
        job = self.start(["--stop-signal", "usr2"], [{"on_stop": "exit_75", "trap": "SIGUSR2"}])
        self.assertTrue(wait_until(lambda: os.path.exists(self.path("ready"))), job.stderr)
        job.proc.send_signal(signal.SIGINT)
        self.assertEqual(job.finish(), 75, job.stderr)
        self.assertIn("got SIGINT (stop request 1): sent SIGUSR2 to the job", job.stderr)

    def test_second_request_forwards_again_and_third_kills_the_group(self):
        job = self.start(["--backoff", "0.05"], [{"on_stop": "ignore"}, {"exit": 0}])
        self.assertTrue(wait_until(lambda: os.path.exists(self.path("ready"))), job.stderr)
        def stops():
            if not os.path.exists(self.path("marker")):
                return 0
            with open(self.path("marker")) as f:
                return f.read().count("stop")
        job.proc.send_signal(signal.SIGTERM)
        self.assertTrue(wait_until(lambda: stops() == 1), job.stderr)
        job.proc.send_signal(signal.SIGINT)
        self.assertTrue(wait_until(lambda: stops() == 2), job.stderr)
        job.proc.send_signal(signal.SIGTERM)
        self.assertEqual(job.finish(), 143, job.stderr)  # stopped on request, not cleanly
        self.assertEqual(self.trace(), ["0"])  # never restarted after a stop request
        self.assertIn("got SIGINT (stop request 2): sent SIGUSR1 to the job", job.stderr)
        self.assertIn("got SIGTERM (stop request 3): sent SIGKILL to the job's process group", job.stderr)
        self.assertIn("ended after a stop request: killed by SIGKILL", job.stderr)
        self.assertEqual(self.load_report()["outcome"], "stopped")

    def test_sigusr1_is_a_stop_request(self):
        """Slurm's --signal=USR1 warning reaches supervise itself: it must stop the job
        (and not die of it, leaving the job orphaned)."""
        job = self.start([], [{"on_stop": "exit_75", "grandchild": True}])
        self.assertTrue(wait_until(lambda: os.path.exists(self.path("ready"))), job.stderr)
        with open(self.path("grandchild_pid")) as f:
            grandchild = int(f.read())
        job.proc.send_signal(signal.SIGUSR1)
        self.assertEqual(job.finish(), 75, job.stderr)
        self.assertIn("got SIGUSR1 (stop request 1): sent SIGUSR1 to the job", job.stderr)
        with open(self.path("marker")) as f:
            self.assertEqual(f.read(), "stop\n")
        self.assertTrue(wait_until(lambda: not alive(grandchild), 5))

    def test_three_quick_stop_signals_end_the_same_way(self):
        """Three SIGTERMs 0.3 s apart: whether the job aborts on the second request
        (exit 138, as the trainer does) or is killed by the third, supervise exits 143."""
        for behaviour in ("abort_second", "ignore"):
            with self.subTest(behaviour=behaviour):
                for name in ("ready", "marker", "trace"):
                    if os.path.exists(self.path(name)):
                        os.unlink(self.path(name))
                job = self.start([], [{"on_stop": behaviour}])
                self.assertTrue(wait_until(lambda: os.path.exists(self.path("ready"))), job.stderr)
                for i in range(3):
                    if job.proc.poll() is None:
                        job.proc.send_signal(signal.SIGTERM)
                    time.sleep(0.3)
                self.assertEqual(job.finish(), 143, job.stderr)
                self.assertEqual(self.load_report()["outcome"], "stopped")
                self.assertEqual(self.trace(), ["0"])

    def test_stop_during_backoff_exits_75_at_once(self):
        job = self.start(["--backoff", "30"], [{"exit": 1}, {"exit": 0}])
        self.assertTrue(wait_until(lambda: "restarting in 30.0 s" in job.stderr), job.stderr)
        sent = time.monotonic()
        job.proc.send_signal(signal.SIGTERM)
        self.assertEqual(job.finish(timeout=10), 75, job.stderr)
        self.assertLess(time.monotonic() - sent, 5)
        self.assertIn("stop requested during the backoff; not restarting", job.stderr)
        self.assertEqual(self.trace(), ["0"])
        self.assertEqual(self.load_report()["outcome"], "stopped")

    # ---- goodput ---------------------------------------------------------------
    def test_goodput_counts_applied_steps_only(self):
        attempts = [
            {"exit": 1, "records": [step(1, 0.5), step(2, 0.25), {"step": 2, "val_loss": 3.1},
                                    '{"step": 3, "loss": 3.0, "step_ti']},  # killed mid-line
            {"exit": 0, "records": [{"event": "resume", "step": 2}, step(3, 0.125, skipped=True),
                                    step(3, 1.0), step(4, 2)]},
        ]
        r = self.run_supervise(["--backoff", "0.1", "--metrics", self.metrics], attempts)
        self.assertEqual(r.returncode, 0, r.stderr)
        report = self.load_report()
        self.assertEqual(report["useful_s"], 0.5 + 0.25 + 1.0 + 2)
        self.assertEqual(report["steps"], 4)
        self.assertEqual(report["unparsable_lines"], 1)  # the half line, with the resume event glued on
        self.assertAlmostEqual(report["goodput"], report["useful_s"] / report["wall_s"], places=9)
        self.assertGreaterEqual(report["wall_s"], sum(a["seconds"] for a in report["attempts"]) + 0.1)
        self.assertEqual((report["restarts"], len(report["attempts"])), (1, 2))
        line = (f"supervise: goodput {report['goodput'] * 100:.1f}% (3.8 s in 4 steps that counted, "
                f"of {report['wall_s']:.1f} s wall; 2 attempts, 1 restart; 1 unparsable line(s) skipped)\n")
        self.assertIn(line, r.stderr)

    def test_goodput_counts_only_steps_a_checkpoint_kept(self):
        # A job that never finishes: the steps after its last checkpoint are lost work.
        ckpt = lambda n: {"event": "checkpoint", "step": n, "seconds": 0.01}
        attempts = [
            {"exit": 1, "records": [step(1, 0.5), step(2, 0.25), ckpt(2), step(3, 4.0)]},
            {"exit": 1, "records": [{"event": "resume", "step": 2}, step(3, 1.0), step(4, 8.0)]},
        ]
        r = self.run_supervise(["--max-restarts", "1", "--backoff", "0.05", "--metrics", self.metrics], attempts)
        self.assertEqual(r.returncode, 1, r.stderr)
        report = self.load_report()
        self.assertEqual(report["outcome"], "gave_up")
        self.assertEqual((report["useful_s"], report["steps"], report["steps_not_kept"]), (0.75, 2, 3))
        self.assertIn("3 step(s) after the last checkpoint not counted", r.stderr)
        # Stopped on request: the checkpoint it wrote as it stopped keeps its steps.
        os.unlink(self.metrics)
        attempts = [{"exit": 75, "records": [step(1, 0.5), step(2, 0.25), ckpt(2),
                                             {"event": "stopped", "step": 2}]}]
        r = self.run_supervise(["--metrics", self.metrics], attempts)
        self.assertEqual(r.returncode, 75, r.stderr)
        report = self.load_report()
        self.assertEqual((report["useful_s"], report["steps"], report["steps_not_kept"]), (0.75, 2, 0))
        # A resume that found nothing (exit 65) wrote no records: no goodput claimed.
        os.unlink(self.metrics)
        r = self.run_supervise(["--metrics", self.metrics], [{"exit": 65}])
        self.assertEqual(r.returncode, 65, r.stderr)
        self.assertIsNone(self.load_report()["goodput"])

    def test_records_from_before_supervise_are_left_out(self):
        with open(self.metrics, "w") as f:
            f.write(json.dumps(step(1, 100.0)) + "\n" + json.dumps(step(2, 100.0)) + "\n")
        r = self.run_supervise(["--metrics", self.metrics], [{"exit": 0, "records": [step(3, 0.5)]}])
        self.assertEqual(r.returncode, 0, r.stderr)
        report = self.load_report()
        self.assertEqual((report["useful_s"], report["steps"], report["earlier_lines_ignored"]), (0.5, 1, 2))

    def test_log_file_is_found_in_the_command(self):
        run_dir = os.path.dirname(self.metrics)
        self.assertEqual(os.path.basename(self.metrics), "metrics.jsonl")  # what a run folder holds
        for form in (["--log-file", "METRICS"], ["--log-file=METRICS"], ["--run-dir", run_dir], [f"--run-dir={run_dir}"]):
            with self.subTest(form=form):
                if os.path.exists(self.metrics):
                    os.unlink(self.metrics)
                extra = [w.replace("METRICS", self.metrics) for w in ["--steps", "10", *form, "--resume", "auto"]]
                r = self.run_supervise([], [{"exit": 0, "records": [step(1, 0.75), step(2, 0.25)]}], extra)
                self.assertEqual(r.returncode, 0, r.stderr)
                report = self.load_report()
                self.assertEqual(report["metrics_file"], self.metrics)
                self.assertEqual((report["useful_s"], report["steps"]), (1.0, 2))

    def test_no_metrics_file(self):
        r = self.run_supervise([], [{"exit": 0}])
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("no goodput: no metrics file was named", r.stderr)
        self.assertIsNone(self.load_report()["goodput"])
        r = self.run_supervise(["--metrics", self.path("missing.jsonl")], [{"exit": 0}])
        self.assertIn(f"no goodput: metrics file {self.path('missing.jsonl')} was not found", r.stderr)

    # ---- usage ------------------------------------------------------------------
    def test_bad_usage_exits_64(self):
        cases = [[], ["--"], ["true"], ["--max-restarts", "-1", "--", "true"], ["--backoff", "-2", "--", "true"],
                 ["--backoff", "nan", "--", "true"], ["--max-backoff", "x", "--", "true"],
                 ["--stop-signal", "SIGFOO", "--", "true"], ["--bogus", "--", "true"]]
        for argv in cases:
            with self.subTest(argv=argv):
                r = subprocess.run([sys.executable, SUPERVISE, *argv], capture_output=True, text=True, timeout=30)
                self.assertEqual(r.returncode, 64, r.stderr)
                self.assertRegex(r.stderr, r"\Asupervise: error: [^\n]+\n\Z")
                self.assertEqual(r.stdout, "")


if __name__ == "__main__":
    unittest.main()
