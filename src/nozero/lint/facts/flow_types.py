"""The records of the finiteness flow pass and the words it reports with.

A ``Route`` says where a fact was established, a ``Flag`` is a route with its polarity,
a ``Reaction`` is one finding, and ``WHAT`` says in words what each reaction kind does.
They live apart from the pass so that its parts can share them without importing it.
"""

from __future__ import annotations

import ast
from collections.abc import Callable
from dataclasses import dataclass, field

from nozero.lint.facts.scopes import Scope
from nozero.lint.imports import BLOCK_STATEMENTS

_DEFS = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)
_LOOPS = (ast.For, ast.AsyncFor, ast.While)
_BLOCKS = (*BLOCK_STATEMENTS, ast.excepthandler, ast.match_case)

WHAT = {
    "skip": "the step is skipped here",
    "skip_flag": "the step is marked to be skipped here",
    "zero": "the gradients are zeroed here",
    "zero_value": "the value is set to zero here",
    "constant_value": "a constant is handed back in its place here",
    "skip_by_caller": "None is handed back here, and the caller skips the step on it",
    "late_skip": "the update was already applied; the rest of the iteration is skipped here",
    "not_taken": "the optimizer step is only taken when the values are finite",
    "go_on": "nothing stops training here",
    "log_only": "the check only reports; training goes on past the value",
    "replace": "the value is replaced here",
    "drop": "the non-finite samples are dropped here",
    "drop_term": "a non-finite term is left out of the sum here",
    "nan_drop": "the NaN samples are left out here",
    "keep": "the old state is kept here",
    "sentinel": "the value is replaced by a marker for the overflow check here",
    "scaler_step": "the scaler skips this step when the gradients overflow",
    "scaler_built": "the scaler built here skips each step whose gradients overflow",
    "apex_scale": "apex skips the optimizer step when the scaled gradients overflow",
    "clamp": "the activations are clamped into the finite range here",
    "clamp_loss": "an infinite loss becomes the bound here and training goes on",
}
# Words of a function that runs one round of a longer training run.
_ROUND_WORDS = frozenset({"epoch", "epochs", "round", "rounds", "episode", "episodes"})
_FORCED_SCALING = frozenset({"sentinel", "scaler_step", "scaler_built", "apex_scale"})
# ... and those no loss scaler ever does: dropping NaN samples or terms from the loss
_NOT_SCALING = frozenset({"drop", "drop_term", "nan_drop"})
# Reactions that are a call, not a test: their route names the call.
_CALL_REACTIONS = frozenset({"scaler_step", "scaler_built", "apex_scale", "nan_drop", "clamp_loss"})


@dataclass(frozen=True)
class Route:
    """Where a finiteness fact was established."""

    line: int
    origin: str  # ``check_using_norm()``, ``isnan(loss)``, ``OverflowError``
    flag: str | None  # the name holding it, None for a test read in place
    scaling: bool  # established where a dynamic loss scaler is at work
    weak: bool = False  # a test of a value not known as training signal
    by_name: bool = False  # a flag known by its name only (``overflow = load(...)``)
    in_tuple: bool = False  # handed back in a tuple by a same-file function
    # names the first test looked at, for a flag set from another (``skip = True`` under
    # ``if is_nan:``, where ``is_nan = isnan(record_loss)``)
    looked_at: frozenset[str] = frozenset()
    # a comparison below a limit (``loss < limit``): NaN fails it, so its ``else`` is
    # where a non-finite value goes; only a real reaction there is a finding
    implicit: bool = False


@dataclass(frozen=True)
class Reaction:
    """What training does with a non-finite value, at one statement."""

    kind: str
    line: int
    col: int  # 0-based UTF-8 byte offset, as ``ast`` counts
    first: int  # the statement's first and last lines, for suppressions
    last: int
    route: Route
    scaling: bool

    def detail(self) -> str:
        route = self.route
        what = WHAT[self.kind]
        if route.flag:
            return f"{route.flag} set at line {route.line} from {route.origin}; {what}"
        if self.kind in _CALL_REACTIONS:
            return f"{route.origin}: {what}"
        if route.line != self.line:
            return f"{route.origin} tested at line {route.line}; {what}"
        return f"{route.origin} tested; {what}"


# A flag: its route and its polarity (True: the value being true means non-finite).
Flag = tuple[Route, bool]


@dataclass
class _Unit:
    """One function (or the module body) being read. Its signal scope is computed on the
    first question that needs it: most functions read hold no test of training signal."""

    node: ast.AST
    scope_of: Callable[[], Scope]
    env: dict[str, Flag]
    scaling: bool
    steps_of: Callable[[], list[int]] = list  # lines of its optimizer steps
    trains_of: Callable[[], bool] = bool  # it steps, computes gradients, loops over batches
    returns: dict[int | None, Flag] = field(default_factory=dict)
    scaler_branch: bool = False  # in the scaler's branch of an AMP switch
    returned: set[str] | None = None  # the names its returns mention, found on first use
    _scope: Scope | None = None
    _steps: list[int] | None = None
    _trains: bool | None = None

    @property
    def scope(self) -> Scope:
        if self._scope is None:
            self._scope = self.scope_of()
        return self._scope

    @property
    def updates_after(self) -> list[int]:
        if self._steps is None:
            self._steps = self.steps_of()
        return self._steps

    @property
    def trains(self) -> bool:
        if self._trains is None:
            self._trains = bool(self.updates_after) or self.trains_of()
        return self._trains
