"""The contract run against the reference trainer, as ``pytest --nozero`` does it here:
it passes with one compilation, and catches the same trainer with its guard switched off."""

from __future__ import annotations

import pytest

from nozero_trainer import contract_target, loop

pytest_plugins = ["pytester"]

REFERENCE = "nozero_trainer.contract_target:reference_trainer"
FAST = ("--nozero", "--nozero-examples=5", "--nozero-steps=3", "-p", "no:cacheprovider")


def test_reference_trainer_passes_the_contract_compiling_at_most_once(pytester):
    before = loop.compile_count()
    result = pytester.runpytest_inprocess(*FAST, f"--nozero-trainer={REFERENCE}", "-v")
    result.assert_outcomes(passed=4)
    result.stdout.fnmatch_lines([f"nozero::never_continue[[]{REFERENCE}[]] PASSED*"])
    # The compiled step is cached per process: at most one compilation for all contracts.
    assert loop.compile_count() - before <= 1


def test_reference_trainer_without_its_guard_is_caught(pytester):
    pytester.makeconftest(
        """
        import functools
        import pytest
        from nozero_trainer import contract_target, loop

        @pytest.fixture
        def nozero_trainer(monkeypatch):
            monkeypatch.setattr(
                contract_target, "train_on_batches",
                functools.partial(loop.train_on_batches, guard=False),
            )
            return contract_target.reference_trainer()
        """
    )
    result = pytester.runpytest_inprocess(*FAST, "-k", "halts or never_continue")
    result.assert_outcomes(failed=2, deselected=2)
    result.stdout.fnmatch_lines(
        [
            "nozero check 'halts' failed for trainer [[]nozero_trainer[]]",
            "the trainer never raised: returned normally; its history's first non-finite entry*",
        ]
    )
    assert contract_target.train_on_batches is loop.train_on_batches  # restored


@pytest.mark.parametrize("steps", [1, 4])
def test_reference_run_returns_one_history_entry_per_batch(steps):
    trainer = contract_target.reference_trainer()
    history = trainer.run(trainer.clean_batches(seed=0, steps=steps))
    assert len(history) == steps
