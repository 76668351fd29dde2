#!/usr/bin/env python3
"""The one way the example scripts find a Python with matplotlib.

    python3 examples/plot_python.py [--program NAME]    # prints its path, or exits 1 saying what to install

launch/setup_env.sh installs python3-matplotlib for the system's Python
(/usr/bin/python3), but the python3 first on PATH is often a pyenv or
virtualenv interpreter without it. The candidates, in order: this
interpreter (the python3 on PATH, or whichever ran the script), then
/usr/bin/python3. plot_run.py and scaling/report.py call ensure() first
thing in main() and so re-execute themselves under the Python that has it;
scaling/sweep.sh runs this file before it writes anything, to learn which
Python to run the report under or to stop with one line.
"""
import argparse
import os
import subprocess
import sys

SYSTEM_PYTHON = "/usr/bin/python3"
# Set in the environment of a re-executed script: a second miss there is an
# error, never another re-execution.
REEXEC_MARK = "ENGINE_PLOT_PYTHON_REEXEC"
INSTALL = "apt-get install python3-matplotlib (for %s) or pip install matplotlib" % SYSTEM_PYTHON


def has_matplotlib(python=None):
    """Whether `python` (default: this interpreter) can import matplotlib."""
    if python is None:
        try:
            import matplotlib  # noqa: F401
        except ImportError:
            return False
        return True
    try:
        return subprocess.run([python, "-c", "import matplotlib"], stdin=subprocess.DEVNULL,
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=60).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


def candidates():
    """The interpreters tried, in order (this one first), each once."""
    out = []
    for python in (sys.executable, SYSTEM_PYTHON):
        if python and python not in out and os.access(python, os.X_OK):
            out.append(python)
    return out


def find():
    """The path of the first candidate that has matplotlib, or None."""
    for python in candidates():
        if has_matplotlib(None if python == sys.executable else python):
            return python
    return None


def missing_message(program):
    """One line: who needs matplotlib, which interpreters lack it, how to install it."""
    tried = candidates() or ["python3"]
    which = "neither %s nor %s has" % tuple(tried) if len(tried) == 2 else "%s lacks" % tried[0]
    return "%s: needs matplotlib, which %s: %s" % (program, which, INSTALL)


def ensure(program, required=True):
    """True when this interpreter has matplotlib. Otherwise re-executes the
    running script (sys.argv) under the candidate that has it, which does not
    return; with none, exits 1 with missing_message() when `required`, else
    returns False (the caller goes on without plots)."""
    if has_matplotlib():
        return True
    python = None if os.environ.get(REEXEC_MARK) else find()
    if python is not None and python != sys.executable:
        sys.stdout.flush()
        sys.stderr.flush()
        os.execve(python, [python, os.path.abspath(sys.argv[0])] + sys.argv[1:],
                  dict(os.environ, **{REEXEC_MARK: python}))
    if required:
        print(missing_message(program), file=sys.stderr)
        sys.exit(1)
    return False


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--program", default="plot_python.py", help="the name the error line starts with")
    args = parser.parse_args(argv)
    python = find()
    if python is None:
        print(missing_message(args.program), file=sys.stderr)
        return 1
    print(python)
    return 0


if __name__ == "__main__":
    sys.exit(main())
