"""NZ4xx: library switches and device-side guards that skip or zero a non-finite step."""

from __future__ import annotations

import re

import libcst as cst

from nozero.lint import vocab
from nozero.lint.rules.base import Context, Example, Rule, is_literal

_FALSE = ("False", "0")
_TRUE = ("True", "1")


def _enables(node: cst.Name | cst.Attribute, ctx: Context) -> bool:
    """Is the switch called or handed to something that will call it? Naming it (an
    import, a re-export ``zero_nans = transforms.zero_nans``, a definition) enables
    nothing."""
    parent = ctx.ancestors[-1] if ctx.ancestors else None
    if isinstance(parent, cst.Call):
        return parent.func is node
    return isinstance(parent, cst.Arg) and parent.value is node


# An ``if`` that switches fp16 on (``bfloat16`` needs no loss scaling), and a dynamic loss
# scale beside it: then skipping an overflowed update is the scaler's business (NZ406's).
_FP16_TEST = re.compile(r"(?<![bB])float16|fp16|\bhalf\b|\bamp\b|use_amp|mixed_precision")
_DYNAMIC_SCALE = re.compile(r"DynamicScale|DynamicLossScale|dynamic_scale|loss_scale|LossScale")


def _beside_fp16_loss_scaling(ctx: Context) -> bool:
    """Is the node in the fp16 branch of an ``if``, with a dynamic loss scale in that branch
    or in the enclosing function?"""
    branch = next((a for a in reversed(ctx.ancestors) if isinstance(a, cst.If)), None)
    if branch is None or not _FP16_TEST.search(ctx.code(branch.test)):
        return False
    around = next((a for a in reversed(ctx.ancestors) if isinstance(a, cst.FunctionDef)), None)
    return bool(_DYNAMIC_SCALE.search(ctx.code(around or branch.body)))


class _OptaxSwitch(Rule):
    """One optax transform that skips or zeroes non-finite updates."""

    switch: str
    spares_fp16_scaling = False  # used only beside fp16 dynamic loss scaling: not reported

    def visit_Name(self, node: cst.Name, ctx: Context) -> None:
        self._switch(node, node.value, ctx)

    def visit_Attribute(self, node: cst.Attribute, ctx: Context) -> None:
        self._switch(node, node.attr.value, ctx)

    def _switch(self, node: cst.Name | cst.Attribute, last: str, ctx: Context) -> None:
        if last != self.switch and last not in ctx.facts.aliases:
            return  # cheap test first: this runs on every name in the code
        qualified = ctx.qualified(node) or ""
        if qualified.startswith("optax.") and qualified.endswith("." + self.switch):
            if self.spares_fp16_scaling and _beside_fp16_loss_scaling(ctx):
                return
            if _enables(node, ctx):
                ctx.report(node, self)


class OptaxApplyIfFinite(_OptaxSwitch):
    code = "NZ401"
    switch = "apply_if_finite"
    spares_fp16_scaling = True
    VALID = [
        Example("""\
            import optax
            from flax.training import dynamic_scale as dynamic_scale_lib

            def make(config, tx):
                dynamic_scale = None
                if config.dtype == "float16":
                    dynamic_scale = dynamic_scale_lib.DynamicScale()
                    tx = optax.apply_if_finite(tx, max_consecutive_errors=5)
                return tx, dynamic_scale
            """),
        Example("""\
            import optax
            tx = optax.chain(optax.clip_by_global_norm(1.0), optax.adamw(1e-3))
            """),
        Example("""\
            # optax.apply_if_finite would hide NaNs
            note = 'apply_if_finite'
            """),
    ]
    INVALID = [
        Example(
            """\
            import optax
            tx = optax.apply_if_finite(optax.adam(1e-3), 3)
            """,
            line=2,
        ),
        Example(
            """\
            import optax as ox
            tx = ox.apply_if_finite(ox.sgd(0.1), max_consecutive_errors=2)
            """,
            line=2,
        ),
        Example(
            """\
            from optax import apply_if_finite as guard
            tx = guard(base, 5)
            """,
            line=2,
        ),
        Example(  # bfloat16 has no loss scaling to hand the skip to
            """\
            import optax

            def make(config, tx):
                if config.dtype == "bfloat16":
                    loss_scale = None
                    tx = optax.apply_if_finite(tx, 5)
                return tx
            """,
            line=6,
        ),
        Example(  # fp16 with no dynamic loss scale: the skip is the only guard
            """\
            import optax

            def make(config, tx):
                if config.fp16:
                    tx = optax.apply_if_finite(tx, 5)
                return tx
            """,
            line=5,
        ),
    ]


