"""NZ3xx: catching the failure a non-finite value raised, and training on."""

from __future__ import annotations

import libcst as cst

from nozero.lint import vocab
from nozero.lint.imports import last_part
from nozero.lint.rules.any_error import (
    always_raises,
    catches_any_error,
    returns_a_constant,
    what_any_error_skips,
)
from nozero.lint.rules.base import Context, Example, Rule, is_literal, raises, walk
from nozero.lint.tables.reactions import RETRY_CALLS, TRAINING_RUN_WORDS


def _caught_names(handler: cst.ExceptHandler, ctx: Context) -> set[str]:
    """Last components of the exception classes an ``except`` clause names."""
    if handler.type is None:
        return set()
    types = (
        [e.value for e in handler.type.elements]
        if isinstance(handler.type, cst.Tuple)
        else [handler.type]
    )
    return {last_part(ctx.qualified(t)) for t in types}


def _nonfinite(names: set[str]) -> set[str]:
    """The classes among ``names`` raised for a non-finite value: the table's, and a
    project's own named for one (``NanException``, defined and raised in another module)."""
    return {
        n for n in names if n in vocab.NONFINITE_EXCEPTIONS or vocab.names_nonfinite_exception(n)
    }


def _names_training(name: str, words: frozenset[str]) -> bool:
    return bool(words.intersection(vocab.name_words(name.replace("NaN", "Nan"))))


def _made_for_training(name: str) -> bool:
    """Is ``name`` a class raised for non-finite training signal alone: nozero's, or a
    project's own that also names the value (``LossIsNaNError``, ``NanGradException``)?
    A plain ``NanException`` may as well be raised while loading data."""
    return name == "NonFiniteError" or (
        name not in vocab.NONFINITE_EXCEPTIONS and _names_training(name, vocab.SIGNAL_WORDS)
    )


def _runs_training(node: cst.CSTNode | None, ctx: Context) -> bool:
    """Does ``node`` call (or name) a function that runs training (``trainer.fit()``,
    ``model.train``, ``train_step``)?"""
    if node is None:
        return False
    named = [n for n in walk(node) if isinstance(n, cst.Name | cst.Attribute)]
    return any(
        _names_training(last_part(ctx.qualified(n)) or "", TRAINING_RUN_WORDS) for n in named
    )


def _retried_target(call: cst.Call, ctx: Context) -> cst.CSTNode | None:
    """What a retry helper runs again: the function a decorator holding ``call``
    decorates, or ``retry_call``'s function."""
    for index in range(len(ctx.ancestors) - 1, 0, -1):
        if isinstance(ctx.ancestors[index], cst.Decorator):
            function = ctx.ancestors[index - 1]
            return function.name if isinstance(function, cst.FunctionDef) else None
    first = next((a.value for a in call.args if a.keyword is None), None)
    given = next((a.value for a in call.args if a.keyword and a.keyword.value == "f"), None)
    return first if first is not None else given


def _retried(call: cst.Call, ctx: Context) -> set[str]:
    """The non-finite exception classes a retry helper's arguments name (``retry_call(f,
    exceptions=NanException)``, ``retry_if_exception_type((FloatingPointError, E))``)."""
    if ctx.called(call) not in RETRY_CALLS:
        return set()
    named: set[str] = set()
    for arg in call.args:
        values = (
            [e.value for e in arg.value.elements]
            if isinstance(arg.value, cst.Tuple | cst.List)
            else [arg.value]
        )
        named |= {
            last_part(ctx.qualified(v)) for v in values if isinstance(v, cst.Name | cst.Attribute)
        }
    return _nonfinite(named)


def _try_body_is_training(ctx: Context) -> bool:
    """Does the body of the ``try`` whose handler is being checked touch training signal?"""
    parent = ctx.ancestors[-1] if ctx.ancestors else None
    if not isinstance(parent, cst.Try):
        return False
    expressions = [
        n for n in walk(parent.body) if isinstance(n, cst.Name | cst.Attribute | cst.Call)
    ]
    return any(ctx.is_signal(e) for e in expressions)


def _ends_run(handler: cst.ExceptHandler, ctx: Context) -> bool:
    """A handler outside any loop that ends by returning a status or report (a command's
    ``return EXIT_HALT``) stops the run rather than skipping a step; returning training
    signal or an argument unchanged (the old state) is a skip."""
    if ctx.in_loop():
        return False
    last = handler.body.body[-1] if handler.body.body else None
    if not isinstance(last, cst.SimpleStatementLine):
        return False
    final = last.body[-1]
    return (
        isinstance(final, cst.Return)
        and final.value is not None
        and not is_literal(final.value, "None")
        and not ctx.is_signal(final.value)
        and not (
            isinstance(final.value, cst.Name)
            and final.value.value in ctx.facts.parameters(ctx.scope_key)
        )
    )


