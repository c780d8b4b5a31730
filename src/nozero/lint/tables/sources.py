"""Sources of finiteness facts: the calls and names whose value says "non-finite" or
"finite".

Each source has a polarity: ``True`` when the value being true means "non-finite"
(``isnan``, ``overflow``, ``found_inf``), ``False`` when it means "finite" (``isfinite``,
``is_fin``). The flow pass flips it through ``not`` and ``~``.

To add a shape: add an entry here, with a comment showing the code it stands for, and a
VALID/INVALID case in ``tests/lint/test_corpus.py`` (a ``Case`` with the findings it must
produce, none for a VALID one) that fails without the entry.
"""

from __future__ import annotations

import ast

# ---- predicates (torch, numpy, jax.numpy, tf.math, math) ---------------------------
# name -> True when a true result means non-finite.
PREDICATE_POLARITY = {
    "isnan": True,  # torch.isnan(loss), np.isnan(x), jnp.isnan(g), math.isnan(v)
    "isinf": True,  # torch.isinf(grad).any()
    "isneginf": True,  # torch.isneginf(logits)
    "isposinf": True,  # np.isposinf(scale)
    "is_nan": True,  # tf.math.is_nan(loss)
    "is_inf": True,  # tf.math.is_inf(grads)
    "isfinite": False,  # torch.isfinite(loss).all(), jnp.isfinite(g)
    "is_finite": False,  # tf.math.is_finite(loss)
}
# Functions and tensor methods that test for non-finite values.
PREDICATES = frozenset(PREDICATE_POLARITY)
# The predicates that test for infinity only (-inf masks a logit on purpose).
INFINITY_TESTS = frozenset(
    {
        "isinf",  # torch.isinf(scores)
        "isneginf",  # torch.isneginf(logits)
        "isposinf",  # np.isposinf(x)
        "is_inf",  # tf.math.is_inf(logits)
    }
)

# ---- loss-scaling helpers (deepspeed, apex, Megatron, keras/tf) ---------------------
# Library helpers that report overflow of fp16 gradients (DeepSpeed's CheckOverflow,
# Megatron/apex style loss scalers): true means an overflow, and they belong to loss
# scaling.
OVERFLOW_HELPERS = frozenset(
    {
        "has_overflow",  # overflow = self.overflow_checker.has_overflow(params)
        "has_overflow_serial",  # DeepSpeed: self.has_overflow_serial(params)
        "check_using_norm",  # DeepSpeed: overflow = checker.check_using_norm(norms)
        "_has_inf_or_nan",  # apex/DeepSpeed: if self._has_inf_or_nan(grads):
        "has_inf_or_nan",  # found_inf = has_inf_or_nan(grad)
        "is_invalid_grad_norm",  # if is_invalid_grad_norm(total_norm): skip
        "check_overflow",  # overflow = self.check_overflow()
    }
)
# Library helpers whose true result means "all finite" (Keras LossScaleOptimizer's
# ``check_finite``, TF's ``is_all_finite``).
FINITE_HELPERS = frozenset(
    {
        "check_finite",  # keras: finite = self.check_finite(grads)
        "all_finite",  # ok = all_finite(grads)
        "is_all_finite",  # is_all_finite(grads)
        "_is_all_finite",  # private twin: self._is_all_finite(grads)
    }
)

# ---- flag names ---------------------------------------------------------------------
# Names that hold a flag when bound from an opaque call or an unpacked result
# (``dynamic_scale, is_fin, aux, grads = grad_fn(...)``, ``found_inf = ...``): true is bad.
BAD_FLAG_NAMES = frozenset(
    {
        "overflow",  # overflow = self.optimizer.overflow
        "has_overflow",  # has_overflow = check(grads)
        "found_inf",  # found_inf = scaler._found_inf_per_device(opt)
        "found_nan",  # found_nan = any_nan(grads)
        "has_nan",  # has_nan = bool(torch.isnan(loss))
        "has_inf",  # has_inf = check(grads)
        "nan_found",  # nan_found = detect(params)
        "optimizer_step_was_skipped",  # accelerate: if accelerator.optimizer_step_was_skipped
        "step_was_skipped",  # if optimizer.step_was_skipped:
    }
)
# ... and names whose true value means "finite".
GOOD_FLAG_NAMES = frozenset(
    {
        "is_fin",  # flax: dynamic_scale, is_fin, aux, grads = grad_fn(...)
        "is_finite",  # is_finite = jnp.all(jnp.isfinite(loss))
        "all_finite",  # all_finite = tf.reduce_all(...)
        "grads_finite",  # grads_finite = all_finite(grads)
        "finite",  # finite = torch.isfinite(loss).all()
    }
)

