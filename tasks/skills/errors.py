"""Error classification and fingerprints. Pure."""

import hashlib
import re
import socket
from dataclasses import dataclass

from tasks.skills.sdk import ErrorKind, SkillError

MAX_ERROR_TEXT = 4000
_VOLATILE = re.compile(r"0x[0-9a-f]+|\d+", re.IGNORECASE)


@dataclass(frozen=True)
class ClassifiedError:
    kind: str
    message: str
    digest: str
    # What a model actually said when its output was invalid; the dead-letter ticket shows it.
    raw_output: str = ""

    @property
    def retryable(self) -> bool:
        return self.kind in ErrorKind.RETRYABLE


def classify(exc: BaseException) -> ClassifiedError:
    """Map an exception to an error kind. Unknown exceptions are unclassified: they fail for good."""
    if isinstance(exc, SkillError):
        kind = exc.kind
    elif isinstance(exc, TimeoutError | socket.timeout):
        kind = ErrorKind.TIMEOUT
    elif isinstance(exc, ConnectionError):
        kind = ErrorKind.DEPENDENCY_UNREACHABLE
    elif isinstance(exc, PermissionError):
        kind = ErrorKind.PERMISSION_DENIED
    else:
        kind = ErrorKind.UNCLASSIFIED
    message = f"{type(exc).__name__}: {exc}"[:MAX_ERROR_TEXT]
    raw_output = getattr(exc, "raw_output", "")
    raw_output = raw_output if isinstance(raw_output, str) else ""
    return ClassifiedError(kind=kind, message=message, digest=fingerprint(kind, exc), raw_output=raw_output)


def fingerprint(kind: str, exc: BaseException) -> str:
    """A stable digest that groups the same failure: numbers and addresses are folded out."""
    text = f"{kind}|{type(exc).__name__}|{_VOLATILE.sub('#', str(exc))}"
    return hashlib.sha256(text.encode()).hexdigest()[:12]