# What an ``except`` naming ``names`` catches, by the class a ``raise`` or check raises.
_CATCHES_ALL = frozenset({"Exception", "BaseException"})


def _catches(names: set[str], raised: str) -> bool:
    return raised in names or bool(names & _CATCHES_ALL)


def _tests_finiteness(node: cst.CSTNode, ctx: Context) -> bool:
    """Does ``node`` test training signal for NaN/Inf (``isnan(loss)``, ``loss.isnan()``)?"""
    for call in walk(node):
        if isinstance(call, cst.Call) and ctx.called(call) in vocab.PREDICATES:
            subjects = [a.value for a in call.args[:1]]
            if isinstance(call.func, cst.Attribute):
                subjects.append(call.func.value)
            if any(ctx.is_signal(subject) for subject in subjects):
                return True
    return False


def _raised_class(statement: cst.Raise, ctx: Context) -> str:
    exc = statement.exc
    if isinstance(exc, cst.Call):
        exc = exc.func
    return last_part(ctx.qualified(exc)) if exc is not None else ""


def _own_failure(names: set[str], ctx: Context) -> str:
    """What the ``try`` around the handler raises itself on a non-finite value and the
    handler catches: a ``raise`` under a finiteness test, a finiteness ``assert``, or
    ``detect_anomaly``'s error around ``backward()`` ('' when none)."""
    parent = ctx.ancestors[-1] if ctx.ancestors else None
    if not isinstance(parent, cst.Try):
        return ""
    for node in walk(parent.body):
        if isinstance(node, cst.If) and _tests_finiteness(node.test, ctx):
            for statement in walk(node.body):
                if isinstance(statement, cst.Raise) and _catches(
                    names, _raised_class(statement, ctx)
                ):
                    return "a raise on a non-finite value, caught by its own try"
        if isinstance(node, cst.Assert) and _tests_finiteness(node.test, ctx):
            if _catches(names, "AssertionError"):
                return "a finiteness assertion, caught"
        if isinstance(node, cst.Call):
            raised = _raised_by_check(node, ctx)
            if raised and _catches(names, raised):
                return f"{ctx.called(node)}'s error on a non-finite value, caught"
        if isinstance(node, cst.WithItem) and isinstance(node.item, cst.Call):
            if (
                ctx.called(node.item) == vocab.ANOMALY_DETECTION
                and _catches(names, "RuntimeError")
                and _try_body_is_training(ctx)
            ):
                return "detect_anomaly's error, caught"
    return ""


# Checks that raise on a non-finite value, with the class they raise: ``nozero``'s
# ``check_finite`` (``NonFiniteError``, a ``RuntimeError``), ``tf.debugging.check_numerics``,
# chex's ``assert_tree_all_finite`` and torch's ``clip_grad_norm_(...,
# error_if_nonfinite=True)``.
_CHECK_RAISES = {
    "check_finite": "RuntimeError",
    "check_numerics": "InvalidArgumentError",
    "assert_tree_all_finite": "AssertionError",
}
_CLIPS_THAT_RAISE = frozenset({"clip_grad_norm_", "clip_grad_norm", "clip_grad_norm_fp32"})


def _raised_by_check(call: cst.Call, ctx: Context) -> str:
    """The class a finiteness check raises ('' when ``call`` is none)."""
    called = ctx.called(call)
    if called in _CHECK_RAISES:
        return _CHECK_RAISES[called]
    if called in _CLIPS_THAT_RAISE and any(
        a.keyword is not None
        and a.keyword.value == "error_if_nonfinite"
        and is_literal(a.value, "True")
        for a in call.args
    ):
        return "RuntimeError"
    return ""


# A distillation term computed in a ``try``, set to 0 by the handler: in training the
# step goes on without it; in a ``no_grad`` evaluation nothing trains.
_ZEROED_TERM = """\
import torch
{decorator}def {name}(student, teacher, loader, optimizer):
    for batch in loader:
        ce = student.loss(batch)
        try:
            kd = distill(student(batch.x), teacher(batch.x))
        except Exception:
            kd = torch.tensor(0.0)
        loss = ce + kd
        if not torch.isfinite(loss):
            raise FloatingPointError("non-finite loss")
        {end}
"""
# A handler that goes on from a failed round of training: in the run's own loop over
# epochs it starts the next round of the same run; in a sweep, a new run.
_ROUND_OR_RUN = """\
import logging
for {loop}:
    try:
        train_epoch(model, loader, optimizer)
    except RuntimeError as err:
        if "out of memory" in str(err):
            raise
        logging.error("nan or other failure: %s", err)
        continue
"""


