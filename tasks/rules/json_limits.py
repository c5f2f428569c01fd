"""Is this JSON safe to store and handle? Depth, NUL characters and absurd numbers. Pure.

Operators paste JSON into the admin (params, output schemas, field lists) and into import files.
Python's json module recurses, so 100,000 nested brackets end in a RecursionError; PostgreSQL's
jsonb refuses "\\u0000"; a 5,000-digit integer exceeds Python's int-conversion limit. Each would
otherwise surface as a 500 or a traceback. Checked before parsing (depth, on the text) and after.
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
    def __init__(self, code: str):
        super().__init__(MESSAGES[code])
        self.code = code


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


def loads(text: str, *, finite: bool = True) -> object:
    """json.loads within the limits; raises JsonLimitError, or ValueError for JSON that is not JSON.
    `finite=False` lets NaN and Infinity through, for a caller that names the field holding them."""
    if text_depth(text) > MAX_DEPTH:
        raise JsonLimitError(DEPTH)
    if finite:
        value = json.loads(text, parse_int=_int, parse_float=_float, parse_constant=_constant)
    else:
        value = json.loads(text, parse_int=_int)
    check(value, finite=finite)
    return value


def check(value: object, *, finite: bool = True) -> None:
    """Raise JsonLimitError if an already-parsed value is too deep, holds a NUL or an absurd number."""
    stack = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, dict | list):
            if depth > MAX_DEPTH:
                raise JsonLimitError(DEPTH)
            children = list(item.items()) if isinstance(item, dict) else [(None, v) for v in item]
            for key, child in children:
                if isinstance(key, str):
                    _check_text(key)
                stack.append((child, depth + 1))
        elif isinstance(item, str):
            _check_text(item)
        elif isinstance(item, bool):
            continue
        elif isinstance(item, int):
            if abs(item) >= 10**MAX_INT_DIGITS:
                raise JsonLimitError(NUMBER)
        elif finite and isinstance(item, float) and not math.isfinite(item):
            raise JsonLimitError(NUMBER)


def _check_text(text: str) -> None:
    if "\x00" in text:
        raise JsonLimitError(NUL)
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        raise JsonLimitError(UNICODE) from None


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
