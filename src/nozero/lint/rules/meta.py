"""NZ0xx: findings about the file itself rather than its code (applied by the engine)."""

from __future__ import annotations

from nozero.lint.rules.base import Rule


class SyntaxErrorRule(Rule):
    code = "NZ001"
    VALID = [
        "x = 1\n",
        "def step(grads:\n    return grads\n",  # no trigger text: not nozero's to parse
        "import jax.numpy as jnp\n\ntype Grads = dict[str, jnp.ndarray]\n\n\n"
        "def all_finite[T](tree: T) -> bool:\n"
        "    return all(bool(jnp.isfinite(g).all()) for g in tree.values())\n",
    ]
    INVALID = ["import jax.numpy as jnp\n\n\ndef step(grads:\n    return jnp.nan_to_num(grads)\n"]


class NoqaWithoutReason(Rule):
    code = "NZ002"
    VALID = [
        "import jax.numpy as jnp\n"
        "grads = jnp.nan_to_num(grads)  # noqa: NZ101 padded rows have no gradient\n",
    ]
    INVALID = ["import jax.numpy as jnp\ngrads = jnp.nan_to_num(grads)  # noqa: NZ101\n"]


RULES: list[type[Rule]] = [SyntaxErrorRule, NoqaWithoutReason]
