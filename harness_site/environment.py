"""Settings read from the environment, each one checked.

A bad value becomes one line that names the variable, says what is wrong with its value and gives a
good one (`HARNESS_TICK_SECONDS='0': below 1 (a busy loop); give a whole number from 1 to 3600, e.g.
HARNESS_TICK_SECONDS=1`). The settings module reads every value first and then calls `finish()`, which
prints the lines on stderr and stops the process with EX_CONFIG, no traceback: web, workers, beat and
manage.py alike, since each of them imports the settings before anything else.
"""

import difflib
import math
import os
import re
import sys
from collections.abc import Callable, Iterable, Mapping
from urllib.parse import urlsplit

import environ

# sysexits.h: "something was found in an unconfigured or misconfigured state".
EX_CONFIG = 78
_TRUE, _FALSE = {"true", "1", "yes", "on"}, {"false", "0", "no", "off"}
_WHOLE = re.compile(r"[+-]?[0-9]+")
_DECIMAL = re.compile(r"[+-]?([0-9]+\.?[0-9]*|\.[0-9]+)")


def shown(value: str) -> str:
    """A value as a problem line may print it: credentials in a URL masked, control characters escaped."""
    masked = re.sub(r"(//[^/@:]*:)[^/@]*@", r"\1***@", value)
    return repr(masked)


