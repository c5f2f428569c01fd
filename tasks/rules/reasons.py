"""What the pure layer says, as data: a reason code and its parameters, never a sentence.

tasks.rules has no Django and so no gettext; the sentences live in one catalogue outside it
(tasks/sentences.py), which turns each code into words in the user's language. Every code is
declared once with `code()`, so a test can ask the catalogue for a sentence for each of them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

CODES: set[str] = set()


def code(name: str) -> str:
    """Declare a reason code (a module constant); the catalogue must have a sentence for it."""
    CODES.add(name)
    return name


@dataclass(frozen=True)
class Reason:
    """One thing to say: `code` names the sentence, `params` fill it (numbers, names, nested Reasons,
    or lists of either)."""

    code: str
    params: dict[str, Any] = field(default_factory=dict, hash=False)

    @classmethod
    def of(cls, name: str, /, **params: Any) -> Reason:
        return cls(name, params)

    def __str__(self) -> str:
        # For logs and tracebacks only; people read the catalogue's sentence.
        inner = ", ".join(f"{k}={v}" for k, v in self.params.items())
        return f"{self.code}({inner})" if inner else self.code
