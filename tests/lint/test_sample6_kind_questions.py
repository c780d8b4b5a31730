"""A value asked only for its kind (``isinstance``, ``type``, ``hasattr``, ``callable``)
hands none of its values on, as ``len(x)`` and ``x.shape`` do not: a flag made from
``isinstance(model.criterion, Mixin)`` that configures a data loader does not make the
loader's targets training signal (chemprop's prediction CLI, sixth held-out sample).
Cleaning a loss itself is still found beside such a question."""

from __future__ import annotations

import textwrap

import pytest

from nozero.lint.engine import lint_source

# chemprop: a criterion's kind configures the loader; NaN (unknown) targets are masked
CRITERION_KIND_CONFIGURES_DATA = """\
import numpy as np
import torch

def make_predictions(args, models, estimator, calibrator, trainer):
    bounded = isinstance(models[0].criterion, BoundedMixin)
    format_kwargs = dict(smiles_cols=args.smiles_columns, bounded=bounded)
    cal_loader = prepare_data_loader(args, format_kwargs)
    cal_targets = cal_loader.dataset.Y
    cal_mask = torch.from_numpy(np.isfinite(cal_targets))
    cal_targets = np.nan_to_num(cal_targets, nan=0.0)
    cal_preds, cal_uncs = estimator(cal_loader, models, trainer)
    calibrator.fit(cal_preds, cal_uncs, torch.from_numpy(cal_targets), cal_mask)
"""

# JAX: whether the loss function is callable picks a data pipeline option
LOSS_CALLABLE_PICKS_PIPELINE = """\
import jax.numpy as jnp

def prepare(config, loss_fn, raw):
    per_example = callable(loss_fn) and hasattr(loss_fn, "per_example")
    batch = load_batch(raw, per_example=per_example)
    features = jnp.nan_to_num(batch["features"])
    return features
"""

# the loss cleaned beside a question about its kind: still found
LOSS_CLEANED_BESIDE_A_KIND_QUESTION = """\
import torch

def training_step(model, batch, optimizer):
    loss = model.criterion(model(batch["x"]), batch["y"])
    if isinstance(loss, torch.Tensor):
        loss = torch.nan_to_num(loss, nan=0.0)
    loss.backward()
    optimizer.step()
"""


def findings(source: str) -> list[tuple[int, str]]:
    return [(f.line, f.code) for f in lint_source(textwrap.dedent(source), "train.py")]


@pytest.mark.parametrize(
    "source",
    [CRITERION_KIND_CONFIGURES_DATA, LOSS_CALLABLE_PICKS_PIPELINE],
    ids=["torch-criterion-kind", "jax-callable"],
)
def test_a_value_asked_only_its_kind_hands_on_no_signal(source: str) -> None:
    assert findings(source) == []


def test_a_loss_cleaned_beside_a_kind_question_is_found() -> None:
    assert findings(LOSS_CLEANED_BESIDE_A_KIND_QUESTION) == [(6, "NZ101")]
