"""Reactions: what code does once it knows a value is not finite. Zeroing, filling,
sanitizing, clamping, raising and stepping are reactions; logging only observes.

To add a shape: add an entry here, with a comment showing the code it stands for, and a
VALID/INVALID case in ``tests/lint/test_corpus.py`` (a ``Case`` with the findings it must
produce, none for a VALID one) that fails without the entry.
"""

from __future__ import annotations

# ---- zeroing and filling -------------------------------------------------------------
# Calls that zero gradients (or updates) in place or by value.
ZEROING_CALLS = frozenset(
    {
        "zero_grad",  # if not finite: optimizer.zero_grad()
        "zero_",  # p.grad.zero_()
        "zeros_like",  # grads = jax.tree.map(jnp.zeros_like, grads)
        "zero_grads",  # model.zero_grads()
        "clear_grads",  # paddle-style: opt.clear_grads()
        "set_to_zero",  # updates = optax.set_to_zero()
    }
)
# Zeroing calls that clear gradients whatever they are called on (an optimizer, a model).
GRADIENT_CLEARING = frozenset(
    {
        "zero_grad",  # model.zero_grad()
        "zero_grads",  # trainer.zero_grads()
        "clear_grads",  # opt.clear_grads()
    }
)
# Fills that zero when their argument is zero.
FILL_CALLS = frozenset(
    {
        "fill_",  # p.grad.fill_(0)
        "fill",  # buffer.fill(0)
    }
)
# What a substitution puts in place of a non-finite value: a constant fill (``zeros_like``)
# or a named constant (``jnp.nan``), as opposed to another computed value.
CONSTANT_FILLS = frozenset(
    {
        "zeros",  # torch.zeros(n)
        "zeros_like",  # torch.where(bad, torch.zeros_like(g), g)
        "ones",  # jnp.ones(shape)
        "ones_like",  # torch.ones_like(scale)
        "full",  # torch.full(shape, 1e4)
        "full_like",  # jnp.full_like(x, -1e9)
        "fill",  # tf.fill(shape, 0.0)
        "new_zeros",  # loss.new_zeros(()): a zero of the tensor's dtype and device
        "new_ones",  # g.new_ones(g.shape)
        "new_full",  # g.new_full(g.shape, 1e4)
    }
)
# Conversions that are a constant only when what they convert is one (``tensor(0.0)``).
CONSTANT_CONVERSIONS = frozenset(
    {
        "constant",  # tf.constant(0.0)
        "array",  # jnp.array(0.0)
        "asarray",  # np.asarray(0.0)
        "tensor",  # torch.tensor(0.0)
        "float",  # float("inf")
    }
)
# Named constants (``jnp.nan``, ``math.inf``, ``np.pi``).
CONSTANT_NAMES = frozenset({"nan", "inf", "NaN", "Inf", "pi", "e"})

# ---- sanitizing and clamping ---------------------------------------------------------
# Functions and tensor methods that overwrite non-finite values.
SANITIZERS = frozenset(
    {
        "nan_to_num",  # torch.nan_to_num(grad, nan=0.0), jnp.nan_to_num(x)
        "nan_to_num_",  # p.grad.nan_to_num_(0.0)
    }
)
# Masked overwrites (``x.masked_fill(torch.isnan(x), 0)``).
MASKED_FILL = frozenset(
    {
        "masked_fill",  # x.masked_fill(~torch.isfinite(x), 0.0)
        "masked_fill_",  # x.masked_fill_(torch.isnan(x), 0.0)
    }
)
# Calls that clamp a value into a range (a clamped infinite loss trains on the bound).
CLAMP_CALLS = frozenset(
    {
        "clamp",  # loss = torch.clamp(loss, max=1e4)
        "clip",  # loss = loss.clip(0, 10)
        "clip_by_value",  # loss = tf.clip_by_value(loss, 0.0, 1e4)
    }
)
# What a branch on a non-finite test binds to keep activations in range.
CLAMPS = CLAMP_CALLS | {
    "clamp_",  # if not torch.isfinite(h).all(): h.clamp_(-1e4, 1e4)
    "nan_to_num",  # if torch.isnan(h).any(): h = torch.nan_to_num(h)
    "where",  # if bad: h = torch.where(torch.isinf(h), 1e4, h)
}
# Reductions that leave NaN elements out (``losses.nanmean()``): per-sample NaN losses
# vanish from the loss without a test.
NAN_REDUCTIONS = frozenset(
    {
        "nanmean",  # loss = losses.nanmean()
        "nansum",  # loss = torch.nansum(losses)
    }
)

