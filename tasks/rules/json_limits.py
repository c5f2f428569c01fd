"""Is this JSON safe to store and handle? Depth, NUL characters, lone surrogates and absurd numbers. Pure.

The one home for every JSON that comes from outside: request bodies and events (`strict_loads`), what
operators paste into the admin (params, output schemas, field lists) and import files (`loads`).
Python's json module accepts what no database or peer does: NaN, Infinity and 1e999 (invalid JSON on
PostgreSQL), NUL characters (PostgreSQL text and jsonb refuse them), lone surrogates (not UTF-8), a
5,000-digit integer (beyond Python's int-conversion limit) and 100,000 nested brackets (a
RecursionError). Each would otherwise surface as a 500 or a traceback; here it is a JsonLimitError
(a ValueError) that says what and where. Checked before parsing (depth, on the text) and after.
"""

import json
import math

MAX_DEPTH = 32  # nested arrays/objects; a JSON Schema for a model's output needs far fewer
MAX_INT_DIGITS = 30
DEPTH, NUL, NUMBER, UNICODE = "depth", "nul", "number", "unicode"

MESSAGES = {
    DEPTH: f"is nested deeper than {MAX_DEPTH} levels",
    NUL: "contains a NUL character (\\u0000), which cannot be stored",
    NUMBER: f"has a number that is not finite or has more than {MAX_INT_DIGITS} digits",
    UNICODE: "has a lone surrogate escape (e.g. \\ud800), which is not Unicode text",
}


class JsonLimitError(ValueError):
    def __init__(self, code: str, where: str = ""):
        super().__init__(f"{where[:80]}: {MESSAGES[code]}" if where else MESSAGES[code])
        self.code = code
        self.where = where


def text_depth(text: str) -> int:
    """The deepest bracket nesting of a JSON text, ignoring brackets inside strings. No recursion."""
    depth = deepest = 0
    in_string = escaped = False
    for ch in text:
        if in_string:
            if escaped:
                escaped = False
            elif ch == "\\":
                escaped = True
            elif ch == '"':
                in_string = False
        elif ch == '"':
            in_string = True
        elif ch in "[{":
            depth += 1
            deepest = max(deepest, depth)
        elif ch in "]}":
            depth -= 1
    return deepest


def loads(text: str, *, finite: bool = True, where: str = "") -> object:
    """json.loads within the limits; raises JsonLimitError, or ValueError for JSON that is not JSON.
    `finite=False` lets NaN and Infinity through, for a caller that names the field holding them."""
    if text_depth(text) > MAX_DEPTH:
        raise JsonLimitError(DEPTH, where)
    if finite:
        value = json.loads(text, parse_int=_int, parse_float=_float, parse_constant=_constant)
    else:
        value = json.loads(text, parse_int=_int)
    check(value, finite=finite, where=where)
    return value


def strict_loads(data: bytes | str) -> object:
    """A request body or event payload: UTF-8, within the limits, only finite numbers. Errors name
    where the fault is ("$.note: contains a NUL character …")."""
    if isinstance(data, bytes):
        try:
            data = data.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise ValueError(f"not UTF-8: {exc}") from None
    return loads(data, where="$")


def check(value: object, *, finite: bool = True, where: str = "") -> None:
    """Raise JsonLimitError if an already-parsed value is too deep, holds a NUL or an absurd number.
    `where` names the root in the message ("$" for a body); blank for a field's own value."""
    stack = [(value, 1, where)]
    while stack:
        item, depth, at = stack.pop()
        if isinstance(item, dict | list):
            if depth > MAX_DEPTH:
                raise JsonLimitError(DEPTH, at)
            children = list(item.items()) if isinstance(item, dict) else list(enumerate(item))
            for key, child in children:
                if isinstance(key, str):
                    _check_text(key, f"{at} key" if at else "")
                stack.append((child, depth + 1, f"{at}.{key}"[:200] if at else ""))
        elif isinstance(item, str):
            _check_text(item, at)
        elif isinstance(item, bool):
            continue
        elif isinstance(item, int):
            if abs(item) >= 10**MAX_INT_DIGITS:
                raise JsonLimitError(NUMBER, at)
        elif finite and isinstance(item, float) and not math.isfinite(item):
            raise JsonLimitError(NUMBER, at)


def _check_text(text: str, where: str = "") -> None:
    if "\x00" in text:
        raise JsonLimitError(NUL, where)
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        raise JsonLimitError(UNICODE, where) from None


def _int(text: str) -> int:
    if len(text.lstrip("-")) > MAX_INT_DIGITS:
        raise JsonLimitError(NUMBER)
    return int(text)


def _float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise JsonLimitError(NUMBER)
    return value


def _constant(text: str) -> float:
    raise JsonLimitError(NUMBER)  # NaN, Infinity, -Infinity are not JSON
