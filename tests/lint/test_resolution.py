"""Names are resolved through imports and aliases; text in comments and strings never
matches; training signal is followed by origin, through assignments and helpers."""

from __future__ import annotations

import ast
import textwrap

import pytest

from nozero.lint.engine import lint_source
from nozero.lint.imports import collect_aliases, resolve


def codes(source: str, **options) -> list[str]:
    source = textwrap.dedent(source)
    found = [f.code for f in lint_source(source, "t.py", **options)]
    assert found == [f.code for f in lint_source(source, "t.py", shortcuts=False, **options)]
    return found


def test_collect_aliases_and_resolve():
    tree = ast.parse(
        "import jax.numpy as xp\nimport numpy\nimport torch.nn.utils\n"
        "from torch import nan_to_num as scrub\nimport optax as ox\nfrom . import local\n"
        "def f():\n    from jax import lax\n"
    )
    aliases = collect_aliases(tree)
    assert aliases == {
        "xp": "jax.numpy",
        "numpy": "numpy",
        "torch": "torch",
        "scrub": "torch.nan_to_num",
        "ox": "optax",
        "lax": "jax.lax",
    }
    assert resolve("xp.nan_to_num", aliases) == "jax.numpy.nan_to_num"
    assert resolve("scrub", aliases) == "torch.nan_to_num"
    assert resolve("torch.nn.utils.clip_grad_norm_", aliases) == "torch.nn.utils.clip_grad_norm_"
    assert resolve("unknown.thing", aliases) == "unknown.thing"


@pytest.mark.parametrize(
    ("source", "expected"),
    [
        ("import jax.numpy as xp\ngrads = xp.nan_to_num(grads)\n", ["NZ101"]),
        ("from torch import nan_to_num as scrub\ngrad = scrub(grad)\n", ["NZ101"]),
        ("from numpy import nan_to_num\nloss = nan_to_num(loss)\n", ["NZ101"]),
        ("import optax as ox\ntx = ox.apply_if_finite(ox.adam(1e-3), 3)\n", ["NZ401"]),
        ("from optax import zero_nans as zn\ntx = zn()\n", ["NZ402"]),
        (
            "import tensorflow as tf\n"
            "grad = tf.where(tf.math.is_nan(grad), tf.zeros_like(grad), grad)\n",
            ["NZ103"],
        ),
        (
            "from jax.numpy import isnan as bad, where as pick\n"
            "grads = pick(bad(grads), 0., grads)\n",
            ["NZ103"],
        ),
        (
            "from nozero import NonFiniteError as Halt\ntry:\n    fit()\nexcept Halt:\n    pass\n",
            ["NZ301"],
        ),
        ("def f():\n    import jax.numpy as jnp\n    return jnp.nan_to_num(grads)\n", ["NZ101"]),
    ],
)
def test_aliases_resolve(source, expected):
    assert codes(source) == expected


def test_an_unrelated_function_of_the_same_module_is_not_a_trigger():
    assert codes("import jax.numpy as xp\ngrads = xp.clip(grads, -1, 1)\n") == []
    # ``optax.zero_nans`` is optax's; a project's own ``zero_nans`` elsewhere is not.
    assert codes("from mylib import zero_nans\ntx = zero_nans()\n") == []


@pytest.mark.parametrize(
    "source",
    [
        "# grads = jnp.nan_to_num(grads)\nx = 1\n",
        "'''grads = jnp.nan_to_num(grads)'''\n",
        "message = 'optax.apply_if_finite(opt, 3) hides NaN'\n",
        'def f(grads):\n    """Never write ``if torch.isnan(loss): continue``."""\n'
        "    return grads\n",
        "note = 'grads[grads != grads] = 0'  # grads != grads\n",
        "x = f'{grads} nan_to_num(grads)'\n",
    ],
)
def test_comments_and_strings_never_match(source):
    assert codes(source) == []


@pytest.mark.parametrize(
    "source",
    [
        # by origin: jax.value_and_grad's result, whatever the names
        """\
        import jax, jax.numpy as jnp
        def step(p, b):
            (value, aux), d = jax.value_and_grad(f, has_aux=True)(p, b)
            d = jnp.nan_to_num(d)
            return d
        """,
        # a gradient function stored under a name, called later
        """\
        import jax, jax.numpy as jnp
        def step(p, b):
            fn = jax.grad(f)
            out = fn(p, b)
            return jnp.nan_to_num(out)
        """,
        # torch .grad attributes and torch.autograd.grad
        """\
        import torch
        def step(model, out):
            ds = torch.autograd.grad(out, model.parameters())
            return [torch.nan_to_num(d) for d in ds]
        """,
        # tape.gradient, followed through a helper in the same file
        """\
        import tensorflow as tf
        def compute(tape, y, variables):
            return tape.gradient(y, variables)
        def step(tape, y, variables):
            ds = compute(tape, y, variables)
            ds = [tf.where(tf.math.is_nan(d), tf.zeros_like(d), d) for d in ds]
            return ds
        """,
        # a name assigned from signal, then assigned again
        """\
        import numpy as np
        def step(opt, batch):
            first = opt.compute_gradients(batch)
            second = first
            second[np.isnan(second)] = 0.0
        """,
    ],
)
def test_signal_by_origin(source):
    assert len(codes(source)) == 1


def test_helpers_in_the_same_file():
    sanitizer = """\
        import numpy as np
        def scrub(x):
            return np.nan_to_num(x, nan=0.0)
        def step(grads):
            return scrub(grads)
        def load(features):
            return scrub(features)
        """
    assert codes(sanitizer) == ["NZ101"]
    mapped = """\
        import jax, jax.numpy as jnp
        def scrub(x):
            return jnp.where(jnp.isnan(x), 0.0, x)
        def step(grads):
            return jax.tree.map(scrub, grads)
        """
    assert codes(mapped) == ["NZ102"]
    predicate = """\
        import math
        def broken(value):
            return math.isnan(value) or math.isinf(value)
        def train(loader):
            for batch in loader:
                loss = step(batch)
                if broken(loss):
                    continue
                update(loss)
        """
    assert codes(predicate) == ["NZ201"]
    flag = """\
        import jax.numpy as jnp
        def step(params, new_params, grads):
            finite = jnp.all(jnp.isfinite(grads))
            keep = finite
            return jnp.where(keep, new_params, params)
        """
    assert codes(flag) == ["NZ410"]


def test_metric_names_are_not_signal():
    assert codes("import numpy as np\nval_loss = np.nan_to_num(val_loss)\n") == []
    assert codes("import numpy as np\neval_scores = np.nan_to_num(eval_scores)\n") == []
    assert codes("import numpy as np\nmetrics = np.nan_to_num(compute_loss(x))\n") == ["NZ101"]