class OptaxZeroNans(_OptaxSwitch):
    code = "NZ402"
    switch = "zero_nans"
    VALID = [
        Example("""\
            import optax
            tx = optax.chain(optax.clip(1.0), optax.adam(1e-3))
            """),
    ]
    INVALID = [
        Example(
            """\
            import optax
            tx = optax.chain(optax.zero_nans(), optax.adam(1e-3))
            """,
            line=2,
        ),
        Example(
            """\
            from optax import zero_nans
            parts = [zero_nans(), tx]
            """,
            line=2,
        ),
    ]


class OptaxSkipNotFinite(_OptaxSwitch):
    code = "NZ403"
    switch = "skip_not_finite"
    VALID = [
        Example("""\
            import optax
            tx = optax.MultiSteps(opt, every_k_schedule=4)
            """),
    ]
    INVALID = [
        Example(
            """\
            import optax
            tx = optax.MultiSteps(opt, every_k_schedule=4,
                                  should_skip_update_fn=optax.skip_not_finite)
            """,
            line=3,
        ),
    ]


class _SwitchOff(Rule):
    """A keyword argument, config key or attribute set to a value that hides non-finite
    values: ``clip_grad_norm_(..., error_if_nonfinite=False)``, ``{"key": value}``."""

    keyword: str
    bad_value: tuple[str, ...]  # literals (``False``, ``0``) that turn the check off
    # also a setting named ``<prefix>_<keyword>`` (``ctc_zero_infinity``), and a value
    # read from such a setting of a config object
    follows_settings: bool = False

    def _named(self, name: str) -> bool:
        return name == self.keyword or (self.follows_settings and name.endswith("_" + self.keyword))

    def visit_AnnAssign(self, node: cst.AnnAssign, ctx: Context) -> None:
        """``flag: bool = True`` and ``flag: bool = field(default=True)``"""
        value = node.value
        if isinstance(value, cst.Call) and ctx.called(value) == "field":
            value = next(
                (a.value for a in value.args if a.keyword and a.keyword.value == "default"), None
            )
        target = node.target
        name = (
            target.value
            if isinstance(target, cst.Name)
            else (target.attr.value if isinstance(target, cst.Attribute) else "")
        )
        if self._named(name) and value is not None:
            self._report_if_bad(node, value, ctx)

    def visit_Param(self, node: cst.Param, ctx: Context) -> None:
        """``def __init__(self, ctc_zero_infinity=True)``"""
        if node.default is not None and self.follows_settings and self._named(node.name.value):
            self._report_if_bad(node, node.default, ctx)

    def visit_Arg(self, node: cst.Arg, ctx: Context) -> None:
        if node.keyword is not None and node.keyword.value == self.keyword:
            self._report_if_bad(node, node.value, ctx)

    def visit_DictElement(self, node: cst.DictElement, ctx: Context) -> None:
        if isinstance(node.key, cst.SimpleString) and node.key.evaluated_value == self.keyword:
            self._report_if_bad(node, node.value, ctx)

    def visit_Assign(self, node: cst.Assign, ctx: Context) -> None:
        if any(
            isinstance(t.target, cst.Attribute) and t.target.attr.value == self.keyword
            for t in node.targets
        ):
            self._report_if_bad(node, node.value, ctx)

    def _report_if_bad(self, node: cst.CSTNode, value: cst.BaseExpression, ctx: Context) -> None:
        if isinstance(value, cst.Call) and ctx.called(value) == "get" and len(value.args) >= 2:
            value = value.args[1].value  # ``config.get("zero_infinity", True)``: its default
        read = value.attr.value if isinstance(value, cst.Attribute) else ""
        if is_literal(value, *self.bad_value):
            ctx.report(node, self)
        elif self.follows_settings and self._named(read) and not ctx.facts.declares_setting(read):
            ctx.report(node, self)  # a setting whose default this file does not show


