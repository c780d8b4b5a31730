"""The linter's tables: every word and call shape that makes a finiteness fact, carries
it, or reacts to it, one module per concern.

- ``sources``: what establishes that a value is (or is not) finite: predicates with their
  polarity, overflow and finite helpers of the loss scalers, flag names, non-finite
  exceptions, comparisons written as calls.
- ``propagation``: calls that keep a flag's meaning while they reduce, move or gather it.
- ``reactions``: what a file does about a non-finite value: zeroing, filling, sanitizing,
  clamping, raising, stepping, or only observing.
- ``switches``: library settings that make a library handle non-finite values itself,
  by library.

The tables import nothing of the linter; the vocabulary (``nozero.lint.vocab``) and the
flow pass (``nozero.lint.facts``) read them.
"""
