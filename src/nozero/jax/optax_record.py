"""An optax transformation that records the first non-finite update and changes nothing.

``optax.apply_if_finite`` skips a non-finite update and carries on: the opposite of
nozero's rule. :func:`record_nonfinite` passes every update through untouched and only
remembers, in its state, the first update that held a NaN or an infinity, so a guard can
stop the run at that exact step when it next reads the state. optax never sees the
loss, so this records what it can see: the gradients (first in a chain) or the updates
(after the transformations whose output should be watched, e.g. the learning rate).

Under ``optax.MultiSteps`` place it after the wrapper, where it sees the update each call
applies and counts calls; inside, it sees and counts only the emitted optimizer steps.
A guard locates the flagged step by replay either way, never from ``count``.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import optax

from nozero.jax.record import all_finite

NONE_YET = -1  # ``first_step`` while every update seen was finite


class NonFiniteRecordState(NamedTuple):
    """``count`` updates seen; ``first_step``: the first non-finite one (or ``NONE_YET``).

    Both count this transformation's own updates (optimizer steps inside MultiSteps).
    """

    count: jax.Array  # int32 []
    first_step: jax.Array  # int32 []


def record_nonfinite() -> optax.GradientTransformation:
    """A transformation whose updates are its inputs, bit for bit; see the module docstring."""

    def init(params: Any) -> NonFiniteRecordState:
        del params
        return NonFiniteRecordState(jnp.zeros([], jnp.int32), jnp.full([], NONE_YET, jnp.int32))

    def update(updates: Any, state: NonFiniteRecordState, params: Any = None):
        del params
        newly_bad = (state.first_step == NONE_YET) & ~all_finite(updates)
        first = jax.lax.select(newly_bad, state.count, state.first_step)
        return updates, NonFiniteRecordState(state.count + 1, first)

    return optax.GradientTransformation(init, update)


def find_records(tree: Any) -> list[NonFiniteRecordState]:
    """Every :class:`NonFiniteRecordState` inside ``tree`` (an optimizer or training state)."""

    def is_record(node: Any) -> bool:
        return isinstance(node, NonFiniteRecordState)

    return [node for node in jax.tree.leaves(tree, is_leaf=is_record) if is_record(node)]
