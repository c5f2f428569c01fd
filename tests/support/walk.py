"""The executor walk: which files a reader passes through following one run from `runs/jobs.py`.

A reader follows `run_id` from the Celery task to the function bodies, depth-first, in the order the
calls happen. This records that order by running the calls (`sys.setprofile`, this thread only:
the renewal thread is not the run's path) and keeps the entries of project functions:

- project: a file under runs/, tasks/, deadletters/ or harness_site/ (not tests/, not libraries);
- read past: inline code (comprehensions, lambdas, module and class bodies) and instrumentation
  (harness_site/tracing.py, harness_site/logs.py: decorators and spans); what they call is followed;
- the engine (runs/, but the store) is followed into every function. A call out of it into another
  layer (the floor: tasks/models, tasks/rules, tasks/skills; the sinks: deadletters/) is one entry,
  its file's: the reader reads that function, not what it calls (those layers have their own walks);
- the run store is read at the call site: `store().retry_later(...)` is the named write it is (its
  contract is tests/runs/test_store_contract.py), so its functions are not entered.
`engine=False` (`--full`) follows every project function, the store's included.

A *stay* is each consecutive stretch of entries in one file; a *return* is a stay in a file the walk
had already left. Reproduce the figures in docs/architecture.md with

    .venv/bin/python -m tests.support.walk [-v] [--full]

(SQLite, a fresh database in a temporary folder; the three walks: a run that succeeds, a run whose
first attempt fails and is retried later, and that run's second attempt, which succeeds.)
"""

import sys
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from types import FrameType
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("runs/", "tasks/", "deadletters/", "harness_site/")
INSTRUMENTATION = ("harness_site/tracing.py", "harness_site/logs.py")
STORE = "runs/engine/store/"


@dataclass(frozen=True)
class Walk:
    entries: tuple[tuple[str, str], ...]  # (file, function), in call order

    @property
    def stays(self) -> list[tuple[str, list[str]]]:
        out: list[tuple[str, list[str]]] = []
        for file, function in self.entries:
            if out and out[-1][0] == file:
                out[-1][1].append(function)
            else:
                out.append((file, [function]))
        return out

    @property
    def returns(self) -> int:
        seen: set[str] = set()
        n = 0
        for file, _ in self.stays:
            n += file in seen
            seen.add(file)
        return n

    @property
    def files(self) -> int:
        return len({file for file, _ in self.entries})

    def entered(self) -> Counter[str]:
        """How many stays each file has."""
        return Counter(file for file, _ in self.stays)

    def summary(self) -> str:
        return f"{len(self.stays)} stays in {self.files} files, {self.returns} returns"


def _project(frame: FrameType) -> str | None:
    """The frame's file relative to the repository, if it is project code."""
    name = frame.f_code.co_filename
    root = str(ROOT) + "/"
    if not name.startswith(root):
        return None
    rel = name[len(root) :]
    return rel if rel.startswith(PACKAGES) else None


def _inline(frame: FrameType) -> bool:
    code = frame.f_code
    # A class body's code is named after the class and starts at its `class` line; skip it as a module body.
    return code.co_name.startswith("<") or (code.co_flags & 0x02 == 0 and code.co_name[:1].isupper())


def _engine(file: str) -> bool:
    return file.startswith("runs/") and not file.startswith(STORE)


def walk(fn: Callable[[], Any], *, engine: bool = True) -> tuple[Any, Walk]:
    """Call `fn` and record the walk of its project function entries (module docstring)."""
    entries: list[tuple[str, str]] = []

    def left_engine(frame: FrameType | None) -> bool:
        """Whether a caller of `frame` is a project function outside the engine (not followed)."""
        while frame is not None:
            file = _project(frame)
            if file is not None and file not in INSTRUMENTATION and not _inline(frame) and not _engine(file):
                return True
            frame = frame.f_back
        return False

    def profile(frame: FrameType, event: str, arg: object) -> None:
        if event != "call":
            return
        file = _project(frame)
        if file is None or file in INSTRUMENTATION or _inline(frame):
            return
        if engine and (file.startswith(STORE) or left_engine(frame.f_back)):
            return
        entries.append((file, frame.f_code.co_name))

    sys.setprofile(profile)
    try:
        result = fn()
    finally:
        sys.setprofile(None)
    return result, Walk(tuple(entries))


def main() -> None:  # pragma: no cover - a tool, run by hand
    import argparse
    import os
    import secrets
    import tempfile

    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("-v", "--verbose", action="store_true", help="print each stay and its functions")
    p.add_argument("--full", action="store_true", help="follow every project function, the store's too")
    args = p.parse_args()
    folder = tempfile.mkdtemp(prefix="walk-")
    os.environ["DATABASE_URL"] = f"sqlite:///{folder}/walk.sqlite3"
    os.environ.setdefault("SECRET_KEY", "walk-" + secrets.token_urlsafe(48))
    os.environ.setdefault("LOG_LEVEL", "ERROR")
    os.environ["DJANGO_SETTINGS_MODULE"] = "harness_site.settings"
    import django

    django.setup()
    from django.core.management import call_command
    from django.db import transaction
    from django.utils import timezone

    from runs.engine.claims import run_claim
    from runs.jobs import run_execute_task
    from runs.models import TaskRun
    from tests.support.runs import api_work

    call_command("migrate", verbosity=0)

    def claim(key: str, skill: str, params: dict) -> int:
        work = api_work(key, skill=skill, params=params, policy={"max_attempts": 3})
        with transaction.atomic():
            result = run_claim(work, now=timezone.now(), dispatch=False)
        assert result.run is not None
        return result.run.id

    def due(run_id: int) -> None:
        """The retry's backoff has passed (as the sweeper would find it)."""
        TaskRun.objects.filter(id=run_id).update(run_after=timezone.now())

    fails = {"fail_attempts": 1}  # harness.fail: attempt 1 times out (retryable), attempt 2 succeeds
    # Warm: the first run of each path imports what it needs (the URLconf for an alert's link).
    warm = claim("walk:warm:ok", "harness.noop", {}), claim("walk:warm:fail", "harness.fail", fails)
    run_execute_task(warm[0])
    run_execute_task(warm[1])
    due(warm[1])
    run_execute_task(warm[1])
    ok, failing = claim("walk:ok", "harness.noop", {}), claim("walk:fail", "harness.fail", fails)
    walks = {}
    for name, run_id in (("succeeds", ok), ("fails, retried later", failing), ("retry succeeds", failing)):
        if name == "retry succeeds":
            due(run_id)
        status, walks[name] = walk(lambda r=run_id: run_execute_task(r), engine=not args.full)
        print(f"{name:<22} ({status}): {walks[name].summary()}")
        if args.verbose:
            for file, functions in walks[name].stays:
                print(f"    {file}: {', '.join(functions)}")
    total = sum(w.returns for w in walks.values())
    print(f"returns in all three: {total}; most entered: {', '.join(_most(walks))}")


def _most(walks: dict[str, Walk]) -> list[str]:
    counts: Counter[str] = Counter()
    for w in walks.values():
        counts.update(w.entered())
    return [f"{file} x{n}" for file, n in counts.most_common(3)]


if __name__ == "__main__":
    main()
