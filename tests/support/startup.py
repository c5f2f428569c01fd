"""Start-ups of the real settings module, many cases in one child process.

Each case runs harness_site.settings afresh (runpy) in a fresh environment, as a start-up would,
and keeps its exit code and what it wrote to stderr. One start-up per case in a process of its own
cost about 2 s of CPU each; the cases of a test file share one child instead."""

import json
import os
import subprocess
import sys

from tests.support.processes import ROOT

# In the child: for each case, the parent's environment without the names the case drops plus the
# case's own, then the settings module run afresh; its error (what a start-up would print) or none.
CHILD = """
import contextlib, io, json, os, runpy, sys, traceback
job = json.load(sys.stdin)
base = {k: v for k, v in os.environ.items() if k not in set(job["drop"])}
out = {}
for name, env in job["cases"].items():
    os.environ.clear()
    os.environ.update({**base, **env})
    err = io.StringIO()
    try:
        with contextlib.redirect_stderr(err):
            runpy.run_module("harness_site.settings", run_name="harness_site.settings")
        out[name] = {"ok": True, "stderr": err.getvalue()}
    except SystemExit as exc:  # a refused value: its lines on stderr, no traceback
        out[name] = {"ok": False, "code": exc.code, "stderr": err.getvalue()}
    except Exception:
        out[name] = {"ok": False, "code": 1, "stderr": traceback.format_exc()}
json.dump(out, sys.stdout)
"""


class Started:
    def __init__(self, outcome: dict):
        self.returncode = 0 if outcome["ok"] else outcome["code"]
        self.stderr = outcome["stderr"]


def start_ups(cases: dict[str, dict[str, str]], *, env: dict[str, str] | None = None, drop=()) -> dict[str, Started]:
    """Each case's start-up: `env` (default: this process's) minus `drop`, plus the case's variables."""
    done = subprocess.run(
        [sys.executable, "-c", CHILD],
        cwd=ROOT,
        env={**(env or os.environ), "DJANGO_SETTINGS_MODULE": "harness_site.settings"},
        input=json.dumps({"cases": cases, "drop": list(drop)}),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return {name: Started(outcome) for name, outcome in json.loads(done.stdout).items()}
