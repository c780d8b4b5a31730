"""What a handler that catches any error (a bare ``except``, ``Exception``,
``RuntimeError``) lets training go on past: the failure of a step, of the loss a loop
steps with, of a round of the run, or of a loss term it sets to 0, or a ``None`` its
caller skips the batch on. torch's and nozero's non-finite checks raise
``RuntimeError``, so such a handler swallows them along with everything else (NZ301)."""

from __future__ import annotations

import libcst as cst

from nozero.lint import vocab
from nozero.lint.rules.base import Context, is_literal, raises, walk
from nozero.lint.tables.reactions import ROUND_LOOP_WORDS
from nozero.lint.tables.sources import LOSS_TERM_NAMES

_ANY_ERROR = "any error of the {} is caught, and the loop goes on"


def catches_any_error(handler: cst.ExceptHandler, names: set[str]) -> bool:
    """A bare ``except:`` or one naming ``RuntimeError``/``Exception``: it catches what a
    finiteness check raises (``nozero``'s guard, ``detect_anomaly``,
    ``clip_grad_norm_(error_if_nonfinite=True)``) along with everything else."""
    return handler.type is None or bool(names & vocab.BROAD_EXCEPTIONS)


def _takes_a_step(ctx: Context) -> bool:
    """Does the ``try`` around the handler take an optimizer step or run ``backward()``?"""
    parent = ctx.ancestors[-1] if ctx.ancestors else None
    return isinstance(parent, cst.Try) and any(
        isinstance(n, cst.Call) and ctx.called(n) in vocab.UPDATE_CALLS for n in walk(parent.body)
    )


def _computes_the_stepped_loss(ctx: Context) -> bool:
    """Does the ``try`` around the handler bind the loss that its loop then steps with
    (``try: loss = criterion(model(x), y)`` ... ``loss.backward()`` after it)? A failure
    of the forward pass or the loss, a NaN check's among them, skips the batch."""
    parent = ctx.ancestors[-1] if ctx.ancestors else None
    loop = next((a for a in reversed(ctx.ancestors) if isinstance(a, cst.For | cst.While)), None)
    if not isinstance(parent, cst.Try) or loop is None:
        return False
    bound = {
        target.value
        for node in walk(parent.body)
        if isinstance(node, cst.AssignTarget | cst.AnnAssign)
        for target in [node.target]
        if isinstance(target, cst.Name)
    }
    if not any(vocab.is_loss_name(name) for name in bound):
        return False
    return any(
        isinstance(n, cst.Call) and ctx.called(n) in vocab.UPDATE_CALLS for n in walk(loop.body)
    )


def _runs_a_round(ctx: Context) -> bool:
    """Does the ``try`` run one round of training in the training run's own loop (``for
    epoch in range(epochs): try: train_epoch(...)``)? Going on starts the next round of
    the same run. (A loop over configurations or seeds starts a new run instead.)"""
    parent = ctx.ancestors[-1] if ctx.ancestors else None
    loop = next((a for a in reversed(ctx.ancestors) if isinstance(a, cst.For)), None)
    if not isinstance(parent, cst.Try) or loop is None:
        return False
    counted = {
        word
        for n in walk(loop.target)
        if isinstance(n, cst.Name)
        for word in vocab.name_words(n.value)
    }
    return bool(counted & ROUND_LOOP_WORDS) and any(
        isinstance(n, cst.Call) and _trains_a_round(ctx.called(n)) for n in walk(parent.body)
    )


def _trains_a_round(name: str) -> bool:
    """``train_epoch``, ``train_one_epoch``, ``fit``, ``run_epoch``: a call that trains,
    named so by its first word (``plot_training_curves`` plots)."""
    words = vocab.name_words(name)
    if not words:
        return False
    return words[0] in ("train", "fit") or (words[0] == "run" and "epoch" in words)


def _none_or_led_by_none(value: cst.BaseExpression | None) -> bool:
    """``return``, ``return None``, ``return None, 0.0, 0``: no loss handed back."""
    if isinstance(value, cst.Tuple) and value.elements:
        value = value.elements[0].value
    return value is None or is_literal(value, "None")