class Environment:
    """Reads typed settings from `environ`, collecting one line per bad value instead of raising."""

    def __init__(self, env: Mapping[str, str] | None = None):
        self.env = os.environ if env is None else env
        self.problems: list[str] = []
        # Every name a reader was asked for: the one list of our settings, so a name is written once.
        self.names: set[str] = set()

    # --- reporting ------------------------------------------------------------------------------

    def refuse(self, name: str, problem: str, example: str, *, value: str | None = None) -> None:
        """Record one problem line. `value` None: the value is not repeated (a key or a token)."""
        said = f"{name}={shown(value)}" if value is not None else name
        self.problems.append(f"{said}: {problem}; e.g. {name}={example}")

    def refuse_unread(self, prefix: str, *, besides: str) -> None:
        """Record each variable under `prefix` that no reader was asked for (a typo would otherwise do
        nothing). Call it after the last read. Names under `besides` (the secrets' prefix) are values
        handed out, not settings."""
        for name in sorted(self.env):
            if name.startswith(prefix) and name not in self.names and not name.startswith(besides):
                close = difflib.get_close_matches(name, sorted(self.names), n=1)
                guess = f"did you mean {close[0]}? " if close else ""
                self.problems.append(f"{name}: unknown setting ({guess}.env.example lists every one)")

    def finish(self, *, out=None) -> None:
        """Stop the process (EX_CONFIG) with the problem lines, if any; return otherwise."""
        if not self.problems:
            return
        out = out or sys.stderr
        for line in self.problems:
            out.write(f"configuration error: {line}\n")
        out.flush()
        raise SystemExit(EX_CONFIG)

    # --- typed readers: each returns the default when the value is refused -------------------------

    def raw(self, name: str) -> str | None:
        self.names.add(name)
        return self.env.get(name)

    def text(self, name: str, *, default: str = "") -> str:
        value = self.raw(name)
        return default if value is None else value

    def boolean(self, name: str, *, default: bool) -> bool:
        """Strict: django-environ reads any unknown word (DEBUG=maybe) as false."""
        value = self.raw(name)
        if value is None:
            return default
        if value.lower() in _TRUE:
            return True
        if value.lower() in _FALSE:
            return False
        self.refuse(name, "not a boolean; use true or false (or 1/0, yes/no, on/off)", "true", value=value)
        return default

    def whole(self, name: str, *, default: int, low: int, high: int, why_low: str = "") -> int:
        value = self.raw(name)
        if value is None:
            return default
        wanted = f"give a whole number from {low} to {high}"
        if not value.isascii() or not _WHOLE.fullmatch(value.strip()):
            self.refuse(name, f"not a whole number; {wanted}", str(default), value=value)
            return default
        number = int(value)
        if not low <= number <= high:
            side = f"below {low}{f' ({why_low})' if why_low else ''}" if number < low else f"above {high}"
            self.refuse(name, f"{side}; {wanted}", str(default), value=value)
            return default
        return number

    def number(
        self, name: str, *, default: float, low: float, high: float, low_open: bool = False, why_low: str = ""
    ) -> float:
        value = self.raw(name)
        if value is None:
            return default
        lowest = f"more than {low:g}" if low_open else f"from {low:g}"
        wanted = f"give a number of seconds {lowest} to {high:g}"
        example = f"{default:g}"
        if not value.isascii() or not _DECIMAL.fullmatch(value.strip()):
            self.refuse(name, f"not a number; {wanted}", example, value=value)
            return default
        number = float(value)
        too_low = number <= low if low_open else number < low
        if not math.isfinite(number) or too_low or number > high:
            side = f"too small{f' ({why_low})' if why_low else ''}" if too_low else "too large"
            self.refuse(name, f"{side}; {wanted}", example, value=value)
            return default
        return number

    def one_of(self, name: str, *, default: str, choices: Iterable[str], normalize: Callable = str.lower) -> str:
        value = self.raw(name)
        if value is None:
            return default
        choices = list(choices)
        if normalize(value.strip()) not in {normalize(c) for c in choices}:
            self.refuse(name, f"not one of {', '.join(choices)}", default, value=value)
            return default
        return normalize(value.strip())

    def items(self, name: str, *, default: list[str] | None = None) -> list[str]:
        value = self.raw(name)
        if value is None:
            return list(default or [])
        return [item.strip() for item in value.split(",") if item.strip()]

    def url(self, name: str, *, default: str, schemes: Iterable[str], example: str, needs_host: bool = True) -> str:
        """A URL of one of `schemes`, with a host (unless `needs_host`) and a numeric port if any."""
        value = self.raw(name)
        if value is None:
            return default
        problem = url_problem(value, schemes=schemes, needs_host=needs_host)
        if problem:
            self.refuse(name, problem, example, value=value)
            return default
        return value

    def database(self, name: str, *, default: str) -> dict:
        """Django's DATABASES entry for a sqlite:// or postgres:// URL."""
        value = self.raw(name)
        example = "postgres://harness@db.internal:5432/harness"
        if value is not None:
            problem = url_problem(value, schemes=DATABASE_SCHEMES, needs_host=False)
            if problem is None and urlsplit(value).scheme in POSTGRES_SCHEMES and not urlsplit(value).path.strip("/"):
                problem = "names no database (the path after the host)"
            if problem is None and urlsplit(value).scheme == "sqlite" and not urlsplit(value).path:
                problem = "names no file (sqlite:////absolute/path.sqlite3)"
            if problem:
                self.refuse(name, problem, example, value=value)
                value = None
        try:
            return environ.Env.db_url_config(value or default)
        except (ValueError, KeyError) as exc:  # what db_url_config itself still refuses
            self.refuse(name, f"not a database URL ({exc})", example, value=value)
            return environ.Env.db_url_config(default)


DATABASE_SCHEMES = ("sqlite", "postgres", "postgresql", "pgsql")
POSTGRES_SCHEMES = ("postgres", "postgresql", "pgsql")


def url_problem(value: str, *, schemes: Iterable[str], needs_host: bool = True) -> str | None:
    """What is wrong with `value` as a URL of one of `schemes`, or None."""
    schemes = tuple(schemes)
    if any(c.isspace() or not c.isprintable() for c in value):
        return "contains spaces or control characters"
    parts = urlsplit(value)
    if "://" not in value or not parts.scheme:
        return f"not a URL; use one of {', '.join(s + '://' for s in schemes)}"
    if parts.scheme.lower() not in schemes:
        return f"unknown scheme {parts.scheme}://; use one of {', '.join(s + '://' for s in schemes)}"
    try:
        port = parts.port
    except ValueError:
        return "its port is not a number from 1 to 65535"
    if port == 0:
        return "its port is not a number from 1 to 65535"
    if needs_host and not parts.hostname:
        return "names no host"
    return None