def _after_a_finiteness_check(node: cst.CSTNode, ctx: Context) -> bool:
    """Does the function react to non-finite gradients above ``node`` (``if not
    isfinite(p.grad).all(): skip`` before clipping)? Clipping then never sees one. (A
    check of the loss alone leaves the gradients to the clipping call.)"""
    from nozero.lint.facts import reactions

    fn = ctx.facts.function_at(ctx.scope_key)
    if fn is None:
        return False
    line = ctx.positions[node].start.line + ctx.line_offset
    return any(
        fn.lineno <= r.route.line < line
        and r.line < line
        and not r.scaling
        and any(map(vocab.names_gradients, re.findall(r"\w+", r.route.origin)))
        for r in reactions(ctx.facts)
    )


class ClipGradNormNonFiniteOff(_SwitchOff):
    code = "NZ404"
    keyword = vocab.NONFINITE_KEYWORD
    bad_value = _FALSE

    def _report_if_bad(self, node: cst.CSTNode, value: cst.BaseExpression, ctx: Context) -> None:
        if _in_loss_scaling_config(ctx) or ctx.facts.mentions_scaling(ctx.scope_key):
            return  # a scaler unscales first and skips the overflowed step itself (NZ406)
        if _after_a_finiteness_check(node, ctx):
            return  # the code tested the gradients itself: its reaction is reported there
        super()._report_if_bad(node, value, ctx)

    VALID = [
        Example(  # the gradients were tested first: the skip is reported, not the clip
            """\
            import torch
            def train(model, loader, optimizer):
                for batch in loader:
                    model(batch).backward()
                    if any(not torch.isfinite(p.grad).all() for p in model.parameters()):
                        optimizer.zero_grad()
                        continue
                    params = model.parameters()
                    torch.nn.utils.clip_grad_norm_(params, 1.0, error_if_nonfinite=False)
                    optimizer.step()
            """
        ),
        Example("""\
            import torch
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0, error_if_nonfinite=True)
            """),
        Example("""\
            config = {'error_if_nonfinite': True}
            """),
        Example("""\
            import torch
            def clip(trainer, max_norm):
                if trainer.scaler is not None:
                    trainer.scaler.unscale_(trainer.optimizer)
                params = trainer.model.parameters()
                torch.nn.utils.clip_grad_norm_(params, max_norm, error_if_nonfinite=False)
            """),
        Example("""\
            optim_wrapper = dict(
                type="AmpOptimWrapper",
                loss_scale="dynamic",
                clip_grad=dict(max_norm=5.0, error_if_nonfinite=False),
            )
            """),
    ]
    INVALID = [
        Example(
            """\
            import torch
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0, error_if_nonfinite=False)
            """,
            line=2,
        ),
        Example(
            """\
            clip = {'max_norm': 1.0, 'error_if_nonfinite': False}
            """,
            line=1,
        ),
        Example(
            """\
            cfg.error_if_nonfinite = False
            """,
            line=1,
        ),
    ]


def _in_loss_scaling_config(ctx: Context) -> bool:
    """Is the setting part of an fp16 loss-scaling optimizer's config
    (``dict(type="AmpOptimWrapper", loss_scale="dynamic", clip_grad=dict(...))``)? The
    scaler expects an infinite norm on overflow and skips that step itself: dynamic loss
    scaling is the opt-in rule's (NZ406)."""
    for node in ctx.ancestors:
        if not isinstance(node, cst.Call):
            continue
        for arg in node.args:
            name = arg.keyword.value if arg.keyword else ""
            if name == "loss_scale" or (name == "type" and "Amp" in ctx.code(arg.value)):
                return True
    return False