def _hands_none_to_a_skip(handler: cst.ExceptHandler, ctx: Context) -> bool:
    """``except Exception: return None`` in a helper whose same-file caller skips its
    training loop's batch on None (``if out is None: continue``, then a step), and whose
    ``try`` looks at finiteness itself (``if isnan(loss): return None``)."""
    parent = ctx.ancestors[-1] if ctx.ancestors else None
    if not isinstance(parent, cst.Try) or raises(handler.body, ctx):
        return False
    if not any(
        (isinstance(n, cst.Name) and n.value in vocab.TRIGGER_WORDS)
        or (isinstance(n, cst.Attribute) and n.attr.value in vocab.TRIGGER_WORDS)
        for n in walk(parent.body)
    ):
        return False
    if not any(
        isinstance(n, cst.Return) and _none_or_led_by_none(n.value) for n in walk(handler.body)
    ):
        return False
    fn = ctx.facts.function_at(ctx.scope_key)
    return fn is not None and ctx.facts.skipped_on_none(fn.name)


def _zeroed_term(handler: cst.ExceptHandler, ctx: Context) -> str:
    """The loss term the ``try`` computes and the handler sets to a constant in its place
    (``try: kd = distill(...)`` / ``except Exception: kd = torch.tensor(0.0)``), or ''.
    Training goes on with the term gone, whatever failed, a NaN check's error among them."""
    parent = ctx.ancestors[-1] if ctx.ancestors else None
    if not isinstance(parent, cst.Try) or raises(handler.body, ctx):
        return ""
    computed = {
        n.target.value
        for n in walk(parent.body)
        if isinstance(n, cst.AssignTarget) and isinstance(n.target, cst.Name)
    }
    for n in walk(handler.body):
        if not (isinstance(n, cst.Assign) and len(n.targets) == 1):
            continue
        target = n.targets[0].target
        name = target.value if isinstance(target, cst.Name) else ""
        named = vocab.is_loss_name(name) or name in LOSS_TERM_NAMES
        if name in computed and named and _a_zero(n.value, ctx):
            return "" if _evaluates(ctx) else name
    return ""


def _in_a_unit_with_triggers(handler: cst.ExceptHandler, ctx: Context) -> bool:
    """Does trigger text sit in the unit around the handler (the top-level statement, or
    the statement of a class body, holding it)? A handler that catches any error needs
    no trigger word of its own, so this keeps what is reported independent of the
    shortcuts, which hand libcst only parts of such units."""
    line = ctx.scope_key or ctx.positions[handler].start.line + ctx.line_offset
    return ctx.facts.in_a_unit_with_triggers(line)


def _evaluates(ctx: Context) -> bool:
    """Is the node in a loop over evaluation data that takes no step (``for batch in
    val_loader``)? Nothing trains there."""
    fn = ctx.facts.function_at(ctx.scope_key) or ctx.facts.tree
    line = ctx.positions[ctx.ancestors[-1]].start.line + ctx.line_offset
    return ctx.facts.in_evaluation_loop(fn, line)


def _a_zero(value: cst.BaseExpression, ctx: Context) -> bool:
    """``0.0``, ``torch.tensor(0.0)``, ``torch.zeros(())``: a zero put in a term's place."""
    if isinstance(value, cst.Integer | cst.Float):
        return float(value.value) == 0.0
    if not isinstance(value, cst.Call):
        return False
    called = ctx.called(value)
    if called in ("zeros", "zeros_like", "new_zeros"):
        return True
    first = value.args[0].value if value.args else None
    return (
        called in ("tensor", "as_tensor")
        and isinstance(first, cst.Integer | cst.Float)
        and (float(first.value) == 0.0)
    )


def what_any_error_skips(handler: cst.ExceptHandler, ctx: Context) -> str:
    """What a handler catching any error lets training go on past ('' when nothing):
    in a loop, a step, the loss it steps with or a round of the run; in a step helper, the
    step its caller's loop goes on from; anywhere, a loss term it sets to 0, or a None its
    caller skips the batch on."""
    if not _in_a_unit_with_triggers(handler, ctx):
        return ""
    if ctx.in_loop() and _goes_on_from_any_error(handler, ctx):
        if _takes_a_step(ctx):
            return _ANY_ERROR.format("training step")
        if _computes_the_stepped_loss(ctx):
            return _ANY_ERROR.format("loss the loop steps with")
        if _runs_a_round(ctx):
            return _ANY_ERROR.format("round of training")
    if not ctx.in_loop() and _takes_a_step(ctx) and _steps_for_a_loop(handler, ctx):
        return "any error of the training step is caught, and the caller's loop goes on"
    term = _zeroed_term(handler, ctx)
    if term:
        return f"any error of the loss term {term} sets it to a constant"
    if _hands_none_to_a_skip(handler, ctx):
        return "any error hands back None, and the caller skips the batch"
    return ""


