"""Is this request body JSON we can store? Strict parsing for every HTTP and event input. Pure.

Python's json module accepts things no database or peer does: NaN, Infinity and 1e999 (stored as
invalid JSON on PostgreSQL), NUL characters (PostgreSQL text and jsonb refuse them), lone surrogates
(not encodable as UTF-8), and nesting deep enough to exhaust the interpreter's recursion. Each is a
clear ValueError here, so the caller answers 400 instead of failing at write time with a 500.
"""

import json
import math

MAX_DEPTH = 32  # objects and arrays inside each other; real payloads are a few levels deep


def _constant(name: str):
    raise ValueError(f"{name} is not JSON (only finite numbers are)")


def _finite(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise ValueError(f"number {text[:40]} is out of range")
    return value


def strict_loads(data: bytes | str) -> object:
    """The parsed document; ValueError (with what and where) for anything a database would refuse."""
    if isinstance(data, bytes):
        try:
            data = data.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise ValueError(f"not UTF-8: {exc}") from None
    try:
        document = json.loads(data, parse_constant=_constant, parse_float=_finite)
    except RecursionError:
        raise ValueError(f"nested deeper than {MAX_DEPTH} levels") from None
    # json.JSONDecodeError is a ValueError; so are over-long integers (int_max_str_digits).
    check_storable(document)
    return document


def check_storable(document: object) -> None:
    """Raise ValueError if `document` nests deeper than MAX_DEPTH or holds a string no database takes."""
    stack = [(document, 1, "$")]
    while stack:
        value, depth, where = stack.pop()
        if isinstance(value, dict | list):
            if depth > MAX_DEPTH:
                raise ValueError(f"nested deeper than {MAX_DEPTH} levels at {where[:80]}")
            items = value.items() if isinstance(value, dict) else enumerate(value)
            for key, item in items:
                if isinstance(key, str):
                    _check_text(key, f"{where} key")
                stack.append((item, depth + 1, f"{where}.{key}"[:200]))
        elif isinstance(value, str):
            _check_text(value, where)
        elif isinstance(value, float) and not math.isfinite(value):
            raise ValueError(f"{where[:80]}: {value} is not a JSON number")


def _check_text(text: str, where: str) -> None:
    if "\x00" in text:
        raise ValueError(f"{where[:80]}: NUL characters (\\u0000) are not accepted")
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        raise ValueError(f"{where[:80]}: a lone surrogate (\\ud800-\\udfff) is not text") from None
