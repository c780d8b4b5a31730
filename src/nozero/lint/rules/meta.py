"""NZ0xx: findings about the file itself rather than its code (applied by the engine)."""

from __future__ import annotations

from nozero.lint.rules.base import Example, Rule


class SyntaxErrorRule(Rule):
    code = "NZ001"
    VALID = [
        Example("""\
            x = 1
            """),
        Example("""\
            def step(grads:
                return grads
            """),
        Example("""\
            import jax.numpy as jnp

            type Grads = dict[str, jnp.ndarray]


            def all_finite[T](tree: T) -> bool:
                return all(bool(jnp.isfinite(g).all()) for g in tree.values())
            """),
    ]
    INVALID = [
        Example(
            """\
            import jax.numpy as jnp


            def step(grads:
                return jnp.nan_to_num(grads)
            """,
            line=4,
        ),
    ]


class NoqaWithoutReason(Rule):
    code = "NZ002"
    VALID = [
        Example("""\
            import jax.numpy as jnp
            grads = jnp.nan_to_num(grads)  # noqa: NZ101 padded rows have no gradient
            """),
    ]
    INVALID = [
        Example(
            """\
            import jax.numpy as jnp
            grads = jnp.nan_to_num(grads)  # noqa: NZ101
            """,
            line=2,
        ),
    ]


RULES: list[type[Rule]] = [SyntaxErrorRule, NoqaWithoutReason]