class SwallowedFloatingPointError(Rule):
    code = "NZ301"
    VALID = [
        Example(
            _ZEROED_TERM.format(
                decorator="@torch.no_grad()\n", name="evaluate", end="totals.append(loss.item())"
            )
        ),
        # a sweep: a failed run ends, and the next configuration starts anew
        Example(_ROUND_OR_RUN.format(loop="config in configs")),
        Example(  # None for an unreadable file, skipped by a loop that trains nothing
            """\
            import numpy as np
            def load(path):
                try:
                    return np.load(path)
                except Exception:
                    return None
            def scan(paths):
                for path in paths:
                    array = load(path)
                    if array is None:
                        continue
                    print(path, np.isnan(array).sum())
            """
        ),
        Example(  # an evaluation loop: no step follows the loss
            """\
            import math
            for batch in val_loader:
                try:
                    val_loss = criterion(model(batch.x), batch.y).item()
                except Exception as err:
                    print(err)
                    continue
                if math.isnan(val_loss):
                    raise FloatingPointError("nan validation loss")
                total += val_loss
            """
        ),
        Example("""\
            import torch
            for batch in loader:
                try:
                    loss = model(batch)
                    if torch.isnan(loss):
                        raise FloatingPointError("nan loss")
                    loss.backward()
                    optimizer.step()
                except RuntimeError as err:
                    if "out of memory" in str(err):
                        torch.cuda.empty_cache()
                        continue
                    raise
            """),
        Example("""\
            for batch in loader:
                try:
                    loss = model(batch)
                    loss.backward()
                except RuntimeError as err:
                    known = any(m in str(err) for m in KNOWN_ERRORS)
                    if not known:
                        raise
                    optimizer.zero_grad()
                    continue
            """),
        Example("""\
            import torch
            for path in paths:
                try:
                    batch = torch.load(path)
                except Exception as err:
                    print("unreadable", path, err)
                    continue
                if torch.isnan(batch).any():
                    raise ValueError(path)
            """),
        Example("""\
            try:
                loss = step(batch)
            except FloatingPointError:
                save_debug(batch)
                raise
            """),
        Example("""\
            try:
                ratio = a / b
            except ArithmeticError:
                ratio = 0.0
            """),
        Example("""\
            from nozero import NonFiniteError
            def main():
                try:
                    train()
                except NonFiniteError as err:
                    print(err)
                    return 3
            """),
        Example("""\
            from retry.api import retry_call
            retry_call(upload_checkpoint, tries=3, exceptions=ConnectionError)
            """),
        Example("""\
            from .records import NanException, parse
            def load(rows):
                kept = []
                for row in rows:
                    try:
                        kept.append(parse(row))
                    except NanException:
                        continue
                return kept
            """),
        Example("""\
            from .model import NanException
            def main(trainer):
                try:
                    trainer.train()
                except NanException:
                    trainer.save_debug_state()
                    raise
            """),
    ]
    INVALID = [
        Example(
            _ZEROED_TERM.format(decorator="", name="train", end="loss.backward()"),
            line=7,
        ),
        # the same run goes on with its next epoch
        Example(_ROUND_OR_RUN.format(loop="epoch in range(epochs)"), line=5),
        Example(  # None for any error, and the training loop skips the batch on it
            """\
            import torch
            class Trainer:
                def forward_pass(self, batch):
                    try:
                        loss = self.criterion(self.model(batch.x), batch.y)
                        if torch.isnan(loss):
                            return None
                        return loss
                    except Exception as err:
                        print(err)
                        return None
                def train(self, loader):
                    for batch in loader:
                        loss = self.forward_pass(batch)
                        if loss is None:
                            continue
                        loss.backward()
                        self.optimizer.step()
            """,
            line=9,
        ),
        Example(  # the loss the loop steps with: its failure skips the batch
            """\
            import torch
            for batch in loader:
                try:
                    loss = criterion(model(batch.x), batch.y)
                except Exception as err:
                    print(err)
                    continue
                if not torch.isfinite(loss):
                    raise FloatingPointError("non-finite loss")
                loss.backward()
                optimizer.step()
            """,
            line=5,
        ),
        Example(
            """\
            import torch
            for batch in loader:
                try:
                    loss = model(batch)
                    if torch.isnan(loss):
                        continue
                    loss.backward()
                    optimizer.step()
                except RuntimeError as err:
                    if "out of memory" in str(err):
                        torch.cuda.empty_cache()
                        continue
                    else:
                        print(err)
                        continue
            """,
            line=9,
        ),
        Example(
            """\
            for batch in loader:
                try:
                    loss = step(batch)
                except FloatingPointError:
                    continue
            """,
            line=4,
        ),
        Example(
            """\
            from nozero import NonFiniteError as NFE
            try:
                trainer.fit()
            except NFE:
                pass
            """,
            line=4,
        ),
        Example(
            """\
            try:
                grads = compute(batch)
            except (ValueError, ArithmeticError) as err:
                log(err)
            """,
            line=3,
        ),
        Example(
            """\
            import numpy as np
            def step(state, batch):
                try:
                    with np.errstate(all='raise'):
                        grads = grad_fn(state, batch)
                except FloatingPointError:
                    return state
                return update(state, grads)
            """,
            line=6,
        ),
        Example(
            """\
            from retry.api import retry_call
            from .model import NanException
            while trainer.steps < num_steps:
                retry_call(trainer.train, tries=3, exceptions=NanException)
            """,
            line=4,
        ),
        Example(
            """\
            import tenacity
            @tenacity.retry(retry=tenacity.retry_if_exception_type(FloatingPointError))
            def train_step(model, optimizer, batch):
                loss = model(batch)
                loss.backward()
                optimizer.step()
            """,
            line=2,
        ),
        Example(
            """\
            from .errors import LossIsNaNError
            for batch in loader:
                try:
                    loss = train_step(batch)
                except LossIsNaNError:
                    continue
            """,
            line=5,
        ),
    ]

    def visit_ExceptHandler(self, node: cst.ExceptHandler, ctx: Context) -> None:
        names = _caught_names(node, ctx)
        caught = _nonfinite(names)
        if not caught:
            own = _own_failure(names, ctx)
            # in a loop, the handler goes on to the next batch; in a step function, a
            # made-up result goes back to the loop as if the step had run
            goes_on = ctx.in_loop() or (_try_body_is_training(ctx) and returns_a_constant(node))
            if own and goes_on and not always_raises(node.body, ctx):
                ctx.report(node, self, own)
            elif catches_any_error(node, names):
                detail = what_any_error_skips(node, ctx)
                if detail:
                    ctx.report(node, self, detail)
            return
        if raises(node, ctx) or _ends_run(node, ctx):
            return
        # ``FloatingPointError`` comes from any arithmetic and a plain ``NanException``
        # from any check: around training signal, or a call that runs training, they are
        # training's failure; a class named for the value (``LossIsNaNError``) is anywhere
        own_class = bool(caught - vocab.NONFINITE_EXCEPTIONS)
        parent = ctx.ancestors[-1] if ctx.ancestors else None
        if (
            any(_made_for_training(n) for n in caught)
            or _try_body_is_training(ctx)
            or (own_class and isinstance(parent, cst.Try) and _runs_training(parent.body, ctx))
        ):
            ctx.report(node, self, ", ".join(sorted(caught)))

    def visit_Call(self, node: cst.Call, ctx: Context) -> None:
        retried = _retried(node, ctx)
        if retried and (
            any(_made_for_training(n) for n in retried)
            or _runs_training(_retried_target(node, ctx), ctx)
        ):
            detail = f"{ctx.called(node)}() runs the call again on {', '.join(sorted(retried))}"
            ctx.report(node, self, detail)


