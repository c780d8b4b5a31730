"""Scopes: training-signal tracking over the standard library's ``ast`` of one whole file.

Rules match shapes with libcst on a few candidate statements; whether a matched value is
training signal (loss, gradients, updates, parameters, optimizer state) is a question
about the whole file: a name may be assigned from ``jax.grad`` in the same function, a
helper elsewhere in the file may return gradients or test them for NaN. This module
answers those questions from the ``ast`` of the entire file, lazily and memoized, so the
answer never depends on which statements libcst was shown.
"""

from __future__ import annotations

import ast
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

from nozero.lint import vocab
from nozero.lint.facts.sources import PREDICATE_POLARITY
from nozero.lint.imports import child_statements, dotted_name, last_part, resolve
from nozero.lint.lines import line_starts
from nozero.lint.scaling import scaler_in_lines

FunctionNode = ast.FunctionDef | ast.AsyncFunctionDef
_SCOPE_BOUNDARY = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)
# What describes a value's size, kind or place rather than holding it.
_DESCRIPTIONS = frozenset({"shape", "ndim", "dtype", "device", "is_cuda"})
_DESCRIBING_CALLS = frozenset({"len", "size", "dim", "numel", "nelement"})
# The methods a loss class computes its loss in (torch ``forward``, Keras ``call``).
_LOSS_ENTRY_METHODS = frozenset({"forward", "__call__", "call"})
_NO_GRADIENT_BLOCKS = frozenset({"no_grad", "inference_mode"})
# Reductions that keep a finiteness test a test (``isnan(g).any()``, ``jnp.all(ok)``),
# and conversions that gather tests into one array (``jnp.array([isfinite(u) ...])``).
_BOOLEAN_CALLS = frozenset(
    {
        "all",
        "any",
        "bool",
        "logical_and",
        "logical_or",
        "logical_not",
        "tree_all",
        "item",
        "array",
        "asarray",
        "stack",
        "tensor",
        "convert_to_tensor",
    }
)

# Words that keep a call named for a metric a training call (``train_and_evaluate``,
# ``accuracy_loss``).
_TRAINING_NAME_WORDS = frozenset({"loss", "train", "step", "grad", "grads", "update"})
_DIVISIONS = frozenset({"div", "div_", "divide", "true_divide", "true_divide_"})
# ``nan_to_num`` keywords naming the value cleaned (``nan=``, ``posinf=`` name what
# replaces it).
SANITIZED_KEYWORDS = frozenset({"x", "input", "out"})
# Words of a name for a constant that is not finite (``NEG_INF``, ``self.neg_inf``).
_NONFINITE_WORDS = frozenset({"inf", "infinity", "nan", "infty", "ninf", "pinf"})
_SIGN_WORDS = frozenset({"neg", "pos", "minus", "plus", "negative", "positive", "n", "p"})
# Words of a call that converts a constant to a dtype (``np.float32(np.inf)``).
_CONVERSION_WORDS = frozenset(
    {"dtype", "type", "cast", "float", "float16", "float32", "float64", "bfloat16", "half"}
)


def scope_nodes(root: ast.AST) -> Iterator[ast.AST]:
    """Every node of one scope: nested functions and classes are their own scopes. The
    load/store markers of names (``ctx``) are left out: no question is about them."""
    stack = _children(root)
    while stack:
        node = stack.pop()
        yield node
        if not isinstance(node, _SCOPE_BOUNDARY):
            stack.extend(_children(node))


def _children(node: ast.AST) -> list[ast.AST]:
    """``ast.iter_child_nodes(node)`` as a list, without ``ctx``: the walks of a file's
    facts visit every node of its functions, and the generators cost a third of that."""
    found: list[ast.AST] = []
    for name in node._fields:
        if name == "ctx":
            continue
        value = getattr(node, name, None)
        if isinstance(value, ast.AST):
            found.append(value)
        elif isinstance(value, list):
            found.extend(item for item in value if isinstance(item, ast.AST))
    return found


def self_comparable(node: ast.expr) -> bool:
    """Can ``node != node`` be the NaN self-test: a dotted name (``p.grad``) or a call of
    one without arguments (``loss.item()``)?"""
    if isinstance(node, ast.Call) and not node.args and not node.keywords:
        node = node.func
    return dotted_name(node) is not None


def _names_in(node: ast.AST) -> set[str]:
    return {n.id for n in ast.walk(node) if isinstance(n, ast.Name)}


_INFINITY_TESTS = frozenset({"isinf", "isneginf", "isposinf", "is_inf"})


def _names_logits(node: ast.expr) -> bool:
    """Logits by name: -inf is how a logit is masked out (padding, banned tokens)."""
    name = (dotted_name(node) or "").rsplit(".", 1)[-1]
    return bool({"logits", "logit"}.intersection(vocab.name_words(name)))


def _describes(node: ast.AST) -> bool:
    """Is ``node`` only a description of values (``input.shape[1]``, ``len(batch)``)?"""
    return not _values_in(node) and _names_in(node) != set()


def _asks_about(node: ast.AST) -> bool:
    """Does ``node`` ask the size, kind or place of its operand (``x.shape``,
    ``len(grads)``, ``loss.size(0)``) rather than compute with its values?"""
    if isinstance(node, ast.Attribute):
        return node.attr in _DESCRIPTIONS
    return isinstance(node, ast.Call) and last_part(dotted_name(node.func) or "") in (
        _DESCRIBING_CALLS
    )


def _values_in(node: ast.AST) -> set[str]:
    """The names whose values ``node`` computes with: not those it only asks the size,
    kind or place of (``input.shape[1]``, ``len(grads)``)."""
    found: set[str] = set()
    stack = [node]
    while stack:
        node = stack.pop()
        if isinstance(node, ast.Name):
            found.add(node.id)
        elif not _asks_about(node):
            stack.extend(ast.iter_child_nodes(node))
    return found


def compares_itself(node: ast.Compare) -> bool:
    """``x != x`` in structure (the text is checked where it matters)."""
    sides = [node.left, *node.comparators]
    return any(
        isinstance(op, ast.NotEq) and ast.dump(left) == ast.dump(right)
        for op, left, right in zip(node.ops, sides[:-1], sides[1:], strict=True)
    )


def _root_name(target: ast.expr) -> str:
    """``stats`` of ``stats["key"]`` or ``self.stats.key``; "" for a plain name or other."""
    if not isinstance(target, ast.Subscript | ast.Attribute):
        return ""
    while isinstance(target, ast.Subscript | ast.Attribute):
        if (
            isinstance(target, ast.Attribute)
            and isinstance(target.value, ast.Name)
            and (target.value.id == "self")
        ):
            return target.attr
        target = target.value
    return target.id if isinstance(target, ast.Name) else ""


def _names_a_loss_class(cls: ast.ClassDef) -> bool:
    """``class MAELoss``, ``class DiceLoss``, or a class built on one (``class
    CRPS(BaseLoss)``, ``class Dice(nn.modules.loss._Loss)``, ``keras.losses.Loss``)."""
    names = [cls.name, *(last_part(dotted_name(base) or "") for base in cls.bases)]
    return any(name.endswith("Loss") or vocab.is_loss_name(name) for name in names)


def _updates_a_mapping(call: ast.Call) -> bool:
    """``stats.update(...)`` on a dict rather than ``optimizer.update(grads, state)``."""
    func = call.func
    if not (isinstance(func, ast.Attribute) and func.attr == "update"):
        return False
    owner = dotted_name(func.value) or ""
    words = vocab.name_words(owner.rsplit(".", 1)[-1])
    return not (vocab.OPTIMIZER_NAME_WORDS | {"tx", "solver", "transform"}) & set(words)


def source_segment(text: str, node: ast.expr) -> str:
    """The source of ``node`` in ``text``. (``ast.get_source_segment`` splits the whole
    text into lines on every call, which is quadratic on a large file.)"""
    if node.end_lineno is None or node.end_col_offset is None:
        return ""
    starts = line_starts(text)
    return text[
        _offset(text, starts, node.lineno, node.col_offset) : _offset(
            text, starts, node.end_lineno, node.end_col_offset
        )
    ]


def _offset(text: str, starts: list[int], line: int, byte_column: int) -> int:
    """Character offset of a (line, UTF-8 byte column) position."""
    begin = starts[min(line - 1, len(starts) - 1)]
    end = starts[line] if line < len(starts) else len(text)
    return begin + len(text[begin:end].encode()[:byte_column].decode(errors="replace"))


