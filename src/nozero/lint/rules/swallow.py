"""NZ3xx: catching the failure a non-finite value raised, and training on."""

from __future__ import annotations

import libcst as cst

from nozero.lint import vocab
from nozero.lint.imports import last_part
from nozero.lint.rules.base import Context, Rule, is_literal, raises, walk


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


class SwallowedFloatingPointError(Rule):
    code = "NZ301"
    VALID = [
        "try:\n    loss = step(batch)\nexcept FloatingPointError:\n    save_debug(batch)\n"
        "    raise\n",
        "try:\n    ratio = a / b\nexcept ArithmeticError:\n    ratio = 0.0\n",
        "from nozero import NonFiniteError\ndef main():\n    try:\n        train()\n"
        "    except NonFiniteError as err:\n        print(err)\n        return 3\n",
    ]
    INVALID = [
        "for batch in loader:\n    try:\n        loss = step(batch)\n"
        "    except FloatingPointError:\n        continue\n",
        "from nozero import NonFiniteError as NFE\ntry:\n    trainer.fit()\n"
        "except NFE:\n    pass\n",
        "try:\n    grads = compute(batch)\nexcept (ValueError, ArithmeticError) as err:\n"
        "    log(err)\n",
        "import numpy as np\ndef step(state, batch):\n    try:\n"
        "        with np.errstate(all='raise'):\n            grads = grad_fn(state, batch)\n"
        "    except FloatingPointError:\n        return state\n    return update(state, grads)\n",
    ]

    def visit_ExceptHandler(self, node: cst.ExceptHandler, ctx: Context) -> None:
        caught = _caught_names(node, ctx) & vocab.NONFINITE_EXCEPTIONS
        if not caught or raises(node, ctx) or _ends_run(node, ctx):
            return
        if "NonFiniteError" in caught or _try_body_is_training(ctx):
            ctx.report(node, self, ", ".join(sorted(caught)))


class InspectedRuntimeError(Rule):
    code = "NZ302"
    VALID = [
        "try:\n    run()\nexcept RuntimeError as err:\n    if 'nan' in str(err):\n"
        "        raise SystemExit('non-finite loss') from err\n    raise\n",
        "try:\n    run()\nexcept RuntimeError as err:\n    if 'out of memory' in str(err):\n"
        "        shrink_batch()\n",
    ]
    INVALID = [
        "for batch in data:\n    try:\n        step(batch)\n    except RuntimeError as err:\n"
        "        if 'nan' in str(err).lower():\n            continue\n        raise\n",
        "try:\n    fit()\nexcept Exception as e:\n"
        "    if any(w in str(e) for w in ('NaN', 'non-finite')):\n        print('skipped')\n",
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
                and not raises(branch.body, ctx)
            ):
                ctx.report(node, self)
                return


RULES: list[type[Rule]] = [SwallowedFloatingPointError, InspectedRuntimeError]