# ---- exceptions ---------------------------------------------------------------------
# Exceptions raised for non-finite arithmetic.
NONFINITE_EXCEPTIONS = frozenset(
    {
        "FloatingPointError",  # np.seterr(all="raise"); except FloatingPointError:
        "ArithmeticError",  # except ArithmeticError: (its base class)
        "NonFiniteError",  # a project's own: raise NonFiniteError(step)
    }
)
# Last words of an exception class's name: a class also named for NaN/Inf is a project's
# own non-finite failure (``class NanException(Exception)``, ``LossIsNaNError``).
EXCEPTION_NAME_ENDINGS = frozenset({"error", "exception"})
# Broad exceptions whose handler is only suspect when it inspects the message.
BROAD_EXCEPTIONS = frozenset(
    {
        "RuntimeError",  # torch anomaly mode: except RuntimeError as e: if "nan" in str(e)
        "Exception",  # except Exception as e: ... "inf" in str(e)
        "BaseException",  # except BaseException as e:
    }
)

# Classes whose instances scale the loss dynamically (torch, flax, Keras, fairseq, apex).
SCALER_TYPES = frozenset(
    {
        "GradScaler",  # torch.amp.GradScaler("cuda"), torch.cuda.amp.GradScaler()
        "ShardedGradScaler",  # FSDP's: ShardedGradScaler()
        "DynamicScale",  # flax: dynamic_scale_lib.DynamicScale()
        "LossScaleOptimizer",  # keras.mixed_precision.LossScaleOptimizer(opt)
        "DynamicLossScaler",  # fairseq, DeepSpeed, LOMO: DynamicLossScaler(init_scale=...)
        "DynamicGradScaler",  # Megatron: DynamicGradScaler(initial_scale=...)
        "LossScaler",  # apex, DeepSpeed: a static or dynamic LossScaler
    }
)

# ---- random draws ----------------------------------------------------------------
# Calls that draw uniform random numbers: a finiteness test joined to a comparison with
# one (``accept = (log_alpha > log(u)) & isfinite(log_p)``) is a sampler's acceptance test
# (Metropolis-Hastings, rejection sampling), which rejects a non-finite proposal by design.
RANDOM_DRAWS = frozenset(
    {
        "random",  # rng.random(n), np.random.random(n)
        "rand",  # np.random.rand(n), torch.rand(n)
        "rand_like",  # torch.rand_like(log_alpha)
        "uniform",  # rng.uniform(size=n), jax.random.uniform(key, shape)
        "uniform_",  # torch.empty(n).uniform_()
    }
)

# ---- comparisons written as calls (tf, torch, jax.numpy, numpy) ---------------------
# ``torch.ne(x, x)`` is the NaN self-test, ``tf.greater(loss, 1e4)`` a limit.
COMPARISON_CALLS: dict[str, type[ast.cmpop]] = {
    "equal": ast.Eq,  # tf.equal(x, x), np.equal(a, b)
    "eq": ast.Eq,  # torch.eq(x, x), x.eq(x)
    "not_equal": ast.NotEq,  # np.not_equal(loss, loss)
    "ne": ast.NotEq,  # torch.ne(g, g), g.ne(g)
    "greater": ast.Gt,  # tf.greater(loss, limit)
    "gt": ast.Gt,  # torch.gt(norm, max_norm)
    "greater_equal": ast.GtE,  # jnp.greater_equal(x, bound)
    "ge": ast.GtE,  # loss.ge(limit)
    "less": ast.Lt,  # tf.less(loss, limit)
    "lt": ast.Lt,  # torch.lt(norm, max_norm)
    "less_equal": ast.LtE,  # jnp.less_equal(x, bound)
    "le": ast.LtE,  # loss.le(limit)
}

# Short names of loss terms that say "loss" in no word of theirs: a test of one is a test
# of the loss (``if isnan(ce):``), and one computed in a ``try`` is the loss's term.
LOSS_TERM_NAMES = frozenset(
    {
        "ce",  # cross-entropy
        "kd",  # knowledge distillation
        "kl",  # Kullback-Leibler divergence
        "bce",  # binary cross-entropy
        "nll",  # negative log-likelihood
        "mse",  # mean squared error
        "mae",  # mean absolute error
        "ctc",  # connectionist temporal classification
    }
)