def bound_names(target: ast.AST) -> set[str]:
    """Names a binding target binds (``(a, b), *c`` -> a, b, c); attributes bind none."""
    if isinstance(target, ast.Name):
        return {target.id}
    if isinstance(target, ast.Starred):
        return bound_names(target.value)
    if isinstance(target, ast.Tuple | ast.List):
        return set().union(*(bound_names(elt) for elt in target.elts))
    return set()


def _is_mask(node: ast.expr) -> bool:
    """A name or attribute named for a mask (``mask``, ``self.loss_mask``, ``mask.float()``)."""
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
        node = node.func.value  # ``mask.float()``
    dotted = dotted_name(node)
    return bool(dotted) and "mask" in vocab.name_words(dotted.rsplit(".", 1)[-1])


def parameter_names(fn: FunctionNode | ast.Lambda) -> set[str]:
    args = fn.args
    every = [*args.posonlyargs, *args.args, *args.kwonlyargs, args.vararg, args.kwarg]
    return {a.arg for a in every if a is not None} - {"self", "cls"}


def _loss_returned(value: ast.expr) -> ast.expr:
    """The loss in what a loss function returns: ``return loss, (metrics, state)`` puts
    it first."""
    return value.elts[0] if isinstance(value, ast.Tuple) and value.elts else value


def _parameters_given(function: FunctionNode, call: ast.Call, names: set[str]) -> set[str]:
    """The parameters of ``function`` that ``call`` passes a value made from ``names`` to."""
    args = function.args
    positional = [a.arg for a in [*args.posonlyargs, *args.args] if a.arg not in ("self", "cls")]
    given: set[str] = set()
    for parameter, value in zip(positional, call.args, strict=False):
        if isinstance(value, ast.Starred):
            break
        if _names_in(value) & names:
            given.add(parameter)
    for keyword in call.keywords:
        if keyword.arg and _names_in(keyword.value) & names:
            given.add(keyword.arg)
    return given & parameter_names(function)


def _names_gradients(node: ast.AST) -> bool:
    """A name, attribute or parameter that says gradients (``grads``, ``p.grad``,
    ``grad_norm``), or a call that computes them (``jax.grad``, ``loss.backward()``);
    ``requires_grad`` and ``no_grad`` only set the autograd mode."""
    if isinstance(node, ast.Name):
        name = node.id
    elif isinstance(node, ast.Attribute):
        name = node.attr
    elif isinstance(node, ast.arg):
        name = node.arg
    else:
        return False
    return vocab.names_gradients(name)


def _graphs_or_generators(nodes: list[ast.AST]) -> set[str]:
    """The short names (``g``) used as a graph or a random generator among ``nodes``."""
    found = set()
    for node in nodes:
        if isinstance(node, ast.Attribute) and node.attr in vocab.GRAPH_OR_GENERATOR_ATTRIBUTES:
            owner = node.value  # ``g.ndata`` or ``self.g.ndata``
            name = owner.id if isinstance(owner, ast.Name) else getattr(owner, "attr", "")
            if name in vocab.AMBIGUOUS_SIGNAL_NAMES:
                found.add(name)
    return found


def _true_when_nonfinite(value: ast.expr) -> bool:
    """``isnan(x) | isinf(x)``, ``torch.isnan(x).any()``: true where a value is not finite
    (``not any(isnan(x))``, true where it is, marks the finite ones)."""
    if isinstance(value, ast.BinOp) and isinstance(value.op, ast.BitOr):
        return _true_when_nonfinite(value.left) and _true_when_nonfinite(value.right)
    if isinstance(value, ast.BoolOp) and isinstance(value.op, ast.Or):
        return all(_true_when_nonfinite(v) for v in value.values)
    if not isinstance(value, ast.Call):
        return False
    name = last_part(dotted_name(value.func) or "")
    if name in ("any", "all", "bool", "item", "logical_or"):
        inner = [value.func.value] if isinstance(value.func, ast.Attribute) else []
        return any(_true_when_nonfinite(v) for v in [*inner, *value.args])
    return PREDICATE_POLARITY.get(name) is True


def _bindings(nodes: list[ast.AST]) -> list[tuple[set[str], ast.expr]]:
    """(names, value) for each binding among one scope's ``nodes``."""
    found: list[tuple[set[str], ast.expr]] = []
    for node in nodes:
        if isinstance(node, ast.Assign) and len(node.targets) == 1:
            found.extend(_paired(node.targets[0], node.value, iterated=False))
        elif isinstance(node, ast.Assign):
            names = set().union(*(bound_names(t) for t in node.targets))
            found.append((names, node.value))
        elif isinstance(node, ast.AnnAssign | ast.AugAssign | ast.NamedExpr) and node.value:
            found.append((bound_names(node.target), node.value))
        elif isinstance(node, ast.For | ast.AsyncFor | ast.comprehension):
            found.extend(_paired(node.target, node.iter, iterated=True))
        elif isinstance(node, ast.withitem) and node.optional_vars is not None:
            found.append((bound_names(node.optional_vars), node.context_expr))
    return [(names, value) for names, value in found if names]


def _paired(target: ast.expr, value: ast.expr, iterated: bool) -> list[tuple[set[str], ast.expr]]:
    """Each name of ``target`` with the part of ``value`` it is bound to, where the
    shapes match: ``a, b = x, y``; ``for pred, target in zip(preds, targets)``; ``for i,
    x in enumerate(xs)`` (``i`` counts). Elsewhere every name is bound to all of it."""
    elements = target.elts if isinstance(target, ast.Tuple | ast.List) else None
    if not elements or any(isinstance(e, ast.Starred) for e in elements):
        return [(bound_names(target), value)]
    parts: list[ast.expr] | None = None
    if iterated and isinstance(value, ast.Call):  # ``zip(a, b, strict=True)`` too
        called = getattr(value.func, "id", None)
        if called == "zip":
            parts = value.args
        elif called == "enumerate" and len(value.args) == 1 and len(elements) == 2:
            count = ast.copy_location(ast.Constant(0), value)
            return [(bound_names(elements[0]), count), *_paired(elements[1], value.args[0], True)]
    elif not iterated and isinstance(value, ast.Tuple | ast.List):
        parts = value.elts
    if (
        parts is None
        or len(parts) != len(elements)
        or any(isinstance(part, ast.Starred) for part in parts)
    ):
        return [(bound_names(target), value)]
    return [
        pair
        for element, part in zip(elements, parts, strict=True)
        for pair in _paired(element, part, iterated)
    ]


@dataclass(frozen=True)
class _Lens:
    """How a finiteness test is read: what counts as signal, which names are flags, and
    the text to check a self-comparison against (None: structure only)."""

    signal: Callable[[ast.expr], bool]
    flags: set[str]
    text: str | None


@dataclass
class Scope:
    """What one function (or the module body) knows about its names."""

    signal: set[str] = field(default_factory=set)  # tainted by origin
    grad_functions: set[str] = field(default_factory=set)  # results of jax.grad(...)
    flags: set[str] = field(default_factory=set)  # results of finiteness tests on signal
    # no signal whatever they are called: bound only from a metric's result, a setting
    # (``focal_loss: bool = False``), or ``g`` where no gradient is in sight (a graph)
    not_signal: set[str] = field(default_factory=set)


