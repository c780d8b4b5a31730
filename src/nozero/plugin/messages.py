"""How a trainer's own exception reads in a failure: its type, message and raise line,
and, for a near-miss of the documented message, the first character that differs."""

from __future__ import annotations

import re
import sysconfig
import traceback
import unicodedata
from pathlib import Path

from nozero.contract import format_message, parse_message

# Long messages (equinox prints the traced stack before its own text) keep both ends.
HEAD_CHARS = 1500
TAIL_CHARS = 3000
_LIBRARY_DIRS = tuple(
    str(Path(sysconfig.get_paths()[key]).resolve()) for key in ("stdlib", "purelib", "platlib")
)
_PLUGIN_DIR = str(Path(__file__).resolve().parent)
_LOOSE = re.compile(r"non-finite loss/grad at step (-?\d+): loss=(\S+) grad_norm=(\S+)")
DOCUMENTED_START = "non-finite loss/grad at step"
# JAX's runtime errors that wrap an exception raised inside a host callback.
_WRAPPERS = ("JaxRuntimeError", "XlaRuntimeError")


def _is_user_frame(filename: str) -> bool:
    path = str(Path(filename).resolve()) if filename and not filename.startswith("<") else ""
    return bool(path) and not path.startswith(_LIBRARY_DIRS + (_PLUGIN_DIR,))


def raise_site(error: BaseException) -> str:
    """Where the trainer raised: the innermost frame in the trainer's own code (not in a
    library such as JAX), else the innermost frame."""
    frames = traceback.extract_tb(error.__traceback__)
    if not frames:
        return ""
    own = [frame for frame in frames if _is_user_frame(frame.filename)]
    frame = (own or frames)[-1]
    code = f": {frame.line.strip()}" if frame.line else ""
    return f"{frame.filename}:{frame.lineno} in {frame.name}{code}"


def _kept(message: str) -> str:
    if len(message) <= HEAD_CHARS + TAIL_CHARS:
        return message
    cut = len(message) - HEAD_CHARS - TAIL_CHARS
    return f"{message[:HEAD_CHARS]}\n[… {cut} characters …]\n{message[-TAIL_CHARS:]}"


def describe_error(error: BaseException) -> str:
    """``raised Type: message`` and the raise line, the message kept whole (or both ends)."""
    kind = type(error).__module__ + "." + type(error).__qualname__
    kind = kind.removeprefix("builtins.")
    text = f"raised {kind}: {_kept(str(error))}"
    site = raise_site(error)
    return f"{text}\n    raised at {site}" if site else text


def _char(text: str, index: int) -> str:
    if index >= len(text):
        return "the end of the text"
    char = text[index]
    name = unicodedata.name(char, "unnamed")
    return f"{char!r} (U+{ord(char):04X} {name})"


def _first_difference(got: str, expected: str) -> int:
    for index, (a, b) in enumerate(zip(got, expected, strict=False)):
        if a != b:
            return index
    return min(len(got), len(expected))


def _callback_wrapper(error: BaseException, start: int) -> str | None:
    """The documented message inside JAX's runtime error: a raise in a host callback."""
    kind = type(error)
    if kind.__name__ not in _WRAPPERS or "checkify" in kind.__module__ or not start:
        return None
    return (
        f"the documented message is wrapped in {kind.__name__}: an exception raised inside "
        "a jax.debug.callback (or io_callback) under jit reaches the caller as JAX's runtime "
        f"error, with {start} characters of JAX's text before it. Unwrap it: run the step "
        "inside `with nozero.jax.nonfinite_errors(step):`, which re-raises it as "
        "nozero.NonFiniteError"
    )


def near_miss(error: BaseException) -> str | None:
    """What keeps an error that looks like the documented one from being it, or None."""
    text = str(error)
    start = text.find(DOCUMENTED_START)
    if start < 0:
        return None
    candidate = text[start:]
    if parse_message(text) is not None:  # the exact text, the wrong type
        return (
            f"its message is the documented one, but {type(error).__qualname__} is not a "
            "RuntimeError: raise nozero.NonFiniteError"
        )
    loose = _LOOSE.match(candidate)
    if loose is None:
        return f"it starts like the documented message ({DOCUMENTED_START!r}) but is not it"
    wrapper = _callback_wrapper(error, start)
    if wrapper:
        return wrapper
    step, loss, grad_norm = loose.groups()
    try:
        expected = format_message(int(step), float(loss), float(grad_norm.rstrip(",;")))
    except ValueError:
        return f"its values (loss={loss}, grad_norm={grad_norm}) are not numbers"
    where = ""
    if start:
        where = f"{start} characters of other text come before the documented message; "
    if candidate.startswith(expected):
        return (
            f"{where}the documented message ends at character {start + len(expected)}, "
            f"but the text goes on with {candidate[len(expected) :][:80]!r}: the message must "
            "be exactly the documented one (convert the error with nozero.jax, or raise "
            "nozero.NonFiniteError)"
        )
    index = _first_difference(candidate, expected)
    return (
        f"{where}it differs from the documented message at character {start + index}: "
        f"got {_char(candidate, index)}, expected {_char(expected, index)} "
        f"(…{expected[max(0, index - 20) : index + 20]}…)"
    )
