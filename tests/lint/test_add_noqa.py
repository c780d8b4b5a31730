"""``nozero lint --add-noqa``: through the installed command, on real files.

What a team adopting nozero relies on: the next run is clean, each file changes only by
the added comments (encoding, BOM, line endings, permissions kept), a second run changes
nothing, and a file that cannot be rewritten is left exactly as it was.
"""

from __future__ import annotations

import difflib
import os
import re
import stat
from pathlib import Path

import pytest

from nozero.lint.add_noqa import annotate
from nozero.lint.finding import Finding

from .conftest import BAD_SOURCE, run_console_script, write

# Each shape of line a comment must go on, and one to merge into.
SHAPES = '''\
import jax
import jax.numpy as jnp


def train_step(params, batch):
    grads = jax.grad(loss_fn)(params, batch)
    grads = jnp.nan_to_num(grads)<3 spaces>
    other = jnp.nan_to_num(
        grads,
    )  # keep: shape of the batch
    more = jnp.nan_to_num(grads)  # noqa: E501 a long line
    last = jnp.nan_to_num(grads, nan="""
    not a place for a comment
    """)
    joined = \\
        jnp.nan_to_num(grads)
    return grads, other, more, last, joined
'''.replace("<3 spaces>", "   ")
# Added text: a comment of its own, or codes (and a reason) merged into a noqa comment.
ADDED = re.compile(r"^( *# noqa: NZ\d{3}(, NZ\d{3})*( [^#]+)?|, NZ\d{3}(, NZ\d{3})*)$")


def _tree(root: Path) -> dict[str, bytes]:
    files = {
        "pkg/shapes.py": SHAPES.encode(),
        "pkg/crlf.py": b"import torch\r\n\r\nloss = torch.nan_to_num(loss)\r\nx = 1\r\n",
        # A byte order mark, and no newline at the end.
        "pkg/bom.py": b"\xef\xbb\xbfimport torch\nloss = torch.nan_to_num(loss)",
        "pkg/latin.py": (
            "# -*- coding: latin-1 -*-\nimport torch\nname = 'été'\nloss = torch.nan_to_num(loss)\n"
        ).encode("latin-1"),
        "pkg/clean.py": b"def add(a, b):\n    return a + b\n",
        "pkg/two.py": BAD_SOURCE.encode() + b"g2 = jnp.nan_to_num(grads)\n",
    }
    for name, data in files.items():
        write(root / name, data)
    os.chmod(root / "pkg/two.py", 0o755)
    return files


def _insertions(old: bytes, new: bytes) -> list[str]:
    """The text ``new`` adds to ``old``; fails if anything was changed or removed."""
    old_text, new_text = old.decode("latin-1"), new.decode("latin-1")
    added = []
    matcher = difflib.SequenceMatcher(None, old_text, new_text, autojunk=False)
    for op, i1, i2, j1, j2 in matcher.get_opcodes():
        assert op in ("equal", "insert"), (op, old_text[i1:i2], new_text[j1:j2])
        if op == "insert":
            added.append(new_text[j1:j2])
    return added


def test_add_noqa_makes_the_next_run_clean_and_only_adds_comments(tmp_path):
    before = _tree(tmp_path)
    first = run_console_script("lint", "--no-cache", cwd=tmp_path, timeout=120)
    assert first.code == 1
    flagged = len(first.lines())
    assert flagged == 10, first.out

    done = run_console_script(
        "lint", "--no-cache", "--add-noqa=adopted in 2026", cwd=tmp_path, timeout=120
    )
    assert done.code == 0, (done.out, done.err)
    assert "added 10 noqa comment(s) to 5 files" in done.err

    after = run_console_script("lint", "--no-cache", cwd=tmp_path, timeout=120)
    assert (after.code, after.out) == (0, ""), after.out
    for name, data in before.items():
        new = (tmp_path / name).read_bytes()
        added = _insertions(data, new)
        assert all(ADDED.match(text) for text in added), (name, added)
        assert (name == "pkg/clean.py") == (added == []), name
    # Line endings, BOM, the coding cookie and an executable bit survive.
    assert (tmp_path / "pkg/crlf.py").read_bytes().count(b"\r\n") == 4
    assert (tmp_path / "pkg/bom.py").read_bytes().startswith(b"\xef\xbb\xbf")
    assert "été".encode("latin-1") in (tmp_path / "pkg/latin.py").read_bytes()
    assert stat.S_IMODE((tmp_path / "pkg/two.py").stat().st_mode) == 0o755
    assert not list(tmp_path.rglob(".*.tmp-*"))


def test_comments_go_where_they_are_honoured(tmp_path):
    _tree(tmp_path)
    run_console_script("lint", "--no-cache", "--add-noqa", cwd=tmp_path, timeout=120)
    lines = (tmp_path / "pkg/shapes.py").read_text().splitlines()
    assert lines[6] == "    grads = jnp.nan_to_num(grads)   # noqa: NZ101"  # trailing spaces kept
    assert lines[7] == "    other = jnp.nan_to_num(  # noqa: NZ101"  # first line of a call
    assert lines[9] == "    )  # keep: shape of the batch"
    assert lines[10] == "    more = jnp.nan_to_num(grads)  # noqa: E501, NZ101 a long line"
    # The first line ends inside a string, so the statement's last line gets it.
    assert lines[11] == '    last = jnp.nan_to_num(grads, nan="""'
    assert lines[13] == '    """)  # noqa: NZ101'
    # A backslash-continued line cannot hold a comment.
    assert lines[14] == "    joined = \\"
    assert lines[15] == "        jnp.nan_to_num(grads)  # noqa: NZ101"


