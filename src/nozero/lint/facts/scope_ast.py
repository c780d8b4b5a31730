"""The ``ast`` vocabulary of a file's facts: walking one scope, the names an expression
binds or reads, the pairing of targets with values, and ``Scope``, the record of what one
function knows about its names. Plain functions of a node, with no file state, so every
part of ``FileFacts`` can share them without importing ``FileFacts`` itself."""

from __future__ import annotations

import ast
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

from nozero.lint import vocab
from nozero.lint.facts.sources import PREDICATE_POLARITY
from nozero.lint.imports import dotted_name, last_part
from nozero.lint.lines import line_starts
from nozero.lint.tables.propagation import NONFINITE_TRUTH_KEEPING

FunctionNode = ast.FunctionDef | ast.AsyncFunctionDef
_SCOPE_BOUNDARY = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)
# What describes a value's size, kind or place rather than holding it.
_DESCRIPTIONS = frozenset({"shape", "ndim", "dtype", "device", "is_cuda"})
_DESCRIBING_CALLS = frozenset(
    {"len", "size", "dim", "numel", "nelement"}
    # the kind of a value, not the value: ``bounded = isinstance(model.criterion, Mixin)``
    | {"isinstance", "issubclass", "type", "hasattr", "callable"}
)
# The methods a loss class computes its loss in (torch ``forward``, Keras ``call``).
_LOSS_ENTRY_METHODS = frozenset({"forward", "__call__", "call"})
# The methods a model class computes its outputs in (torch ``forward``, Keras ``call``,
# flax and equinox ``__call__``, nerfstudio's ``get_outputs``).
_MODEL_FORWARD_METHODS = frozenset({"forward", "__call__", "call", "get_outputs"})
_NO_GRADIENT_BLOCKS = frozenset({"no_grad", "inference_mode"})

# Words that keep a call named for a metric a training call (``train_and_evaluate``,
# ``accuracy_loss``).
_TRAINING_NAME_WORDS = frozenset({"loss", "train", "step", "grad", "grads", "update"})
_DIVISIONS = frozenset({"div", "div_", "divide", "true_divide", "true_divide_"})
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


def names_and_attributes(node: ast.AST) -> set[str]:
    """Names and dotted attributes in ``node``, ``self.`` dropped (``self.val_loader`` ->
    ``val_loader``): what an expression reads, as the flow pass and the facts name it."""
    found = set()
    for child in ast.walk(node):
        if isinstance(child, ast.Name):
            found.add(child.id)
        elif isinstance(child, ast.Attribute) and (dotted := dotted_name(child)):
            found.add(dotted.removeprefix("self."))
    return found


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


def _names_a_model_class(cls: ast.ClassDef) -> bool:
    """``class GenerfactoModel(Model)``, ``class SetTransformer(torch.nn.Module)``: a class
    named for a model or built on one (its ``self.field(...)`` calls run its parts). A
    loss class built on ``nn.Module`` is a loss: its ``self.w_func(...)`` weighs labels."""
    names = [cls.name, *(last_part(dotted_name(base) or "") for base in cls.bases)]
    return not _names_a_loss_class(cls) and any(vocab.is_model_name(name) for name in names)


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
    if name in NONFINITE_TRUTH_KEEPING:
        inner = [value.func.value] if isinstance(value.func, ast.Attribute) else []
        return any(_true_when_nonfinite(v) for v in [*inner, *value.args])
    return PREDICATE_POLARITY.get(name) is True


def true_only_where_finite(
    value: ast.expr, bound: Callable[[str], ast.expr | None], depth: int = 3
) -> bool:
    """``isfinite(x)``, ``~isnan(x)``, ``accept & finite`` (``bound``: a name's single
    value in its function, followed ``depth`` names deep): true only where a value is
    finite, so an assignment through it writes finite positions and leaves the
    non-finite ones as they were."""
    if isinstance(value, ast.Name):
        inner = bound(value.id) if depth else None
        return inner is not None and true_only_where_finite(inner, bound, depth - 1)
    if isinstance(value, ast.UnaryOp) and isinstance(value.op, ast.Invert | ast.Not):
        return _true_when_nonfinite(value.operand)
    if isinstance(value, ast.BinOp) and isinstance(value.op, ast.BitAnd):
        return any(true_only_where_finite(v, bound, depth) for v in (value.left, value.right))
    if isinstance(value, ast.BoolOp) and isinstance(value.op, ast.And):
        return any(true_only_where_finite(v, bound, depth) for v in value.values)
    if isinstance(value, ast.Call):
        return PREDICATE_POLARITY.get(last_part(dotted_name(value.func) or "")) is False
    return False


