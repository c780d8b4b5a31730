"""Run a recipe page's conftest.py block under ``pytest --nozero`` in a subprocess, with a
broken copy of it registered beside it in the same run.

Each run is its own process with a hard time limit: torch (and Lightning, transformers)
load once there, and a hung trainer cannot hold up the suite. The broken copy rides in the
same process (``--nozero-trainer=broken_recipe:factory``) to pay that start-up once.
"""

from __future__ import annotations

import pytest
from docs_blocks import python_blocks

BROKEN = "broken_recipe:factory"
NO_SHRINKING = """
from hypothesis import Phase, settings

settings.register_profile("no-shrinking", phases=[Phase.explicit, Phase.generate])
"""


def conftest_block(page: str) -> str:
    """The page's single python block, checked to be a whole conftest.py."""
    (block,) = python_blocks(page)
    assert block.startswith("# conftest.py"), block.splitlines()[0]
    return block


def broken(block: str, guarded: str, replacement: str) -> str:
    """``block`` with the one line ``guarded`` (comments aside) replaced, indentation kept."""
    lines = block.splitlines(keepends=True)
    hits = [i for i, line in enumerate(lines) if line.split("  #")[0].strip() == guarded]
    assert len(hits) == 1, f"{guarded!r} is not one line of the recipe"
    line = lines[hits[0]]
    indent = line[: len(line) - len(line.lstrip())]
    lines[hits[0]] = "".join(indent + part + "\n" for part in replacement.splitlines())
    return "".join(lines)


def run_recipe(
    pytester: pytest.Pytester,
    block: str,
    broken_block: str | None,
    *,
    examples: int,
    limit: float,
) -> pytest.RunResult:
    """``pytest --nozero -v`` on ``block`` saved as conftest.py, with ``broken_block``'s
    trainer (if any) registered as a second one, within ``limit`` seconds."""
    pytester.makeconftest(block)
    extra = []
    if broken_block is not None:
        # The copy's glue is the recipe's fixture; its undecorated function is the factory.
        factory = "\nfactory = nozero_trainer.__wrapped__\n"
        pytester.makepyfile(broken_recipe=broken_block + factory)
        extra.append(f"--nozero-trainer={BROKEN}")
    # The broken copy's failures need no minimal example: a profile without shrinking
    # keeps each failing check to a few runs (checks that pass never shrink anyway).
    pytester.makepyfile(no_shrinking=NO_SHRINKING)
    args = ("--nozero", "--nozero-steps=3", f"--nozero-examples={examples}", "-v")
    return pytester.runpytest_subprocess(
        *args,
        *extra,
        "-p",
        "no_shrinking",
        "--hypothesis-profile=no-shrinking",
        "-p",
        "no:cacheprovider",
        timeout=limit,
    )


def assert_recipe_passes(result: pytest.RunResult) -> None:
    checks = ("halts", "overflow", "no_false_alarm", "never_continue")
    lines = result.stdout.lines
    for check in checks:
        ours = [line for line in lines if line.startswith(f"nozero::{check}[nozero_trainer]")]
        assert ours and ours[0].split()[1] == "PASSED", "\n".join(lines[-60:])


def assert_recipe_passes_and_broken_copy_fails(result: pytest.RunResult) -> None:
    assert_recipe_passes(result)
    lines = result.stdout.lines
    for check in ("halts", "never_continue"):
        theirs = [line for line in lines if line.startswith(f"nozero::{check}[{BROKEN}]")]
        assert theirs and theirs[0].split()[1] == "FAILED", "\n".join(lines[-60:])
    assert result.parseoutcomes().get("passed", 0) >= 4
