"""NZ0xx: findings about the file itself rather than its code (NZ001 and NZ002 applied by
the engine, NZ003 by ``nozero.lint.check``)."""

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


class UnusedNoqa(Rule):
    code = "NZ003"
    VALID = [
        Example("""\
            import jax.numpy as jnp
            grads = jnp.nan_to_num(grads)  # noqa: NZ101 padded rows have no gradient
            """),
        Example("""\
            import jax.numpy as jnp
            grads = jnp.nan_to_num(grads)  # noqa: NZ1 a prefix covers its codes
            total = sum(sizes)  # noqa: E501 another tool's code is left alone
            """),
        Example("""\
            import jax.numpy as jnp
            grads = jnp.nan_to_num(grads)  # noqa
            """),
    ]
    INVALID = [
        Example(
            """\
            import jax.numpy as jnp
            grads = jnp.nan_to_num(grads)  # noqa: NZ999 padded rows have no gradient
            """,
            line=2,
        ),
        Example(
            """\
            import jax.numpy as jnp
            grads = jnp.nan_to_num(grads)  # noqa: NZ101 padded rows have no gradient
            total = sum(grads)  # noqa: NZ101 left behind when the line above moved
            """,
            line=3,
        ),
    ]


RULES: list[type[Rule]] = [SyntaxErrorRule, NoqaWithoutReason, UnusedNoqa]