def _bindings(nodes: list[ast.AST]) -> list[tuple[set[str], ast.expr]]:
    """(names, value) for each binding among one scope's ``nodes``."""
    found: list[tuple[set[str], ast.expr]] = []
    for node in nodes:
        if (
            isinstance(node, ast.Assign)
            and len(node.targets) == 1
            and _own_attribute(node.targets[0])
        ):
            # ``self.grad_norm = clip_grad_norm_(...)``: an attribute the method sets and
            # reads, known by its dotted name
            found.append(({dotted_name(node.targets[0])}, node.value))  # type: ignore[arg-type]
        elif isinstance(node, ast.Assign) and len(node.targets) == 1:
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


def _own_attribute(target: ast.expr) -> bool:
    """``self.name``: an attribute of the instance a method works on."""
    return (
        isinstance(target, ast.Attribute)
        and isinstance(target.value, ast.Name)
        and target.value.id == "self"
    )


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


def is_inf(node: ast.expr) -> bool:
    """``inf``, ``-math.inf``, ``np.Inf``, ``float("inf")``."""
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
        node = node.operand
    if isinstance(node, ast.Attribute):
        return node.attr in ("inf", "Inf")
    if isinstance(node, ast.Name):
        return node.id == "inf"
    return (
        isinstance(node, ast.Call)
        and dotted_name(node.func) == "float"
        and len(node.args) == 1
        and isinstance(node.args[0], ast.Constant)
        and str(node.args[0].value).lower().lstrip("+-") in ("inf", "infinity")
    )


def steps_an_optimizer(node: ast.AST) -> bool:
    """``optimizer.step()``, ``self.opt.step()``, ``scaler.step(opt)``,
    ``optax.apply_updates(...)``, ``opt.apply_gradients(...)``: an update of the
    parameters (a scheduler's or an average's ``step`` is none)."""
    if not isinstance(node, ast.Call) or not isinstance(node.func, ast.Attribute):
        return False
    if node.func.attr in ("apply_updates", "apply_gradients", "minimize"):
        return True
    words = set(vocab.name_words((dotted_name(node.func.value) or "").rsplit(".", 1)[-1]))
    # ``optim_x2y``, ``g_optimizer``, ``scaler``; not ``optimizer_scheduler``
    stepped = words & {*vocab.OPTIMIZER_NAME_WORDS, "scaler"} and not words & _NOT_OPTIMIZERS
    return node.func.attr == "step" and bool(stepped)


# Words of what has a ``step`` that updates no parameter.
_NOT_OPTIMIZERS = frozenset({"scheduler", "sched", "lr", "ema", "averager", "clipper", "timer"})


def cleaned_subjects(node: ast.Call | ast.Assign) -> list[ast.expr]:
    """What a cleaning statement writes or reads: an assignment's targets
    (``p.grad[mask] = 0``), a call's receiver and first argument
    (``p.grad.nan_to_num_()``, ``torch.nan_to_num(p.grad, out=p.grad)``)."""
    if isinstance(node, ast.Assign):
        return list(node.targets)
    receiver = [node.func.value] if isinstance(node.func, ast.Attribute) else []
    return [*receiver, *node.args[:1]]


def parameter_defaults(fn: ast.FunctionDef | ast.AsyncFunctionDef) -> dict[str, ast.expr | None]:
    """Each parameter's default (None: none): the last positional parameters take
    ``defaults``, every keyword-only one its own."""
    args = fn.args
    positional = [*args.posonlyargs, *args.args]
    defaults: dict[str, ast.expr | None] = dict.fromkeys(a.arg for a in positional)
    defaults.update(zip((a.arg for a in positional[::-1]), args.defaults[::-1], strict=False))
    defaults.update(zip((a.arg for a in args.kwonlyargs), args.kw_defaults, strict=True))
    return defaults


def string_key(node: ast.AST) -> str | None:
    """The string key ``node`` stores or reads (``batch["k"]``, ``batch.get("k")``)."""
    if isinstance(node, ast.Subscript):
        key = node.slice
    elif (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and node.func.attr == "get"
        and node.args
    ):
        key = node.args[0]
    else:
        return None
    return key.value if isinstance(key, ast.Constant) and isinstance(key.value, str) else None
