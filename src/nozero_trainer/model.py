"""The model: an MLP head over cached embeddings (a linear layer when no hidden widths)."""

from __future__ import annotations

from collections.abc import Sequence

import jax
import jax.numpy as jnp

Params = list[dict[str, jax.Array]]

# LeCun-normal: a truncated normal scaled by fan-in, so activations keep their scale.
_init_weight = jax.nn.initializers.lecun_normal()


def init_params(
    key: jax.Array, in_dim: int, hidden_dims: Sequence[int], n_heads: int
) -> Params:
    """Seeded truncated-normal weights and zero biases, one dict per layer."""
    widths = [in_dim, *hidden_dims, n_heads]
    keys = jax.random.split(key, len(widths) - 1)
    return [
        {
            "w": _init_weight(k, (fan_in, fan_out), jnp.float32),
            "b": jnp.zeros((fan_out,), jnp.float32),
        }
        for k, fan_in, fan_out in zip(keys, widths[:-1], widths[1:], strict=True)
    ]


def apply_model(params: Params, x: jax.Array) -> jax.Array:
    """Logits ``[batch, n_heads]``: GELU between layers, none after the last."""
    for layer in params[:-1]:
        x = jax.nn.gelu(x @ layer["w"] + layer["b"])
    last = params[-1]
    return x @ last["w"] + last["b"]