class FileFacts:
    """Lazy, memoized answers about training signal in one parsed file."""

    def __init__(
        self,
        tree: ast.Module,
        source: str,
        aliases: dict[str, str],
        *,
        test_module: bool = False,
        imported: Mapping[str, Any] | None = None,
    ) -> None:
        self.tree = tree
        # helpers imported from the project, by local name: what their summaries say
        # (``nozero.lint.summary.Helper``); a same-file definition of the name wins
        self.imported = {
            name: helper
            for name, helper in (imported or {}).items()
            if name not in self._functions_by_name
        }
        self.source = source
        self.aliases = aliases
        self.test_module = test_module
        self._scopes: dict[int, Scope] = {}
        self._helper_memo: dict[tuple[str, str], bool] = {}
        self._sanitized: dict[str, list[tuple[int, str]]] = {}
        self._parsed: dict[str, tuple[ast.expr, str]] = {}
        self._bindings_memo: dict[int, list[tuple[set[str], ast.expr]]] = {}
        self._nodes_memo: dict[int, list[ast.AST]] = {}
        self.flows: Any = None  # the file's finiteness flows, built by ``facts.reactions``

    def nodes(self, root: ast.AST) -> list[ast.AST]:
        """``scope_nodes(root)``, walked once: a function is asked about many times."""
        key = id(root)
        found = self._nodes_memo.get(key)
        if found is None:
            found = self._nodes_memo[key] = list(scope_nodes(root))
        return found

    def bindings(self, root: ast.AST) -> list[tuple[set[str], ast.expr]]:
        key = id(root)
        if key not in self._bindings_memo:
            self._bindings_memo[key] = _bindings(self.nodes(root))
        return self._bindings_memo[key]

    # ---- the file's functions -------------------------------------------------------
    @cached_property
    def _functions(self) -> dict[int, tuple[FunctionNode, FunctionNode | None]]:
        """def line -> (function, enclosing function or None)."""
        found: dict[int, tuple[FunctionNode, FunctionNode | None]] = {}
        stack: list[tuple[ast.AST, FunctionNode | None]] = [(self.tree, None)]
        while stack:
            node, enclosing = stack.pop()
            for child in child_statements(node):
                if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef):
                    found[child.lineno] = (child, enclosing)
                    stack.append((child, child))
                else:
                    stack.append((child, enclosing))
        return found

    @cached_property
    def _functions_by_name(self) -> dict[str, list[FunctionNode]]:
        by_name: dict[str, list[FunctionNode]] = {}
        for fn, _ in self._functions.values():
            by_name.setdefault(fn.name, []).append(fn)
        return by_name

    def defines_function(self, name: str) -> bool:
        """A function of this file, or a helper imported from the project."""
        return name in self._functions_by_name or name in self.imported

    def declares_setting(self, name: str) -> bool:
        """Does the file give the setting ``name`` a default (``zero_infinity: bool =
        field(default=False)`` in a config class, ``def __init__(self, zero_infinity=False)``)?
        A switch rule reports the default there, not each read of it."""
        return name in self._declared_settings

    @cached_property
    def _declared_settings(self) -> frozenset[str]:
        found: set[str] = set()
        for node in ast.walk(self.tree):
            if isinstance(node, ast.AnnAssign) and node.value is not None:
                found |= bound_names(node.target)
            elif isinstance(node, ast.arguments):
                positional = [*node.posonlyargs, *node.args]
                found |= {a.arg for a in positional[len(positional) - len(node.defaults) :]}
                found |= {
                    a.arg for a, d in zip(node.kwonlyargs, node.kw_defaults, strict=True) if d
                }
        return frozenset(found)

    def functions_named(self, name: str) -> list[FunctionNode]:
        return self._functions_by_name.get(name, [])

    def helper_name(self, func: ast.expr) -> str | None:
        """The same-file function a call goes to (``helper(...)``, ``self.helper(...)``)."""
        if isinstance(func, ast.Name):
            name = func.id
        elif (
            isinstance(func, ast.Attribute)
            and isinstance(func.value, ast.Name)
            and (func.value.id in ("self", "cls"))
        ):
            name = func.attr
        else:
            return None
        if isinstance(func, ast.Name) and name in self.imported:
            return name
        return name if name in self._functions_by_name else None

    def dropped_calls(self, name: str) -> list[tuple[FunctionNode, int]]:
        """(caller, line) of each call to the same-file function ``name`` made as a
        statement of its own: the caller drops what the function returns."""
        return self._dropped_calls.get(name, [])

    @cached_property
    def _dropped_calls(self) -> dict[str, list[tuple[FunctionNode, int]]]:
        found: dict[str, list[tuple[FunctionNode, int]]] = {}
        for caller, _ in self._functions.values():
            for node in self.nodes(caller):
                if isinstance(node, ast.Expr) and isinstance(node.value, ast.Call):
                    name = self.helper_name(node.value.func)
                    if name is not None:
                        found.setdefault(name, []).append((caller, node.lineno))
        return found

    def only_observes(self, key: int) -> bool:
        """Does the function on line ``key``, or one around it, only observe values
        (evaluation under ``no_grad``/``eval()``, plots, metrics) while computing no
        gradient and taking no step? What it does with a non-finite value trains nothing."""
        while key in self._functions:
            function, enclosing = self._functions[key]
            if self._observes(function):
                return True
            key = enclosing.lineno if enclosing else 0
        return False

    def _observes(self, fn: FunctionNode) -> bool:
        key = ("observes", str(fn.lineno))
        if key not in self._helper_memo:
            calls = [n for n in ast.walk(fn) if isinstance(n, ast.Call)]
            # Hessian-vector products (``autograd.grad(grads, params, grad_outputs=v)``)
            # measure curvature; they are diagnostics unless a step follows
            curvature = [
                c
                for c in calls
                if any(k.arg in ("grad_outputs", "create_graph") for k in c.keywords)
            ]
            called = {
                self.called(n.func)
                for n in calls
                if n not in curvature and not _updates_a_mapping(n)
            }
            # ``@torch.no_grad()`` as well as ``@torch.no_grad``
            decorators = {
                self.called(d.func if isinstance(d, ast.Call) else d) for d in fn.decorator_list
            }
            called |= decorators
            evaluation = vocab.names_evaluation(fn.name)
            if evaluation:  # ``validation_step`` calling the module's shared ``self.step``
                called -= {self.helper_name(n.func) for n in calls} - {None}
            # An optimizer's ``step`` runs under ``no_grad`` as torch's own do: it trains.
            # A loss function trains too: what it returns is backpropagated, whatever it
            # computes under ``no_grad`` (a score-distillation target).
            trains = (
                called & (vocab.UPDATE_CALLS | vocab.TRAINING_CALLS)
                or (
                    vocab.STEPPING_NAME_WORDS.intersection(vocab.name_words(fn.name))
                    and not evaluation
                )
                or self.is_loss_function(fn)
                or fn.lineno in self._optimizer_methods
                or (
                    not evaluation
                    and called & vocab.OBSERVING_MARKERS <= _NO_GRADIENT_BLOCKS
                    and not decorators & _NO_GRADIENT_BLOCKS
                    and self._returns_loss_with_gradient(fn)
                )
            )
            marked = bool(called & vocab.OBSERVING_MARKERS) or bool(curvature) or evaluation
            self._helper_memo[key] = not trains and marked
        return self._helper_memo[key]

    def _returns_loss_with_gradient(self, fn: FunctionNode) -> bool:
        """Does ``fn`` hand back a loss it computed outside ``no_grad`` (``with no_grad():
        frames = decode(x)`` ... ``loss = (reward * recon).mean(); return loss``)? Its
        caller backpropagates it, whatever the function is named."""
        returned = {
            name
            for node in self.nodes(fn)
            if isinstance(node, ast.Return) and node.value is not None
            for name in _names_in(_loss_returned(node.value))
            if vocab.is_loss_name(name)
        }
        if not returned:
            return False
        without_gradient = [
            (node.lineno, node.end_lineno or node.lineno)
            for node in self.nodes(fn)
            if isinstance(node, ast.With | ast.AsyncWith)
            and any(
                isinstance(item.context_expr, ast.Call)
                and self.called(item.context_expr.func) in _NO_GRADIENT_BLOCKS
                for item in node.items
            )
        ]
        return any(
            bool(names & returned)
            and not any(first <= value.lineno <= last for first, last in without_gradient)
            for names, value in self.bindings(fn)
        )

    def mentions_scaling(self, key: int) -> bool:
        """Is the function on line ``key`` part of fp16 dynamic loss scaling (a scaler at
        work: the scale adjusted, a scaler's API used)? Its selects are the opt-in rule's."""
        entry = self._functions.get(key)
        if entry is None:
            return False
        fn = entry[0]
        first = min([fn.lineno, *(d.lineno for d in fn.decorator_list)])
        return scaler_in_lines(self.nodes(fn), self.source, first, fn.end_lineno or fn.lineno)

    def hides_nothing(self, call: ast.Call) -> bool:
        """A ``nan_to_num`` that hides no non-finite training value: every replacement is
        NaN again (Inf made more visible), or it guards the 0/0 of a scale factor
        (``nan_to_num(minimum(clip / norm, 1.0), nan=1.0)``) while NaN gradients still
        flow through the product."""
        keywords = {k.arg: k.value for k in call.keywords if k.arg}
        if keywords and all(
            self._is_nan_constant(keywords.get(name)) for name in ("nan", "posinf", "neginf")
        ):
            return True
        receiver = call.func.value if isinstance(call.func, ast.Attribute) else None
        if isinstance(receiver, ast.Call | ast.BinOp | ast.Subscript):
            # the tensor method: ``max_norm.div_(grad_norm).nan_to_num_(nan=1.0)``
            subject, nan = receiver, keywords.get("nan", call.args[0] if call.args else None)
        else:
            nan = keywords.get("nan", call.args[1] if len(call.args) > 1 else None)
            subject = call.args[0] if call.args else keywords.get("x")
        return self._is_ratio(subject) and isinstance(nan, ast.Constant) and nan.value == 1

    def _is_ratio(self, node: ast.expr | None) -> bool:
        """``clip / norm``, ``max_norm.div_(norm)``, ``minimum(clip / norm, 1.0)``."""
        if isinstance(node, ast.BinOp):
            return isinstance(node.op, ast.Div)
        if not isinstance(node, ast.Call):
            return False
        name = self.called(node.func)
        if name in _DIVISIONS:
            return True
        if name in {"minimum", "min", "clip", "clamp", "clamp_"}:
            receiver = [node.func.value] if isinstance(node.func, ast.Attribute) else []
            return any(self._is_ratio(a) for a in [*node.args, *receiver])
        return False

    def _is_nan_constant(self, node: ast.expr | None) -> bool:
        if isinstance(node, ast.Attribute):
            return node.attr in ("nan", "NaN")
        return (
            isinstance(node, ast.Call)
            and dotted_name(node.func) == "float"
            and bool(node.args)
            and isinstance(node.args[0], ast.Constant)
            and str(node.args[0].value).lower() == "nan"
        )

    def in_test(self, key: int) -> bool:
        """Is line ``key``'s function inside a test (``def test_...``, a ``Test...`` class
        or a ``...TestCase``, or anything in a test module)? A test that calls a switch
        exercises it; it trains nothing."""
        return self.test_module or key in self._test_functions

    @cached_property
    def _test_functions(self) -> frozenset[int]:
        return self._marked_functions(
            lambda cls: cls.name.startswith("Test") or cls.name.endswith(("Test", "TestCase")),
            lambda fn: fn.name.startswith("test"),
        )

    @cached_property
    def _optimizer_methods(self) -> frozenset[int]:
        """Def lines of the functions in a class that subclasses an optimizer
        (``class Lion(torch.optim.Optimizer)``): optimizer code, which trains."""
        if "Optimizer" not in self.source:
            return frozenset()
        return self._marked_functions(
            lambda cls: any("Optimizer" in last_part(dotted_name(b) or "") for b in cls.bases)
        )

    def is_loss_function(self, function: FunctionNode) -> bool:
        """A function named for a loss (``def dice_loss``), or the entry point of a loss
        class (``class DDPLoss(nn.Module): def forward``, a Keras ``Loss.call``)."""
        if vocab.is_loss_name(function.name):
            return True
        return function.name in _LOSS_ENTRY_METHODS and function.lineno in self._loss_class_methods

    @cached_property
    def _loss_class_methods(self) -> frozenset[int]:
        # ``MAELoss``, ``DDPLoss``: a capital run before ``Loss`` is one word to split on
        return self._marked_functions(_names_a_loss_class)

    def _marked_functions(
        self,
        class_mark: Callable[[ast.ClassDef], bool],
        function_mark: Callable[[FunctionNode], bool] = lambda fn: False,
    ) -> frozenset[int]:
        """Def lines of the functions in a class ``class_mark`` accepts or that
        ``function_mark`` accepts, and of every function nested in one."""
        found: set[int] = set()
        stack: list[tuple[ast.AST, bool]] = [(self.tree, False)]
        while stack:
            node, inside = stack.pop()
            for child in child_statements(node):
                if isinstance(child, ast.ClassDef):
                    stack.append((child, inside or class_mark(child)))
                elif isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef):
                    marked = inside or function_mark(child)
                    if marked:
                        found.add(child.lineno)
                    stack.append((child, marked))
                else:
                    stack.append((child, inside))
        return frozenset(found)

    def parameters(self, key: int) -> set[str]:
        """Parameter names of the function defined on line ``key`` (none at module level)."""
        entry = self._functions.get(key)
        return parameter_names(entry[0]) if entry else set()

    # ---- scopes ---------------------------------------------------------------------
    def scope(self, key: int) -> Scope:
        """Facts for the function defined on line ``key`` (0: the module body)."""
        if key not in self._scopes:
            self._scopes[key] = Scope()  # guards recursion through helpers
            self._scopes[key] = self._compute_scope(key)
        return self._scopes[key]

    def _compute_scope(self, key: int) -> Scope:
        entry = self._functions.get(key)
        if entry is None:
            root: ast.AST = self.tree
            scope = Scope()
        else:
            root, enclosing = entry
            parent = self.scope(enclosing.lineno if enclosing else 0)
            # a name the function assigns itself is its own local: the enclosing scope's
            # ``labels`` (an aux output of ``value_and_grad``) is not the loss function's.
            # Parameters keep what an enclosing function knows (a ``lax.while_loop``
            # body's ``state`` is that function's state); a module's names reach its
            # functions only as globals.
            assigned = set().union(*(names for names, _ in self.bindings(root)))
            parameters = parameter_names(root)
            local = assigned - parameters if enclosing else assigned | parameters
            scope = Scope(
                parent.signal - local, parent.grad_functions - local, parent.flags - local
            )
        bindings = self.bindings(root)
        scope.not_signal = self._metric_results(bindings) | self._settings(root, bindings)
        if not self._sees_gradients(key):
            scope.not_signal |= vocab.AMBIGUOUS_SIGNAL_NAMES
        scope.not_signal |= _graphs_or_generators(self.nodes(root))
        self._propagate(bindings, scope)
        feeding = self._predictions_feeding_loss(root, bindings) | self._returned_loss(root)
        feeding -= scope.signal
        if feeding:
            scope.signal |= feeding
            self._propagate(bindings, scope)
        return scope

    def _returned_loss(self, root: ast.AST) -> set[str]:
        """What a loss function returns as its value (``return result``, ``return
        where(isfinite(result), result, 0)``): the loss, whatever it is called."""
        if not isinstance(root, FunctionNode) or not self.is_loss_function(root):
            return set()
        found: set[str] = set()
        for node in self.nodes(root):
            if not isinstance(node, ast.Return) or node.value is None:
                continue
            value = _loss_returned(node.value)
            if isinstance(value, ast.Call) and self.called(value.func) in (
                vocab.SELECTORS | vocab.SANITIZERS
            ):
                found |= {a.id for a in value.args if isinstance(a, ast.Name)}
            elif isinstance(value, ast.Name):
                found.add(value.id)
        return {n for n in found if not (vocab.is_metric_name(n) or vocab.is_measure_name(n))}

    def _metric_results(self, bindings: list[tuple[set[str], ast.expr]]) -> set[str]:
        """Names every binding of which is a metric's result (``loss = metric.compute()``
        in an evaluator): observations, whatever they are called."""
        only_metrics: dict[str, bool] = {}
        for names, value in bindings:
            measured = isinstance(value, ast.Call) and self.computes_metric(value)
            for name in names:
                only_metrics[name] = only_metrics.get(name, True) and measured
        return {name for name, measured in only_metrics.items() if measured}

    @staticmethod
    def _settings(root: ast.AST, bindings: list[tuple[set[str], ast.expr]]) -> set[str]:
        """Parameters declared as settings (``focal_loss: bool = False``, ``mode: str``,
        ``cfg: TrainConfig``) that the function never re-binds: no tensor, whatever
        their name says."""
        if not isinstance(root, ast.FunctionDef | ast.AsyncFunctionDef):
            return set()
        args = root.args
        positional = [*args.posonlyargs, *args.args]
        defaults: dict[str, ast.expr | None] = dict.fromkeys(a.arg for a in positional)
        # the last positional parameters take the defaults; every keyword-only one has one
        defaults.update(zip((a.arg for a in positional[::-1]), args.defaults[::-1], strict=False))
        defaults.update(zip((a.arg for a in args.kwonlyargs), args.kw_defaults, strict=True))
        rebound = set().union(*(names for names, _ in bindings))
        found = set()
        for arg in [*positional, *args.kwonlyargs]:
            default = defaults.get(arg.arg)
            annotation = last_part(dotted_name(arg.annotation) or "") if arg.annotation else ""
            declared = annotation in ("bool", "str") or vocab.is_config_name(annotation)
            if isinstance(default, ast.Constant) and isinstance(default.value, bool | str):
                declared = True
            if isinstance(default, ast.Name) and default.id.isupper():
                declared = True  # ``params=PARAMS``: a module's constant table of settings
            if declared and arg.arg not in rebound:
                found.add(arg.arg)
        return found

    def _sees_gradients(self, key: int) -> bool:
        """Does the function on line ``key`` (or one around it, or its optimizer class)
        handle gradients: a name or call that says so? Only there is ``g`` a gradient;
        elsewhere it is a graph or a random generator."""
        memo = ("gradients", str(key))
        if memo not in self._helper_memo:
            entry = self._functions.get(key)
            root: ast.AST = entry[0] if entry else self.tree
            enclosing = entry[1] if entry else None
            self._helper_memo[memo] = (
                key in self._optimizer_methods
                or any(_names_gradients(node) for node in self.nodes(root))
                or (enclosing is not None and self._sees_gradients(enclosing.lineno))
            )
        return self._helper_memo[memo]

    def _propagate(self, bindings: list[tuple[set[str], ast.expr]], scope: Scope) -> None:
        """Grow ``scope`` through its bindings until nothing new is learned."""
        changed = True
        while changed:
            changed = False
            for names, value in bindings:
                plain = {n for n in names if not vocab.is_metric_name(n)}
                if self._is_grad_transform(value, scope) and not plain <= scope.grad_functions:
                    scope.grad_functions |= plain
                    changed = True
                if not plain <= scope.signal and self.is_signal(value, scope):
                    scope.signal |= plain
                    changed = True
                if not names <= scope.flags and self.is_nonfinite_test(value, scope, self.source):
                    scope.flags |= names
                    changed = True

    def _predictions_feeding_loss(
        self, root: ast.AST, bindings: list[tuple[set[str], ast.expr]]
    ) -> set[str]:
        """A model's outputs (``logits = self.head(x)``, ``out = model.apply(p, x)`` and
        what is computed from them) that the scope's loss is computed from: cleaning those
        hides a NaN the model produced. Inputs and labels reach the loss too, but come from
        the data: cleaning them is input cleaning."""
        fed = self._names_reaching_a_loss(root, bindings)
        if not fed:  # most scopes compute no loss: nothing to follow
            return set()
        predictions: set[str] = set()
        if isinstance(root, FunctionNode):
            predictions = (fed & parameter_names(root)) | self._prediction_parameters(root)
        # a size is no prediction, whatever its name (``n_pred_ch = input.shape[1]``)
        valued = [(names, value) for names, value in bindings if not _describes(value)]
        changed = True
        while changed:
            changed = False
            for names, value in valued:
                if not names <= predictions and (
                    any(vocab.is_prediction_name(n) for n in names)
                    or self._calls_model(value)
                    or bool(_values_in(value) & predictions)
                ):
                    predictions |= names
                    changed = True
        return predictions & fed

    def _names_reaching_a_loss(
        self, root: ast.AST, bindings: list[tuple[set[str], ast.expr]]
    ) -> set[str]:
        """Names the scope computes its loss from: arguments of a loss call, values bound
        to a loss, what a loss function returns. A parameter re-bound to a model's output
        (``def forward(self, x): x = nan_to_num(x); x = self.layer(x)``) was first the
        input, which may be cleaned: parameters are left out, but for a loss function's
        predictions (``def dice_loss(y_true, y_pred)``), which the model made."""
        sources: list[ast.AST] = [v for names, v in bindings if any(map(vocab.is_loss_name, names))]
        function = root if isinstance(root, ast.FunctionDef | ast.AsyncFunctionDef) else None
        returns_loss = function is not None and (
            self.is_loss_function(function) or function.name in self._loss_parts
        )
        for node in self.nodes(root):
            if isinstance(node, ast.Call) and vocab.is_loss_name(self.called(node.func)):
                sources.extend([*node.args, *(k.value for k in node.keywords)])
            elif isinstance(node, ast.Return) and node.value is not None and returns_loss:
                sources.append(_loss_returned(node.value))
        fed = set().union(*(_names_in(source) for source in sources))
        # and what those are computed from (``ratio`` from ``mu``), but through no call a
        # gradient does not flow back through
        made_from = [
            (names, _values_in(value)) for names, value in bindings if not self._cuts(value)
        ]
        changed = bool(fed)
        while changed:
            changed = False
            for names, used in made_from:
                if names & fed and not used <= fed:
                    fed |= used
                    changed = True
        if function is None:
            return fed
        return fed - (parameter_names(function) - self._prediction_parameters(function))

    def _prediction_parameters(self, function: FunctionNode) -> set[str]:
        """The parameters of a loss function that hold the model's predictions: those
        named so (``def dice_loss(y_true, y_pred)``), and those a loss function hands its
        predictions in through (``tversky_term(y_true, y_pred)`` called in ``dice_loss``)."""
        if self.is_loss_function(function):
            parameters = parameter_names(function)
            # torch's loss modules take ``forward(self, input, target)``: the input is
            # the model's output
            given = {"input"} & parameters if parameters & {"target", "targets"} else set()
            return set(filter(vocab.is_prediction_name, parameters)) | given
        return self._loss_parts.get(function.name, set())

    @cached_property
    def _loss_parts(self) -> dict[str, set[str]]:
        """Same-file functions a loss function calls with its predictions, and the
        parameters those arrive in: such a function computes a part of the loss."""
        parts: dict[str, set[str]] = {}
        for function, _ in self._functions.values():
            if not self.is_loss_function(function):
                continue
            predictions = self._prediction_parameters(function)
            for node in self.nodes(function) if predictions else ():
                if not isinstance(node, ast.Call):
                    continue
                name = self.helper_name(node.func)
                if name is None or vocab.is_loss_name(name) or name in _LOSS_ENTRY_METHODS:
                    continue  # ``forward`` is every module's: calling one runs a module
                for helper in self.functions_named(name):
                    fed = _parameters_given(helper, node, predictions)
                    if fed:
                        parts.setdefault(name, set()).update(fed)
        return parts

    def _cuts(self, value: ast.expr) -> bool:
        """Does ``value`` go through a call no gradient flows back through?"""
        return any(
            isinstance(node, ast.Call) and self.called(node.func) in vocab.NO_GRADIENT_CALLS
            for node in ast.walk(value)
        )

    def called(self, func: ast.expr) -> str:
        """The last part of what a call goes to, resolved through the file's imports
        (``np.isnan`` -> ``isnan``; ``self.helper`` -> ``helper``)."""
        return last_part(self.qualified(func) or getattr(func, "attr", None))

    def _calls_model(self, value: ast.expr) -> bool:
        """Is ``value`` computed by calling a model (``model(x)``, ``self.proj(x)``,
        ``state.apply_fn(params, x)``, ``self.encoder.extract_features(x)``)?"""
        for node in ast.walk(value):
            if isinstance(node, ast.Call):
                chain = (dotted_name(node.func) or "").split(".")
                if any(vocab.is_model_name(part) for part in chain if part != "self"):
                    return True
        return False

    def is_guarded(self, key: int) -> bool:
        """Does the function on line ``key`` raise, or record a failed finiteness test
        (return it, store it, pass it on) so that a caller can raise?"""
        entry = self._functions.get(key)
        root: ast.AST = entry[0] if entry else self.tree
        return self._raises(root) or self._records(root, self.scope(key))

    # ---- expressions ----------------------------------------------------------------
    def qualified(self, node: ast.expr) -> str | None:
        dotted = dotted_name(node)
        return resolve(dotted, self.aliases) if dotted else None

    def _is_grad_transform(self, value: ast.expr, scope: Scope) -> bool:
        if isinstance(value, ast.Call):
            qualified = self.qualified(value.func) or ""
            if last_part(qualified) in vocab.GRAD_TRANSFORMS and not qualified.startswith("torch."):
                return True
            if last_part(qualified) == "partial" and value.args:
                return self._is_grad_transform(value.args[0], scope)
            return isinstance(value.func, ast.Name) and value.func.id in scope.grad_functions
        return isinstance(value, ast.Name) and value.id in scope.grad_functions

    def is_signal(self, expr: ast.expr, scope: Scope) -> bool:
        """Does ``expr`` carry training signal (by name, by origin or through a helper)?"""
        for node in self._signal_carriers(expr):
            if isinstance(node, ast.Name):
                if node.id in scope.signal or (
                    vocab.is_signal_name(node.id) and node.id not in scope.not_signal
                ):
                    return True
            elif isinstance(node, ast.Attribute):
                chain = (dotted_name(node) or node.attr).split(".")
                if node.attr in vocab.AMBIGUOUS_SIGNAL_NAMES and node.attr in scope.not_signal:
                    continue  # ``self.g`` where no gradient is in sight, or used as a graph
                if vocab.is_signal_name(node.attr) and not any(
                    vocab.is_metric_name(part) or vocab.is_config_name(part) for part in chain
                ):
                    return True
                if node.attr == "state" and len(chain) > 1 and vocab.names_optimizer(chain[-2]):
                    return True  # ``self.optimizer.state``: the optimizer's moments
            elif isinstance(node, ast.Call) and self._call_returns_signal(node, scope):
                return True
        return False

    def _signal_carriers(self, expr: ast.expr) -> Iterator[ast.AST]:
        """The nodes of ``expr`` through which signal can reach its value. A metric's result
        (``average_precision(predict(params, x), y)``, ``accuracy_score(...)``,
        ``metric.compute()``) is an observation derived from signal, not signal: the walk
        does not enter its arguments."""
        stack: list[ast.AST] = [expr]
        while stack:
            node = stack.pop()
            yield node
            if isinstance(node, ast.Call) and self.computes_metric(node):
                continue
            if _asks_about(node):
                continue  # ``input.shape[1]``: how big a value is, not the value
            if isinstance(node, ast.Call) and self.called(node.func) in vocab.NO_GRADIENT_CALLS:
                # ``lax.stop_gradient(x)``, ``x.detach()``: the name says nothing of the
                # value, which is what it is given
                receiver = [node.func.value] if isinstance(node.func, ast.Attribute) else []
                stack.extend([*receiver, *node.args, *(k.value for k in node.keywords)])
                continue
            if isinstance(node, ast.Call) and _updates_a_mapping(node):
                # ``past_key_value.update(k, v)``: a cache's or a mapping's ``update``
                # says nothing of its result; an optimizer's is named for its receiver
                stack.extend([*ast.iter_child_nodes(node.func), *node.args])
                stack.extend(k.value for k in node.keywords)
                continue
            stack.extend(ast.iter_child_nodes(node))

    def computes_metric(self, call: ast.Call) -> bool:
        """A call to a metric (its name, or its receiver's, names a score, a precision,
        an accuracy...), unless it is also named for a loss."""
        func = call.func
        names = [self.called(func)]
        if isinstance(func, ast.Attribute):
            names.append(last_part(dotted_name(func.value) or ""))
        return any(
            name
            and vocab.is_metric_name(name)
            and not _TRAINING_NAME_WORDS & set(vocab.name_words(name))
            for name in names
        )

    def _call_returns_signal(self, call: ast.Call, scope: Scope) -> bool:
        if self._is_grad_transform(call.func, scope):
            return True
        qualified = self.qualified(call.func) or ""
        if last_part(qualified) in vocab.GRAD_CALLS or qualified == "torch.autograd.grad":
            return True
        helper = self.helper_name(call.func)
        return helper is not None and self._helper_returns_signal(helper)

    def is_nonfinite_test(self, expr: ast.expr, scope: Scope, text: str) -> bool:
        """Is ``expr`` a test of training signal for NaN/Inf (``isnan(loss)``, ``g != g``,
        a flag assigned from such a test, a same-file predicate helper)?

        ``text`` is the source ``expr`` was parsed from; a self-comparison only counts when
        its text reads ``x != x``, which keeps the textual pre-filter exact."""
        return self._test(expr, _Lens(lambda e: self.is_signal(e, scope), scope.flags, text))

    def may_be_test(self, expr: ast.expr, flags: set[str]) -> bool:
        """The same question without signal tracking (any value counts): a cheap superset
        used to screen functions before their scope is computed."""
        return self._test(expr, _Lens(lambda e: True, flags, None))

    def _test(self, expr: ast.expr, lens: _Lens) -> bool:
        if isinstance(expr, ast.Name):
            return expr.id in lens.flags
        if isinstance(expr, ast.Compare):
            if (
                len(expr.ops) == 1
                and isinstance(expr.ops[0], ast.NotEq)
                and self_comparable(expr.left)
                and ast.dump(expr.left) == ast.dump(expr.comparators[0])
                and (lens.text is None or vocab.self_comparisons(source_segment(lens.text, expr)))
                and lens.signal(expr.left)
            ):
                return True
            return any(self._test(e, lens) for e in (expr.left, *expr.comparators))
        if isinstance(expr, ast.Call):
            return self._test_call(expr, lens)
        if isinstance(expr, ast.BoolOp):
            return any(self._test(v, lens) for v in expr.values)
        if isinstance(expr, ast.UnaryOp):
            return self._test(expr.operand, lens)
        if isinstance(expr, ast.BinOp) and isinstance(expr.op, ast.BitAnd | ast.BitOr | ast.BitXor):
            return any(self._test(e, lens) for e in (expr.left, expr.right))
        if isinstance(expr, ast.Attribute):  # ``jnp.isnan(g).any`` before it is called
            return self._test(expr.value, lens)
        if isinstance(expr, ast.GeneratorExp | ast.ListComp):
            return self._test(expr.elt, lens)
        return False

    def _test_call(self, call: ast.Call, lens: _Lens) -> bool:
        name = self.called(call.func)
        subject = self.predicate_subject(call)
        if subject is not None:
            if name in _INFINITY_TESTS and _names_logits(subject):
                return False  # ``isinf(student_logits)``: where logits were masked to -inf
            return lens.signal(subject)
        helper = self.helper_name(call.func)
        if helper is not None and self.is_predicate_helper(helper):
            return any(lens.signal(a) for a in call.args)
        if any(self.is_predicate_reference(a) for a in call.args):  # tree_map(isfinite, g)
            return any(lens.signal(a) for a in call.args)
        if name in vocab.SELECTORS:
            return False
        receiver = [call.func.value] if isinstance(call.func, ast.Attribute) else []
        if name in _BOOLEAN_CALLS:  # ``jnp.all(jnp.isfinite(g))``, ``isnan(g).any()``
            return any(
                self._test(e, lens)
                for e in (*receiver, *call.args, *(k.value for k in call.keywords))
            )
        # any other method keeps its receiver's meaning only: ``isnan(loss).item()``
        return any(self._test(e, lens) for e in receiver)

    def predicate_subject(self, call: ast.Call) -> ast.expr | None:
        """What ``isnan(x)`` / ``x.isnan()`` tests, or None when ``call`` is no such test."""
        name = self.called(call.func)
        if name not in vocab.PREDICATES:
            return None
        if call.args:
            return call.args[0]
        if call.keywords:
            return call.keywords[0].value
        return call.func.value if isinstance(call.func, ast.Attribute) else None

    def _sanitizer_reference(self, node: ast.expr) -> bool:
        """``np.nan_to_num`` used as a value, or bound with ``partial``."""
        if isinstance(node, ast.Call) and self.called(node.func) == "partial" and node.args:
            node = node.args[0]
        return isinstance(node, ast.Name | ast.Attribute) and (
            last_part(self.qualified(node)) in vocab.SANITIZERS
        )

    def _hands_to_sanitizer(self, call: ast.Call, scope: Scope) -> bool:
        """Does ``call`` hand training signal of ``scope`` to a parameter that the
        same-file sanitizer it calls cleans?"""
        helper = self.helper_name(call.func)
        cleaned = self.sanitized_parameters(helper) if helper else []
        positional = [a for a in call.args if not isinstance(a, ast.Starred)]
        handed = [positional[i] for i, _ in cleaned if 0 <= i < len(positional)]
        names = {name for _, name in cleaned}
        handed += [k.value for k in call.keywords if k.arg in names]
        return any(self.is_signal(v, scope) for v in handed)

    def is_predicate_reference(self, node: ast.expr) -> bool:
        """``jnp.isfinite`` used as a value (not called)."""
        return isinstance(node, ast.Name | ast.Attribute) and (
            last_part(self.qualified(node)) in vocab.PREDICATES
        )

    # ---- guards: does the scope raise, or record the failure for a raise? -------------
    def _raises(self, root: ast.AST) -> bool:
        nodes = self.nodes(root) if isinstance(root, ast.Module) else ast.walk(root)
        for node in nodes:
            if isinstance(node, ast.Raise | ast.Assert):
                return True
            if isinstance(node, ast.Call):
                if last_part(self.qualified(node.func)) in vocab.RAISING_CALLS:
                    return True
                called = self.called(node.func)
                if self.defines_function(called) and self.is_raising_helper(called):
                    return True
        return False

    def _records(self, root: ast.AST, scope: Scope) -> bool:
        """Is a finiteness flag kept (returned, stored, passed on) rather than only used to
        pick between old and new values?"""
        return bool(scope.flags) and self.records_names(root, set(scope.flags), scope)

    def records_names(self, root: ast.AST, flags: set[str], scope: Scope) -> bool:
        """Is one of ``flags`` kept (returned, stored, passed on to anything but a log)
        rather than only used to pick between old and new values?"""
        kept = set(flags)
        # what goes into a record for the logs (``stats["step_rejected"] = reject``) is
        # reported, not kept for a raise
        for_logs: set[int] = set()
        for names, value in self.bindings(root):  # ``first_bad = where(ok, first_bad, step)``
            if names and all(map(vocab.is_log_record_name, names)):
                for_logs.add(id(value))
            elif self._mentions(value, kept, scope):
                kept |= {n for n in names if not vocab.is_signal_name(n)}
        for node in self.nodes(root):
            if id(node) in for_logs:
                continue
            if isinstance(node, ast.Return | ast.Yield) and node.value is not None:
                values: list[ast.expr] = [node.value]
            elif isinstance(node, ast.Assign) and not all(
                isinstance(t, ast.Name) for t in node.targets
            ):
                if all(vocab.is_log_record_name(_root_name(t)) for t in node.targets):
                    continue
                values = [node.value]
            elif isinstance(node, ast.Dict):
                values = [v for v in node.values if v is not None]
            elif isinstance(node, ast.Call) and last_part(
                self.qualified(node.func) or getattr(node.func, "attr", None)
            ) not in (vocab.SELECTORS | _BOOLEAN_CALLS | vocab.OBSERVING_CALLS | {"partial"}):
                values = [*node.args, *(k.value for k in node.keywords)]
            else:
                continue
            if any(self._mentions(v, kept, scope) for v in values):
                return True
        return False

    def _branch_returns_signal(self, branch: ast.expr) -> bool:
        """A ``cond`` branch given as a same-file function that returns training signal
        (``def _skip(_): return params, opt_state``)."""
        helper = self.helper_name(branch)
        return helper is not None and self._helper_returns_signal(helper)

    def _mentions(self, expr: ast.expr, names: set[str], scope: Scope) -> bool:
        """Does ``expr`` carry one of ``names`` out, rather than only use it to choose
        between training-signal values (``where(ok, new, old)``)?"""
        if isinstance(expr, ast.Name):
            return expr.id in names
        if isinstance(expr, ast.Lambda):  # ``tree.map(lambda n, o: ...)``: leaves of signal
            inner = Scope(scope.signal | parameter_names(expr), scope.grad_functions, scope.flags)
            return self._mentions(expr.body, names, inner)
        if (  # ``partial(jnp.where, ok)``: a select waiting for its two values
            isinstance(expr, ast.Call)
            and expr.args
            and last_part(self.qualified(expr.func) or "") == "partial"
            and last_part(self.qualified(expr.args[0]) or "") in vocab.SELECTORS
        ):
            return False
        if isinstance(expr, ast.Call) and expr.args and self.called(expr.func) in vocab.SELECTORS:
            chosen = [*expr.args[1:], *(k.value for k in expr.keywords)]
            if any(self.is_signal(a, scope) or self._branch_returns_signal(a) for a in chosen):
                return any(self._mentions(a, names, scope) for a in chosen)
        return any(
            self._mentions(child, names, scope)
            for child in ast.iter_child_nodes(expr)
            if isinstance(child, ast.expr)
        )

    # ---- same-file helpers ----------------------------------------------------------
    def _helper(self, kind: str, name: str) -> bool:
        key = (kind, name)
        if key not in self._helper_memo:
            if name in self.imported:
                return self.imported[name].kinds[kind]
            self._helper_memo[key] = False  # recursion guard
            check = getattr(self, f"_{kind}")
            self._helper_memo[key] = any(check(fn) for fn in self._functions_by_name[name])
        return self._helper_memo[key]

    def _helper_returns_signal(self, name: str) -> bool:
        return self._helper("returns_signal", name)

    def is_predicate_helper(self, name: str) -> bool:
        return self._helper("tests_parameter", name)

    def is_sanitizer_helper(self, name: str) -> bool:
        """A same-file function that replaces non-finite values of its argument (a helper
        named for plots or metrics is left alone, like the values it cleans)."""
        return not vocab.is_metric_name(name) and self._helper("sanitizes_parameter", name)

    def is_raising_helper(self, name: str) -> bool:
        return self._helper("raises_somewhere", name)

    def _returns_signal(self, fn: FunctionNode) -> bool:
        scope = self.scope(fn.lineno)
        return any(
            isinstance(node, ast.Return)
            and node.value is not None
            and self.is_signal(node.value, scope)
            for node in self.nodes(fn)
        )

    def _parameter_scope(self, fn: FunctionNode, only: str | None = None) -> Scope:
        """The function's scope, assuming its parameters (or just ``only``) are training
        signal, and so the tests of them it binds (``mask = isnan(terms)``) flags."""
        own = self.scope(fn.lineno)
        assumed = parameter_names(fn) if only is None else {only}
        scope = Scope(own.signal | assumed, own.grad_functions, set(own.flags))
        for names, value in self.bindings(fn):
            if not names <= scope.flags and _true_when_nonfinite(value):
                if self.is_nonfinite_test(value, scope, self.source):
                    scope.flags |= names
        return scope

    def _tests_parameter(self, fn: FunctionNode) -> bool:
        candidates = self.flag_candidates(fn)
        returns = [
            node.value
            for node in self.nodes(fn)
            if isinstance(node, ast.Return)
            and isinstance(node.value, ast.expr)
            and self.may_be_test(node.value, candidates)
        ]
        if not returns:  # screened without computing the function's scope
            return False
        scope = self._parameter_scope(fn)
        return any(self.is_nonfinite_test(value, scope, self.source) for value in returns)

    def flag_candidates(self, fn: FunctionNode) -> set[str]:
        """Names ``fn`` binds to something that may be a finiteness test: a cheap,
        syntactic superset of its flags (no signal tracking)."""
        found: set[str] = set()
        bindings = self.bindings(fn)
        changed = True
        while changed:
            changed = False
            for names, value in bindings:
                if not names <= found and self.may_be_test(value, found):
                    found |= names
                    changed = True
        return found

    def sanitized_parameters(self, name: str) -> list[tuple[int, str]]:
        """(position, name) of each parameter a same-file sanitizer cleans, so that a call
        counts only when it hands training signal to one of them."""
        if name in self.imported:
            return list(self.imported[name].cleans)
        if name in self._sanitized:
            return self._sanitized[name]
        self._sanitized[name] = []  # a helper calling itself, or two calling each other
        found: list[tuple[int, str]] = []
        for fn in self._functions_by_name.get(name, []):
            args = [a.arg for a in (*fn.args.posonlyargs, *fn.args.args)]
            offset = 1 if args[:1] in (["self"], ["cls"]) else 0
            for index, parameter in enumerate(args[offset:]):
                if self._sanitizes_parameter(fn, parameter):
                    found.append((index, parameter))
            found += [
                (-1, a.arg) for a in fn.args.kwonlyargs if self._sanitizes_parameter(fn, a.arg)
            ]
        self._sanitized[name] = found
        return found

    def _sanitizes_parameter(self, fn: FunctionNode, only: str | None = None) -> bool:
        calls = [
            (node, self.called(node.func)) for node in self.nodes(fn) if isinstance(node, ast.Call)
        ]
        # ``tree_map(np.nan_to_num, vals)``, ``tree_map(partial(jnp.nan_to_num, nan=0), v)``
        calls += [
            (c, "mapped")
            for c, n in calls
            if n in vocab.MAPPERS and len(c.args) >= 2 and self._sanitizer_reference(c.args[0])
        ]
        # another same-file sanitizer it hands its values to (``_jit_nan_to_num(vals)``)
        calls += [
            (c, "helper")
            for c, n in calls
            if (helper := self.helper_name(c.func))
            and helper != fn.name
            and self.sanitized_parameters(helper)
        ]
        calls = [
            (c, n)
            for c, n in calls
            if n in vocab.SANITIZERS | vocab.MASKED_FILL | {"where", "mapped", "helper"}
        ]
        calls += [
            (node, "[]=")  # ``x[torch.isnan(x)] = 0.0``
            for node in self.nodes(fn)
            if isinstance(node, ast.Assign)
            and any(isinstance(t, ast.Subscript) for t in node.targets)
            and self.is_finite_constant(node.value)
        ]
        if not calls:
            return False
        own = self.scope(fn.lineno)
        if self._cleans(calls, own):
            return False  # it cleans signal of its own: that statement is the finding
        return self._cleans(calls, self._parameter_scope(fn, only))

    def _cleans(self, calls: list[tuple[ast.Call | ast.Assign, str]], scope: Scope) -> bool:
        """Does one of ``calls`` (sanitizers, masked fills and assignments, selects)
        replace non-finite values of ``scope``'s signal by finite ones?"""
        for node, name in calls:
            if isinstance(node, ast.Assign):
                masks = [t.slice for t in node.targets if isinstance(t, ast.Subscript)]
                if any(self.is_nonfinite_test(m, scope, self.source) for m in masks):
                    return True
                continue
            if name == "mapped" and any(self.is_signal(v, scope) for v in node.args[1:]):
                return True
            if name == "helper" and self._hands_to_sanitizer(node, scope):
                return True
            if name in vocab.SANITIZERS and self.hides_nothing(node):
                continue
            if name in vocab.SANITIZERS:
                subjects = [*node.args[:1]]
                subjects += [k.value for k in node.keywords if k.arg in SANITIZED_KEYWORDS]
                if isinstance(node.func, ast.Attribute):
                    subjects.append(node.func.value)
                if any(self.is_signal(s, scope) for s in subjects):
                    return True
            elif name in vocab.MASKED_FILL and node.args:
                mask = node.args[0 if len(node.args) < 3 else 1]
                if self.is_nonfinite_test(mask, scope, self.source):
                    return True
            elif name == "where" and len(node.args) >= 3:
                if any(self.is_finite_constant(b) for b in node.args[1:3]) and (
                    self.is_nonfinite_test(node.args[0], scope, self.source)
                ):
                    return True
        return False

    def is_constant(self, node: ast.expr) -> bool:
        """A number, ``-1.0``, ``jnp.nan``, a constant fill (``zeros_like(x)``) or a
        conversion of a constant (``torch.tensor(0.0)``, ``float("nan")``; ``float(v)``
        converts a value and is no constant)."""
        if isinstance(node, ast.UnaryOp):
            node = node.operand
        if isinstance(node, ast.Constant):
            return isinstance(node.value, int | float | complex) and not isinstance(
                node.value, bool
            )
        if isinstance(node, ast.Attribute):
            return node.attr in vocab.CONSTANT_NAMES
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Mult):
            # ``value * ones_like(g)``: a fill with a number the caller chose
            sides = (node.left, node.right)
            return any(map(self._is_fill, sides)) and all(
                self._is_fill(side) or isinstance(side, ast.Name | ast.Constant) for side in sides
            )
        if not isinstance(node, ast.Call):
            return False
        name = self.called(node.func)
        if name in vocab.CONSTANT_CONVERSIONS:
            return bool(node.args) and all(
                self.is_constant(a) or (isinstance(a, ast.Constant) and isinstance(a.value, str))
                for a in node.args
            )
        return name in vocab.CONSTANT_FILLS

    def _is_fill(self, node: ast.expr) -> bool:
        return isinstance(node, ast.Call) and self.called(node.func) in vocab.CONSTANT_FILLS

    def is_finite_constant(self, node: ast.expr) -> bool:
        """A constant that stands in for a value as a finite number (``0.0``,
        ``zeros_like(x)``): what hides a NaN or an Inf it replaces."""
        return self.is_constant(node) and not self.is_nonfinite_constant(node)

    def is_nonfinite_constant(self, node: ast.expr) -> bool:
        """``jnp.inf``, ``-math.inf``, ``float("nan")``, ``torch.tensor(float("-inf"))``,
        ``self.neg_inf``: put in place of NaN or Inf, it is still not finite (a rejected
        trial, a masked log-probability), so nothing is hidden."""
        if isinstance(node, ast.UnaryOp):
            node = node.operand
        if isinstance(node, ast.Name | ast.Attribute):
            name = node.id if isinstance(node, ast.Name) else node.attr
            words = set(vocab.name_words(name.lower()))
            return bool(words & _NONFINITE_WORDS) and words <= _NONFINITE_WORDS | _SIGN_WORDS
        if not (isinstance(node, ast.Call) and node.args):
            return False
        called = self.called(node.func)
        if called == "float" and isinstance(node.args[0], ast.Constant):
            return str(node.args[0].value).lower().lstrip("+-") in ("nan", "inf", "infinity")
        if called in ("full", "full_like"):
            return len(node.args) > 1 and self.is_nonfinite_constant(node.args[1])
        if _CONVERSION_WORDS.intersection(vocab.name_words(called)) or (
            called in vocab.CONSTANT_CONVERSIONS
        ):
            return self.is_nonfinite_constant(node.args[0])  # ``numpy_dtype(-np.inf)``
        return False

    def masked_before(self, key: int, name: str, line: int) -> bool:
        """Was ``name`` multiplied by a mask before ``line`` in the function on line
        ``key`` (``loss = loss * mask``, ``loss *= mask``)? Its NaN then sits where the
        mask is zero (``0 * inf`` of a masked-out target), and clearing it is masking."""
        entry = self._functions.get(key)
        if entry is None:
            return False
        for node in self.nodes(entry[0]):
            if getattr(node, "lineno", line) >= line:
                continue
            if isinstance(node, ast.AugAssign) and isinstance(node.op, ast.Mult):
                target, factors = node.target, [node.value]
            elif (
                isinstance(node, ast.Assign)
                and isinstance(node.value, ast.BinOp)
                and isinstance(node.value.op, ast.Mult)
            ):
                target, factors = node.targets[0], [node.value.left, node.value.right]
            else:
                continue
            if (
                isinstance(target, ast.Name)
                and target.id == name
                and any(_is_mask(factor) for factor in factors)
            ):
                return True
        return False

    def only_checks(self, key: int, name: str) -> bool:
        """Does the function on line ``key`` assert on ``name`` while it neither hands
        ``name`` back nor trains? Cleaning a copy of the parameters before comparing it
        across ranks (a consistency check) hides nothing from training."""
        entry = self._functions.get(key)
        if entry is None:
            return False
        nodes = self.nodes(entry[0])
        asserted = any(isinstance(n, ast.Assert) and name in _names_in(n.test) for n in nodes)
        returned = any(
            isinstance(n, ast.Return) and n.value is not None and name in _names_in(n.value)
            for n in nodes
        )
        steps = any(
            isinstance(n, ast.Call)
            and self.called(n.func) in vocab.UPDATE_CALLS | vocab.TRAINING_CALLS
            for n in nodes
        )
        return asserted and not returned and not steps

    def _raises_somewhere(self, fn: FunctionNode) -> bool:
        """A raise on some path counts (a helper that re-raises when out of retries)."""
        return any(isinstance(node, ast.Raise) for node in self.nodes(fn))

    # ---- queries from rules, on the code of a libcst node ----------------------------
    def parse_expression(self, code: str) -> tuple[ast.expr, str]:
        """The ``ast`` of one expression's code, and the text positions refer to."""
        if code not in self._parsed:
            text = f"(\n{code}\n)"
            self._parsed[code] = (ast.parse(text, mode="eval").body, text)
        return self._parsed[code]

    def code_is_signal(self, code: str, key: int) -> bool:
        expr, _ = self.parse_expression(code)
        return self.is_signal(expr, self.scope(key))

    def code_is_nonfinite_test(self, code: str, key: int) -> bool:
        expr, text = self.parse_expression(code)
        return self.is_nonfinite_test(expr, self.scope(key), text)
