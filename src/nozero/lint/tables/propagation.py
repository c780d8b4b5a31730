"""Propagation steps: calls that keep the meaning of a flag or a test while they reduce
it, move it between devices, gather it across processes or pick between values.

To add a shape: add an entry here, with a comment showing the code it stands for, and a
VALID/INVALID case in ``tests/lint/test_corpus.py`` (a ``Case`` with the findings it must
produce, none for a VALID one) that fails without the entry.
"""

from __future__ import annotations

# ---- flags: reductions, conversions, moves, collectives ------------------------------
# Calls that keep the meaning of the flag they reduce or move: ``bad`` stays bad after
# ``bad.any().item()``, ``dist.all_reduce(found_inf)``, ``found_inf.to("cpu")``.
_FLAG_REDUCING = frozenset(
    {
        "all",  # torch.isfinite(g).all(), jnp.all(ok)
        "any",  # torch.isnan(g).any()
        "logical_and",  # jnp.logical_and(ok, finite)
        "logical_or",  # torch.logical_or(has_nan, has_inf)
        "tree_all",  # jax.tree_util.tree_all(oks)
        "reduce_all",  # tf.reduce_all(tf.math.is_finite(g))
        "reduce_any",  # tf.reduce_any(tf.math.is_nan(g))
        "reduce_max",  # tf.reduce_max(flags)
        "sum",  # found_inf.sum()
        "max",  # torch.max(flags)
        "squeeze",  # found_inf.squeeze()
        "reduce",  # functools.reduce(jnp.logical_and, oks)
        "stack",  # torch.stack(found_infs).any()
    }
)
_FLAG_CONVERTING = frozenset(
    {
        "bool",  # bool(torch.isnan(loss))
        "item",  # overflow.item()
        "float",  # float(found_inf)
        "int",  # int(overflow)
        "numpy",  # flag.numpy()
        "tolist",  # flags.tolist()
        "array",  # np.array(overflow)
        "asarray",  # jnp.asarray(is_fin)
        "tensor",  # torch.tensor(overflow)
        "FloatTensor",  # torch.cuda.FloatTensor([overflow])
        "ByteTensor",  # torch.cuda.ByteTensor([overflow])
        "IntTensor",  # torch.cuda.IntTensor([overflow])
        "detach",  # found_inf.detach()
    }
)
_FLAG_MOVING = frozenset(
    {
        "cpu",  # found_inf.cpu()
        "to",  # found_inf.to(device)
        "cuda",  # overflow_gpu = torch.cuda.ByteTensor([overflow]).cuda()
    }
)
# Collectives: every rank ends with the flag of all (torch.distributed, jax.lax).
_FLAG_GATHERING = frozenset(
    {
        "all_reduce",  # dist.all_reduce(overflow_gpu, op=dist.ReduceOp.MAX)
        "all_gather",  # dist.all_gather(flags, found_inf)
        "psum",  # jax.lax.psum(found_inf, "batch")
        "pmax",  # jax.lax.pmax(overflow, axis_name)
        "pmin",  # jax.lax.pmin(is_fin, axis_name)
        "pmean",  # jax.lax.pmean(ok, axis_name)
    }
)
FLAG_REDUCTIONS = _FLAG_REDUCING | _FLAG_CONVERTING | _FLAG_MOVING | _FLAG_GATHERING

# ---- tests: calls that keep a finiteness test a test ---------------------------------
# Reductions that keep a finiteness test a test (``isnan(g).any()``, ``jnp.all(ok)``),
# and conversions that gather tests into one array (``jnp.array([isfinite(u) ...])``).
BOOLEAN_CALLS = frozenset(
    {
        "all",  # torch.isfinite(g).all()
        "any",  # torch.isnan(g).any()
        "reduce_all",  # tf.reduce_all(tf.math.is_finite(g))
        "reduce_any",  # tf.reduce_any([tf.reduce_any(tf.math.is_nan(g)) for g in grads])
        "bool",  # bool(torch.isnan(loss))
        "logical_and",  # jnp.logical_and(a, b)
        "logical_or",  # np.logical_or(isnan(x), isinf(x))
        "logical_not",  # jnp.logical_not(jnp.isfinite(g))
        "tree_all",  # jax.tree_util.tree_all(tree_map(isfinite, g))
        "item",  # torch.isnan(loss).item()
        "array",  # jnp.array([jnp.isfinite(u).all() for u in leaves])
        "asarray",  # np.asarray(flags)
        "stack",  # torch.stack([isfinite(p).all() for p in ps])
        "tensor",  # torch.tensor([isnan(l) for l in losses])
        "convert_to_tensor",  # tf.convert_to_tensor(oks)
    }
)

