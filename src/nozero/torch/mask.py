"""Keep a step's update off the parameters and optimizer state while a mask is set.

The mask is a float32 0-dim device tensor, exactly ``1.0`` to skip. Fused
Adam/AdamW/SGD read it as ``optimizer.found_inf`` (the protocol ``GradScaler`` uses) and
skip the whole update on the device: parameters, moments and step counts, at no cost.
Any other optimizer steps normally and is then rolled back with ``torch.where`` (never a
multiplication: ``0 * nan`` is ``nan``) from a copy taken just before the step: one copy
and one select over the parameters and their state per step.

Step counts that a non-capturable optimizer keeps as CPU scalars beside CUDA parameters
cannot be selected on the device without a sync; they are copied on the host before
each step instead and put back at the halt (:meth:`UpdateMask.restore_host`). State that
a masked step created (a parameter's first step) is dropped at the halt too, so the
optimizer's state dict is the last good step's, entry for entry.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch.utils.hooks import RemovableHandle

_MISSING = object()


def _key(slot: tuple[torch.Tensor, str | None]) -> tuple[int, str | None]:
    return id(slot[0]), slot[1]


def _local(t: torch.Tensor) -> torch.Tensor:
    """A DTensor's (FSDP2's) local shard, which the step writes in place; else ``t``."""
    to_local = getattr(t, "to_local", None)
    return to_local() if callable(to_local) else t


def is_fused(optimizer: torch.optim.Optimizer) -> bool:
    """True when every param group steps through a fused kernel that reads ``found_inf``."""
    groups = optimizer.param_groups
    return bool(getattr(optimizer, "_step_supports_amp_scaling", False)) and all(
        g.get("fused") for g in groups
    )


class UpdateMask:
    """Hooks on ``optimizer.step`` that skip the update when ``mask()`` holds ``1.0``.

    ``mask`` is read when the hooks run; ``step_index`` names the step just taken, for
    the host-side copies.
    """

    def __init__(
        self,
        optimizer: torch.optim.Optimizer,
        mask: Callable[[], torch.Tensor],
        step_index: Callable[[], int],
    ) -> None:
        self.optimizer = optimizer
        self.fused = is_fused(optimizer)
        self._mask = mask
        self._prior: object = _MISSING
        self._seen_signature: tuple[int, ...] = ()
        self._backups: dict[tuple[int, str | None], torch.Tensor] = {}
        self._here: list[tuple[torch.Tensor, str | None]] = []
        self._host_slots: list[tuple[torch.Tensor, str | None]] = []
        self._step_backups: list[torch.Tensor] = []  # this step's, slot by slot
        self._armed = False
        self._host_saved: list[tuple[torch.Tensor, torch.Tensor]] = []
        # Host-side scalars per step index, kept since the last clean sync.
        self.host_history: dict[int, list[tuple[torch.Tensor, torch.Tensor]]] = {}
        # State entries each step created, kept since the last clean sync.
        self.created: dict[int, list[tuple[torch.Tensor, str]]] = {}
        self._entries_signature = self._signature()
        self._entries = self._state_entries()
        self.step_index = step_index
        self._handles: list[RemovableHandle] = [
            optimizer.register_step_pre_hook(self._before),
            optimizer.register_step_post_hook(self._after),
        ]

    def remove(self) -> None:
        """Take the hooks off the optimizer."""
        for handle in self._handles:
            handle.remove()
        self._handles = []

    # -- fused: the kernels' own found_inf ------------------------------------------------
    def _before(self, optimizer: torch.optim.Optimizer, args: object, kwargs: object) -> None:
        mask = self._mask()
        if self.fused:
            prior = optimizer.__dict__.get("found_inf", _MISSING)
            self._prior = prior
            if isinstance(prior, torch.Tensor):
                # A GradScaler's own flag for this step: skip on either.
                mask = torch.maximum(prior.to(mask.device), mask)
            optimizer.found_inf = mask  # type: ignore[attr-defined]
            return
        self._snapshot(mask.device)

    def _after(self, optimizer: torch.optim.Optimizer, args: object, kwargs: object) -> None:
        self._note_created()
        if self.fused:
            if self._prior is _MISSING:
                optimizer.__dict__.pop("found_inf", None)
            else:
                optimizer.found_inf = self._prior  # type: ignore[attr-defined]
            self._prior = _MISSING
            return
        self._roll_back()

    def _state_entries(self) -> set[tuple[int, str]]:
        return {(id(p), key) for p, entries in self.optimizer.state.items() for key in entries}

    def _note_created(self) -> None:
        """Remember which state entries this step created (cheap unless the state grew)."""
        signature = self._signature()
        if signature == self._entries_signature:
            return
        self._entries_signature = signature
        entries = self._state_entries()
        new = entries - self._entries
        self._entries = entries
        if new:
            by_id = {id(p): p for p in self.optimizer.state}
            self.created[self.step_index()] = [(by_id[i], key) for i, key in sorted(new)]

    # -- any other optimizer: copy before, select after ----------------------------------
    def _slots(self) -> list[tuple[torch.Tensor, str | None]]:
        """Where a step may write: each trainable parameter and each of its state tensors.

        A slot is ``(param, None)`` or ``(param, state key)``, so a state tensor the step
        replaces is still found. Every trainable parameter counts, with a gradient or not
        yet: a framework may step with a closure that computes the gradients after the
        pre-hook ran.
        """
        out: list[tuple[torch.Tensor, str | None]] = []
        state = self.optimizer.state
        for group in self.optimizer.param_groups:
            for p in group["params"]:
                if not p.requires_grad:
                    continue
                out.append((p, None))
                for key, value in state.get(p, {}).items():
                    if isinstance(value, torch.Tensor):
                        out.append((p, key))
        return out

    def _tensor(self, slot: tuple[torch.Tensor, str | None]) -> torch.Tensor | None:
        p, key = slot
        if key is None:
            return _local(p)
        value = self.optimizer.state.get(p, {}).get(key)
        return _local(value) if isinstance(value, torch.Tensor) else None

    def _signature(self) -> tuple[int, ...]:
        """Changes when parameters or state entries come or go (cheap: no tensor touched)."""
        state = self.optimizer.state
        return (
            *(len(g["params"]) for g in self.optimizer.param_groups),
            len(state),
            sum(len(entries) for entries in state.values()),
        )

    @torch.no_grad()
    def _snapshot(self, device: torch.device) -> None:
        signature = self._signature()
        if signature != self._seen_signature:
            self._seen_signature = signature
            slots = self._slots()
            self._backups = {}
            self._here, self._host_slots = [], []
            for slot in slots:
                t = self._tensor(slot)
                (self._here if t.device == device else self._host_slots).append(slot)
        live = [self._tensor(slot) for slot in self._here]
        backups = []
        for slot, t in zip(self._here, live, strict=True):
            b = self._backups.get(_key(slot))
            if b is None or b.shape != t.shape or b.dtype != t.dtype:
                b = self._backups[_key(slot)] = torch.empty_like(t)
            backups.append(b)
        if live:
            torch._foreach_copy_(backups, live)
        self._step_backups = backups
        self._host_saved = [(t, t.clone()) for t in map(self._tensor, self._host_slots)]
        self._armed = True

    @torch.no_grad()
    def _roll_back(self) -> None:
        if not self._armed:
            return
        self._armed = False
        # The mask is read now, not before the step: a closure run inside the step may
        # have recorded this step's verdict.
        cond = self._mask().reshape(()) > 0
        before = self._seen_signature
        for slot, backup in zip(self._here, self._step_backups, strict=True):
            live = self._tensor(slot)  # the step may have replaced a state tensor
            if live is not None:
                torch.where(cond, backup, live, out=live)
        self._step_backups = []
        if self._signature() != before:
            # State the step created (a first step): back to zeros, as fresh state starts.
            known = {_key(slot) for slot in self._here}
            for slot in self._slots():
                t = self._tensor(slot)
                if _key(slot) not in known and t is not None and t.device == cond.device:
                    torch.where(cond, torch.zeros((), dtype=t.dtype, device=t.device), t, out=t)
        if self._host_saved:
            self.host_history[self.step_index()] = self._host_saved
            self._host_saved = []

    def restore_host(self, step: int) -> None:
        """At a halt: host-side scalars back as before ``step``; state it or later made, gone."""
        for live, saved in self.host_history.get(step, []):
            live.copy_(saved)
        state = self.optimizer.state
        for made_at, entries in self.created.items():
            if made_at < step:
                continue
            for p, key in entries:
                state.get(p, {}).pop(key, None)
                if p in state and not state[p]:
                    del state[p]

    def forget_host(self) -> None:
        """Drop the host-side copies (after a clean sync: nothing to roll back to)."""
        self.host_history.clear()
        self.created.clear()
