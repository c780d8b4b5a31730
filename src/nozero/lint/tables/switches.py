"""Library switches: settings and calls that make a library handle non-finite values
itself (skip the step, zero the update, raise), grouped by library. The opt-in rules
(NZ4xx) and the trigger words read them.

To add a shape: add an entry here, with a comment showing the code it stands for, and a
VALID/INVALID case in ``tests/lint/test_corpus.py`` (a ``Case`` with the findings it must
produce, none for a VALID one) that fails without the entry.
"""

from __future__ import annotations

# ---- torch ---------------------------------------------------------------------------
NONFINITE_KEYWORD = "error_if_nonfinite"  # clip_grad_norm_(ps, 1.0, error_if_nonfinite=True)
CTC_KEYWORD = "zero_infinity"  # nn.CTCLoss(zero_infinity=True)
ANOMALY_DETECTION = "detect_anomaly"  # torch.autograd.detect_anomaly(): raises on NaN
# ---- jax + optax, numpyro -------------------------------------------------------------
# optax wrappers that skip or zero a non-finite update, and the rule each one is.
OPTAX_SWITCHES = {
    "apply_if_finite": "NZ401",  # optax.apply_if_finite(opt, max_consecutive_errors=5)
    "zero_nans": "NZ402",  # optax.chain(optax.zero_nans(), ...)
    "skip_not_finite": "NZ403",  # optax.MultiSteps(opt, should_skip_update_fn=skip_not_finite)
}
STABLE_UPDATE = "stable_update"  # numpyro: svi.stable_update(state): keeps the old state
# ---- Hugging Face ----------------------------------------------------------------------
NAN_FILTER_KEYWORD = "logging_nan_inf_filter"  # TrainingArguments(logging_nan_inf_filter=)
# ---- apex ----------------------------------------------------------------------------
# ``with amp.scale_loss(loss, opt) as scaled:``: its patched ``optimizer.step`` skips the
# step on overflow.
APEX_SCALE_LOSS = "scale_loss"