def returns_a_constant(handler: cst.ExceptHandler) -> bool:
    """Does the handler hand back a made-up result (``return 0.0``, ``return None``,
    ``return``) in place of the step's?"""
    for node in walk(handler.body):
        if isinstance(node, cst.Return):
            value = node.value
            if isinstance(value, cst.UnaryOperation):
                value = value.expression
            values = [e.value for e in value.elements] if isinstance(value, cst.Tuple) else [value]
            if all(
                v is None
                or isinstance(v, cst.Integer | cst.Float)
                or is_literal(v, "None", "False", "True")
                or _float_of_a_word(v)
                for v in values
            ):
                return True
    return False


def _float_of_a_word(value: cst.BaseExpression) -> bool:
    """``float("inf")``, ``float("nan")``: a made-up number written as a call."""
    return (
        isinstance(value, cst.Call)
        and isinstance(value.func, cst.Name)
        and value.func.value == "float"
        and len(value.args) == 1
        and isinstance(value.args[0].value, cst.SimpleString)
    )


def _steps_for_a_loop(handler: cst.ExceptHandler, ctx: Context) -> bool:
    """Is the handler's function one step of a loop elsewhere (named for a step, or
    called in a loop of this file), and does the handler hand back instead of raising?
    The caller's loop then goes on to the next batch, whatever failed."""
    fn = ctx.facts.function_at(ctx.scope_key)
    if fn is None or (raises(handler.body, ctx) and not _raises_only_what_it_knows(handler, ctx)):
        return False
    hands_back = any(isinstance(n, cst.Return) for n in walk(handler))
    if hands_back and not returns_a_constant(handler):
        return False  # ``return loss_so_far``: the caller gets what the step got to
    return "step" in vocab.name_words(fn.name) or ctx.facts.called_in_a_loop(fn.name)


def _goes_on_from_any_error(handler: cst.ExceptHandler, ctx: Context) -> bool:
    """Does the handler raise on no path, and not leave the loop: every error it catches,
    whatever its message, ends in the next batch? A handler that raises on some path
    (``if "out of memory" in str(err): ... else: raise``) sorts the errors it knows from
    the others, and is left alone, unless the one it raises is the one it recognises
    (then it goes on from every other)."""
    if raises(handler.body, ctx) and not _raises_only_what_it_knows(handler, ctx):
        return False
    top = [
        s
        for line in handler.body.body
        if isinstance(line, cst.SimpleStatementLine)
        for s in line.body
    ]
    return not any(isinstance(s, cst.Break | cst.Return) for s in top)


def _names_a_message(test: cst.BaseExpression) -> bool:
    """``"out of memory" in str(e).lower()``, alone or joined by ``or``: some text is in
    the message (not absent from it: ``not in``, ``not known``)."""
    if isinstance(test, cst.BooleanOperation):
        return isinstance(test.operator, cst.Or) and all(
            map(_names_a_message, (test.left, test.right))
        )
    return (
        isinstance(test, cst.Comparison)
        and isinstance(test.left, cst.SimpleString | cst.ConcatenatedString)
        and all(isinstance(c.operator, cst.In) for c in test.comparisons)
    )


def _raises_only_what_it_knows(handler: cst.ExceptHandler, ctx: Context) -> bool:
    """``if "out of memory" in str(e): raise e`` and then ``continue`` for the rest: the
    handler re-raises the one error it recognises (not a NaN one) and goes on from every
    other, a NaN check's ``RuntimeError`` among them."""
    statements = list(handler.body.body)
    for at, statement in enumerate(statements):
        if not (isinstance(statement, cst.If) and always_raises(statement.body, ctx)):
            continue
        if vocab.holds_nonfinite_text(ctx.code(statement.test)):
            return False  # ``if "nan" in str(e): raise``: the NaN errors stop the run
        if not _names_a_message(statement.test):
            return False  # ``if not known: raise``: the errors it does not know are raised
        rest = [*statements[at + 1 :], *([statement.orelse] if statement.orelse else [])]
        return not any(raises(node, ctx) for node in rest)
    return False


def always_raises(body: cst.BaseSuite, ctx: Context) -> bool:
    """Does a statement of the handler's own body (not one under a condition, such as a
    count of failures) raise?"""
    statements = body.body if isinstance(body, cst.IndentedBlock) else [body]
    for statement in statements:
        if isinstance(statement, cst.SimpleStatementLine) and raises(statement, ctx):
            return True
    return False
