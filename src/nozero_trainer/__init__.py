"""The reference JAX/optax trainer: multi-label heads on cached embeddings, guarded."""