class LoggingNanInfFilter(_SwitchOff):
    code = "NZ405"
    keyword = vocab.NAN_FILTER_KEYWORD
    bad_value = _TRUE
    VALID = [
        Example("""\
            args = TrainingArguments(output_dir='out', logging_nan_inf_filter=False)
            """),
    ]
    INVALID = [
        Example(
            """\
            args = TrainingArguments(output_dir='out', logging_nan_inf_filter=True)
            """,
            line=1,
        ),
        Example(
            """\
            cfg = {'logging_nan_inf_filter': True}
            """,
            line=1,
        ),
    ]


class CtcZeroInfinity(_SwitchOff):
    code = "NZ407"
    keyword = "zero_infinity"
    bad_value = _TRUE
    follows_settings = True
    VALID = [
        Example("""\
            import torch
            criterion = torch.nn.CTCLoss(blank=0, zero_infinity=False)
            """),
    ]
    INVALID = [
        Example(
            """\
            import torch
            criterion = torch.nn.CTCLoss(blank=0, zero_infinity=True)
            """,
            line=2,
        ),
        Example(
            """\
            from dataclasses import dataclass, field
            @dataclass
            class CtcConfig:
                zero_infinity: bool = field(default=True)
            """,
            line=4,
        ),
        Example(
            """\
            class SpeechConfig:
                def __init__(self, vocab_size=32, ctc_zero_infinity=True):
                    self.ctc_zero_infinity = ctc_zero_infinity
            """,
            line=2,
        ),
        Example(
            """\
            import torch
            def ctc(self, log_probs, labels, input_lengths, label_lengths):
                return torch.nn.functional.ctc_loss(
                    log_probs, labels, input_lengths, label_lengths,
                    zero_infinity=self.config.ctc_zero_infinity,
                )
            """,
            line=5,
        ),
    ]


class NumpyroStableUpdate(Rule):
    """numpyro's ``SVI.stable_update``, called or chosen with ``svi.run(...,
    stable_update=True)``: it keeps the previous state when the loss is not finite."""

    code = "NZ409"
    VALID = [
        Example("""\
            from numpyro.infer import SVI, Trace_ELBO
            svi = SVI(model, guide, optimizer, loss=Trace_ELBO())
            state, loss = svi.update(state, data)
            result = svi.run(rng_key, 2000, data, stable_update=False)
            """),
        Example("""\
            # a stable_update of another library's object, in a file without numpyro
            state = solver.stable_update(state)
            """),
    ]
    INVALID = [
        Example(
            """\
            from numpyro.infer import SVI, Trace_ELBO
            svi = SVI(model, guide, optimizer, loss=Trace_ELBO())
            state, loss = svi.stable_update(state, data)
            """,
            line=3,
        ),
        Example(
            """\
            import numpyro
            result = svi.run(rng_key, 2000, data, stable_update=True)
            """,
            line=2,
        ),
    ]

    def visit_Call(self, node: cst.Call, ctx: Context) -> None:
        if not any(q.split(".")[0] == "numpyro" for q in ctx.facts.aliases.values()):
            return
        if isinstance(node.func, cst.Attribute) and node.func.attr.value == vocab.STABLE_UPDATE:
            ctx.report(node, self)
            return
        for arg in node.args:
            if arg.keyword is not None and arg.keyword.value == vocab.STABLE_UPDATE:
                if is_literal(arg.value, *_TRUE):
                    ctx.report(arg, self)


RULES: list[type[Rule]] = [
    OptaxApplyIfFinite,
    OptaxZeroNans,
    OptaxSkipNotFinite,
    NumpyroStableUpdate,
    ClipGradNormNonFiniteOff,
    LoggingNanInfFilter,
    CtcZeroInfinity,
]