class InspectedRuntimeError(Rule):
    code = "NZ302"
    VALID = [
        Example("""\
            try:
                run()
            except RuntimeError as err:
                if 'nan' in str(err):
                    raise SystemExit('non-finite loss') from err
                raise
            """),
        Example("""\
            try:
                run()
            except RuntimeError as err:
                if 'out of memory' in str(err):
                    shrink_batch()
            """),
    ]
    INVALID = [
        Example(
            """\
            for batch in loader:
                try:
                    loss = compute_loss(batch)
                except Exception as err:
                    if "nan" in str(err).lower():
                        n_nans += 1
                        if n_nans > MAX_NANS:
                            raise
                        continue
                    raise
            """,
            line=4,
        ),
        Example(
            """\
            for batch in data:
                try:
                    step(batch)
                except RuntimeError as err:
                    if 'nan' in str(err).lower():
                        continue
                    raise
            """,
            line=4,
        ),
        Example(
            """\
            try:
                fit()
            except Exception as e:
                if any(w in str(e) for w in ('NaN', 'non-finite')):
                    print('skipped')
            """,
            line=3,
        ),
    ]

    def visit_ExceptHandler(self, node: cst.ExceptHandler, ctx: Context) -> None:
        if not _caught_names(node, ctx) & vocab.BROAD_EXCEPTIONS:
            return
        for branch in walk(node.body):
            if (
                isinstance(branch, cst.If)
                and any(
                    isinstance(s, cst.SimpleString) and vocab.NONFINITE_TEXT.search(s.value)
                    for s in walk(branch.test)
                )
                and not always_raises(branch.body, ctx)  # a raise after 50 NaN batches: 49 went on
            ):
                ctx.report(node, self)
                return


RULES: list[type[Rule]] = [SwallowedFloatingPointError, InspectedRuntimeError]