# ---- raising, stepping, observing ----------------------------------------------------
# Calls that check values and raise (a periodic one is the informational rule's concern).
CHECK_CALLS = frozenset(
    {
        "check_finite",  # check_finite(grads): raises on a non-finite value
        "check_numerics",  # tf.debugging.check_numerics(loss, "loss")
        "assert_tree_all_finite",  # chex.assert_tree_all_finite(grads): AssertionError
    }
)
# Calls that stop the program or raise when a check fails, or stop it in a debugger
# (``pdb.set_trace()``, ``breakpoint()``): an investigation, which is what the rule asks.
RAISING_CALLS = frozenset(
    {
        "check_finite",  # check_finite(x)
        "check",  # checkify.check(jnp.isfinite(x).all(), "nan")
        "check_numerics",  # tf.debugging.check_numerics(x, msg)
        "assert_tree_all_finite",  # chex.assert_tree_all_finite(state)
        "exit",  # sys.exit(1)
        "_exit",  # os._exit(1)
        "abort",  # os.abort()
        "fail",  # pytest.fail("loss is nan")
        "set_trace",  # pdb.set_trace()
        "breakpoint",  # breakpoint()
        "post_mortem",  # pdb.post_mortem()
    }
)
# Words of a flag whose setting asks the run to end: the loop that reads it stops for
# good. Set where a value is not finite, it is a halt, as a raise is, not a skip.
STOP_FLAG_WORDS = frozenset(
    {
        "stop",  # self.model.stop_training = True (Keras); trainer.should_stop = True
        "terminate",  # self.terminate_run = True
        "halt",  # state.halt = True
        "abort",  # self.abort_training = True
    }
)
# Words that make a stop flag stop one step or one part of it, not the run: such a flag
# is a skip (``self.stop_update = True`` ... ``if self.stop_update: continue``).
STOP_PART_WORDS = frozenset(
    {
        "update",  # stop_update
        "updates",  # halt_updates
        "step",  # stop_step
        "grad",  # stop_grad
        "grads",  # stop_grads
        "gradient",  # stop_gradient_flag
        "backward",  # stop_backward
        "batch",  # abort_batch
        "iteration",  # stop_iteration
        "iter",  # stop_iter
    }
)
# Calls that apply an optimizer step (a check guarding one skips the step).
UPDATE_CALLS = frozenset(
    {
        "step",  # if finite: optimizer.step()
        "apply_updates",  # params = optax.apply_updates(params, updates)
        "apply_gradients",  # optimizer.apply_gradients(zip(grads, vars))
        "backward",  # loss.backward()
        "minimize",  # optimizer.minimize(loss, var_list)
    }
)
# Calls that only report: a branch of nothing else logs the non-finite value and lets it
# through. Labelled a diagnostic in every sample read so far, so its own opt-in rule.
REPORTING_CALLS = frozenset(
    {
        "debug",  # logger.debug("nan loss")
        "info",  # logger.info(...)
        "warning",  # logger.warning("loss is nan")
        "warn",  # warnings.warn("overflow")
        "error",  # logger.error(...)
        "exception",  # logger.exception(...)
        "critical",  # logger.critical(...)
        "log",  # self.log("nan", is_nan)
        "print",  # print("nan detected")
        "log_scalar",  # logger.log_scalar("overflow", overflow)
        "log_metrics",  # logger.log_metrics({"nan": has_nan})
        "log_dict",  # self.log_dict({"found_inf": found_inf})
        "add_scalar",  # writer.add_scalar("overflow", overflow, step)
        "write",  # sys.stderr.write("nan\n")
        "set_postfix",  # pbar.set_postfix(nan=has_nan)
        "rank_zero_warn",  # Lightning: rank_zero_warn("nan loss")
        "rank_zero_info",  # Lightning: rank_zero_info(...)
        "print_rank_0",  # Megatron: print_rank_0("skipped")
        "log_dist",  # DeepSpeed: log_dist("overflow", ranks=[0])
    }
)
# Calls that record a value for people to look at: a value cleaned inside one of their
# arguments is cleaned for the record (a histogram of gradients without its NaNs), and
# training goes on with the value as it was.
RECORDING_CALLS = REPORTING_CALLS | frozenset(
    {
        "histogram",  # tf.summary.histogram("grads", mask_nans(g))
        "scalar",  # tf.summary.scalar("loss", tf.where(tf.is_finite(l), l, 0.0))
        "add_histogram",  # writer.add_histogram("grad", torch.nan_to_num(g), step)
        "add_scalars",  # writer.add_scalars("losses", {...}, step)
    }
)
# Calls that only observe: logging or printing a flag records nothing.
OBSERVING_CALLS = REPORTING_CALLS | frozenset(
    {
        "format",  # "{}".format(flag)
        "str",  # str(overflow)
        "repr",  # repr(flag)
        "append",  # nan_steps.append(step)
    }
)

