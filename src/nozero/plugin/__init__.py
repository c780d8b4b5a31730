"""The ``pytest --nozero`` plugin: options and hooks (cheap, always loaded), and, only with
``--nozero``, collection, checks, judges, batches and strategies. Public faces:
``nozero.testing`` and ``nozero.strategies``."""