def test_a_second_add_noqa_changes_nothing(tmp_path):
    _tree(tmp_path)
    run_console_script("lint", "--no-cache", "--add-noqa=why", cwd=tmp_path, timeout=120)
    once = {p: p.read_bytes() for p in tmp_path.rglob("*.py")}
    again = run_console_script("lint", "--no-cache", "--add-noqa=why", cwd=tmp_path, timeout=120)
    assert again.code == 0
    assert "added 0 noqa comment(s) to 0 files" in again.err
    assert {p: p.read_bytes() for p in tmp_path.rglob("*.py")} == once


def test_with_require_reason_the_reason_is_required_and_then_honoured(tmp_path):
    write(tmp_path / "train.py", BAD_SOURCE)
    refused = run_console_script(
        "lint", "--require-reason", "--add-noqa", cwd=tmp_path, timeout=120
    )
    assert refused.code == 2
    assert "--add-noqa=REASON" in refused.err
    assert (tmp_path / "train.py").read_text() == BAD_SOURCE
    run_console_script(
        "lint", "--require-reason", "--add-noqa=padded rows", cwd=tmp_path, timeout=120
    )
    strict = run_console_script("lint", "--require-reason", cwd=tmp_path, timeout=120)
    assert (strict.code, strict.out) == (0, "")


def test_a_reason_merged_into_a_comment_without_one(tmp_path):
    source = BAD_SOURCE.replace("jnp.nan_to_num(grads)", "jnp.nan_to_num(grads)  # noqa: NZ101")
    write(tmp_path / "train.py", source)
    before = run_console_script("lint", "--require-reason", cwd=tmp_path, timeout=120)
    assert {line.split()[1] for line in before.lines()} == {"NZ002", "NZ101"}
    added = run_console_script(
        "lint", "--require-reason", "--add-noqa=padded rows", cwd=tmp_path, timeout=120
    )
    assert (added.code, added.out) == (0, ""), added.err
    text = (tmp_path / "train.py").read_text()
    assert "jnp.nan_to_num(grads)  # noqa: NZ101 padded rows\n" in text
    strict = run_console_script("lint", "--require-reason", cwd=tmp_path, timeout=120)
    assert (strict.code, strict.out) == (0, "")


def test_a_file_that_cannot_take_the_reason_is_left_untouched(tmp_path):
    """A reason the file's declared encoding cannot hold: said, file unchanged, exit 1."""
    files = _tree(tmp_path)
    result = run_console_script(
        "lint", "--no-cache", "--add-noqa=ünïcödé ✓", cwd=tmp_path, timeout=120
    )
    assert result.code == 1
    assert "pkg/latin.py: no # noqa added: the commented file would not be valid" in result.err
    assert (tmp_path / "pkg/latin.py").read_bytes() == files["pkg/latin.py"]
    assert (tmp_path / "pkg/crlf.py").read_bytes() != files["pkg/crlf.py"]
    assert not list(tmp_path.rglob(".*.tmp-*"))


def test_stdin_cannot_be_rewritten(tmp_path):
    result = run_console_script(
        "lint", "--add-noqa", "-", cwd=tmp_path, stdin=BAD_SOURCE.encode(), timeout=60
    )
    assert result.code == 2
    assert "standard input" in result.err


def test_findings_about_comments_are_left_for_a_person(tmp_path):
    source = BAD_SOURCE.replace("return grads", "return grads  # noqa: NZ999")
    write(tmp_path / "train.py", source)
    result = run_console_script("lint", "--add-noqa", cwd=tmp_path, timeout=120)
    assert result.code == 1
    assert "NZ003" in result.out and "fix it by hand" in result.out
    assert "return grads  # noqa: NZ999\n" in (tmp_path / "train.py").read_text()


@pytest.mark.parametrize(
    ("line", "code", "expected"),
    [
        ("x = f(g)\n", "NZ101", "x = f(g)  # noqa: NZ101\n"),
        ("x = f(g)  # noqa: NZ201 why\n", "NZ101", "x = f(g)  # noqa: NZ201, NZ101 why\n"),
        ("x = f(g)  # noqa:E501,W291\n", "NZ101", "x = f(g)  # noqa:E501, NZ101,W291\n"),
        ("x = f(g)  # type: ignore\n", "NZ101", "x = f(g)  # type: ignore  # noqa: NZ101\n"),
        ("x = f(g)\t\n", "NZ101", "x = f(g)\t # noqa: NZ101\n"),
    ],
)
def test_annotate_one_line(line, code, expected):
    text, placed, left = annotate(line, [Finding("a.py", 1, 5, code, "m", 1)])
    assert (text, placed, left) == (expected, 1, [])


def test_a_bare_add_noqa_never_takes_the_path_after_it_as_its_reason(tmp_path):
    write(tmp_path / "src" / "train.py", BAD_SOURCE)
    write(tmp_path / "other" / "train.py", BAD_SOURCE)
    result = run_console_script("lint", "--add-noqa", "src", cwd=tmp_path, timeout=120)
    assert result.code == 0, result.err
    assert "jnp.nan_to_num(grads)  # noqa: NZ101\n" in (tmp_path / "src/train.py").read_text()
    assert (tmp_path / "other" / "train.py").read_text() == BAD_SOURCE


@pytest.mark.parametrize("reason", ["fp16", "NZ5 later", "py311, migration"])
def test_a_reason_that_would_read_as_codes_is_refused(tmp_path, reason):
    """``# noqa: NZ101 fp16`` would name a code FP16 and carry no reason at all."""
    write(tmp_path / "train.py", BAD_SOURCE)
    result = run_console_script("lint", f"--add-noqa={reason}", cwd=tmp_path, timeout=60)
    assert result.code == 2 and "would be read as codes" in result.err
    assert (tmp_path / "train.py").read_text() == BAD_SOURCE