# Calls that catch the exception classes among their arguments and run the call again:
# a retry of a non-finite failure is a swallow, as ``except ...: continue`` is.
RETRY_CALLS = frozenset(
    {
        "retry_call",  # retry: retry_call(model.train, tries=3, exceptions=NanException)
        "retry",  # retry: @retry(FloatingPointError, tries=3); @retry(exceptions=...)
        "retry_if_exception_type",  # tenacity: @retry(retry=retry_if_exception_type(E))
        "on_exception",  # backoff: @backoff.on_exception(backoff.expo, NonFiniteError)
    }
)
# Words of a function that runs training: an ``except`` around its call, or a retry of it,
# catches what training raised (``trainer.fit()``, ``retry_call(model.train, ...)``).
TRAINING_RUN_WORDS = frozenset(
    {"train", "training", "fit", "step", "epoch", "update", "optimize", "backward"}
)
# Words of a loop variable that counts the rounds of one training run: a broad handler
# around a round in such a loop goes on with the same run (a sweep's loop over
# configurations starts a new run instead).
ROUND_LOOP_WORDS = frozenset(
    {
        "epoch",  # for epoch in range(epochs)
        "epochs",  # for n_epochs in ...
        "step",  # for step in range(max_steps)
        "steps",  # for global_steps in ...
        "iteration",  # for iteration in range(n)
        "round",  # for round in range(rounds): federated rounds
        "episode",  # for episode in range(episodes): RL
    }
)

# ---- keywords of reacting calls -------------------------------------------------------
# ``nan_to_num`` keywords naming the value cleaned (``nan=``, ``posinf=`` name what
# replaces it).
SANITIZED_KEYWORDS = frozenset(
    {
        "x",  # np.nan_to_num(x=grads)
        "input",  # torch.nan_to_num(input=grad, nan=0.0)
        "out",  # torch.nan_to_num(g, out=g)
    }
)
# ``nan_to_num`` keywords naming what replaces each kind of non-finite value.
SANITIZER_FILL_KEYWORDS = (
    "nan",  # torch.nan_to_num(g, nan=float("nan"))
    "posinf",  # np.nan_to_num(x, posinf=np.nan)
    "neginf",  # jnp.nan_to_num(x, neginf=jnp.nan)
)
# Keywords of a clamp's upper bound (an infinite loss becomes this bound).
CLAMP_UPPER_KEYWORDS = frozenset(
    {
        "max",  # torch.clamp(loss, max=1e4)
        "clip_value_max",  # tf.clip_by_value(loss, clip_value_min=0.0, clip_value_max=1e4)
        "a_max",  # np.clip(loss, a_min=0, a_max=1e4)
    }
)
# Calls by which a same-file helper clears the gradients it is given.
HELPER_ZEROING = frozenset(
    {
        "zero_grad",  # def reset(model): model.zero_grad()
        "zero_",  # def clear(ps): for p in ps: p.grad.zero_()
    }
)

# ---- restoring a saved copy ----------------------------------------------------------
# Calls that put parameters back to a copy saved before the update: in a branch taken on a
# non-finite value, the update is dropped and training goes on (NZ410, as a keep-old select).
# Each names what it is called on: "parameter" (a loop's parameter, or its ``.data``) or
# "model" (a name holding training state, not ``self``).
RESTORING_CALLS = {
    "copy_": "parameter",  # p.data.copy_(saved[name])
    "load_state_dict": "model",  # model.load_state_dict(last_good_state)
    "set_weights": "model",  # Keras: self.model.set_weights(self.last_good_weights)
}
# Calls that reload a saved checkpoint, whatever they are called on (orbax's
# ``mngr.restore(step)``, ``trainer.load_checkpoint(path)``): a roll-back.
ROLLBACK_CALLS = frozenset(
    {
        "restore",  # state = mngr.restore(mngr.best_step())
        "restore_checkpoint",  # flax: checkpoints.restore_checkpoint(ckpt_dir, state)
        "load_checkpoint",  # trainer.load_checkpoint(last_good)
        "reload_checkpoint",  # self.reload_checkpoint()
        "load_weights",  # Keras: self.model.load_weights("last_good.weights.h5")
    }
)
# Calls whose results are a model's parameters: their loop variables are parameters.
PARAMETER_SOURCES = frozenset({"parameters", "named_parameters"})