# ---- values: mapping, joining, reducing, selecting ----------------------------------
# Calls that apply a function to every leaf of a structure (``jax.tree.map(f, grads)``).
MAPPERS = frozenset(
    {
        "map",  # jax.tree.map(jnp.nan_to_num, grads)
        "tree_map",  # jax.tree_util.tree_map(f, grads)
        "map_structure",  # tf.nest.map_structure(f, grads)
        "tree_map_with_path",  # jax.tree_util.tree_map_with_path(f, params)
    }
)
# Calls that hand on the same values in another type, dtype or place: a helper's local
# ``arr = jnp.asarray(leaf)`` is still the parameter it cleans.
VALUE_COPIES = frozenset(
    {
        "asarray",  # arr = jnp.asarray(leaf)
        "array",  # x = np.array(values)
        "astype",  # g = grad.astype(jnp.float32)
        "float",  # g = grad.float()
        "double",  # g = grad.double()
        "to",  # g = grad.to(device)
        "cpu",  # g = grad.cpu()
        "contiguous",  # g = grad.contiguous()
        "clone",  # g = grad.clone()
        "detach",  # g = grad.detach()
        "copy",  # g = np.copy(grad)
        "convert_to_tensor",  # g = tf.convert_to_tensor(grad)
        "cast",  # g = tf.cast(grad, tf.float32)
        "device_put",  # g = jax.device_put(grad)
    }
)
# Calls that join a running total with one more part (``torch.cat((losses, loss))``).
JOINS = frozenset(
    {
        "cat",  # torch.cat((losses, loss))
        "concat",  # tf.concat([losses, loss], 0)
        "concatenate",  # np.concatenate([losses, [loss]])
        "stack",  # torch.stack(losses)
        "hstack",  # np.hstack([losses, loss])
        "vstack",  # np.vstack([rows, row])
    }
)
# Reductions that turn per-sample values into the loss (a NaN element taints the mean).
LOSS_REDUCTIONS = frozenset(
    {
        "mean",  # losses.mean()
        "sum",  # losses.sum()
        "nanmean",  # losses.nanmean(): leaves NaN elements out
        "nansum",  # torch.nansum(losses)
        "reduce_mean",  # tf.reduce_mean(losses)
        "reduce_sum",  # tf.reduce_sum(losses)
    }
)
# Calls that gather loss terms given as a comprehension into one value: a condition of
# the comprehension that keeps only finite terms leaves the others out of the loss.
GATHERING_CALLS = frozenset(
    {
        "sum",  # sum(l for l in losses if not isnan(l))
        "stack",  # torch.stack([l for l in losses if isfinite(l)]).sum()
        "cat",  # torch.cat([...])
        "mean",  # np.mean([...])
        "tensor",  # torch.tensor([...])
    }
)
# Calls that pick between two values elementwise or as a whole.
SELECTORS = frozenset(
    {
        "where",  # torch.where(torch.isfinite(g), g, 0.0)
        "select",  # jax.lax.select(ok, new, old)
        "cond",  # jax.lax.cond(is_fin, update, keep, state)
        "switch",  # jax.lax.switch(index, branches)
    }
)
# ... and the selections the flow pass follows, tree-wide ones included.
SELECT_CALLS = SELECTORS | {
    "tree_where",  # a project's tree_where(is_fin, new_params, params)
    "select_n",  # jax.lax.select_n(ok, old, new)
    "select_tree",  # select_tree(is_fin, new_state, old_state)
}
# Calls that read a step's loss or norm as a plain number (``loss.item() < limit``).
SCALAR_READS = frozenset(
    {
        "item",  # if loss.item() < self.loss_limit:
        "detach",  # if loss.detach() < max_loss:
        "float",  # if grad_norm.float() < max_norm:
    }
)
# Reductions and conversions after which a test true on a non-finite value is still true
# only on one (``isnan(g).any()`` is true when some element is NaN).
NONFINITE_TRUTH_KEEPING = frozenset(
    {
        "any",  # torch.isnan(g).any()
        "all",  # torch.isinf(g).all()
        "bool",  # bool(torch.isnan(loss))
        "item",  # torch.isnan(loss).item()
        "logical_or",  # torch.logical_or(isnan(a), isinf(a))
    }
)
