"""``[tool.nozero]`` in pyproject.toml, through the command line."""

from __future__ import annotations

from pathlib import Path

import pytest

from nozero.lint.config import ConfigError, find_config, load_settings

from .conftest import (
    BAD_LINE,
    BAD_SOURCE,
    GOOD_SOURCE,
    SYNTAX_ERROR_SOURCE,
    run_console_script,
    write,
)


def pyproject(directory: Path, body: str) -> Path:
    return write(directory / "pyproject.toml", f"[project]\nname = 'demo'\n\n{body}")


def reported(result) -> list[tuple[str, str]]:
    """(path, code) of each finding line."""
    return sorted((line.split(":")[0], line.split()[1]) for line in result.lines())


def test_nearest_pyproject_with_a_nozero_table_is_found_upward(tmp_path: Path):
    outer = pyproject(tmp_path, "[tool.nozero]\nignore = ['NZ001']\n")
    pyproject(tmp_path / "pkg", "[tool.other]\nx = 1\n")  # no [tool.nozero]: passed over
    (tmp_path / "pkg" / "src").mkdir()
    assert find_config(tmp_path / "pkg" / "src") == outer
    assert load_settings(tmp_path / "pkg" / "src").project_root == tmp_path


def test_config_select_and_ignore_apply(lint, tmp_path: Path, nan_code: str):
    write(tmp_path / "train.py", BAD_SOURCE)
    write(tmp_path / "broken.py", SYNTAX_ERROR_SOURCE)
    pyproject(tmp_path, "[tool.nozero]\nignore = ['NZ001']\n")
    assert reported(lint()) == [("train.py", nan_code)]
    pyproject(tmp_path, "[tool.nozero]\nselect = ['NZ001']\n")
    assert reported(lint()) == [("broken.py", "NZ001")]


def test_command_line_select_replaces_and_ignore_adds(lint, tmp_path: Path, nan_code: str):
    write(tmp_path / "train.py", BAD_SOURCE)
    write(tmp_path / "broken.py", SYNTAX_ERROR_SOURCE)
    pyproject(tmp_path, "[tool.nozero]\nselect = ['NZ001']\n")
    assert reported(lint("--select", nan_code)) == [("train.py", nan_code)]
    pyproject(tmp_path, f"[tool.nozero]\nignore = ['{nan_code}']\n")
    result = lint("--ignore", "NZ001")
    assert (result.code, result.out) == (0, "")


def test_config_is_found_from_a_subdirectory_run(lint, tmp_path: Path):
    write(tmp_path / "pkg" / "broken.py", SYNTAX_ERROR_SOURCE)
    pyproject(tmp_path, "[tool.nozero]\nignore = ['NZ001']\n")
    result = lint("pkg")
    assert (result.code, result.out) == (0, "")


def test_per_file_ignores_drop_codes_for_matching_files(lint, tmp_path: Path, nan_code: str):
    write(tmp_path / "src" / "train.py", BAD_SOURCE)
    write(tmp_path / "tests" / "helpers.py", BAD_SOURCE)
    write(tmp_path / "tests" / "deep" / "more.py", BAD_SOURCE)
    write(tmp_path / "scratch.py", BAD_SOURCE)
    pyproject(
        tmp_path,
        "[tool.nozero.per-file-ignores]\n"
        f"'tests/' = ['{nan_code}']\n"
        f"'scratch.py' = ['{nan_code[:3]}']\n",
    )
    assert reported(lint()) == [("src/train.py", nan_code)]
    # Per-file ignores hold for a file named on its own, and for stdin's filename.
    assert reported(lint("tests/deep/more.py")) == []
    for name, expected in (("tests/t.py", ""), ("src/t.py", f"src/t.py:{BAD_LINE}:")):
        result = run_console_script(
            "lint", "-", "--stdin-filename", name, cwd=tmp_path, stdin=BAD_SOURCE.encode()
        )
        assert result.out.startswith(expected) and bool(result.out) == bool(expected)


def test_exclude_replaces_the_defaults_and_extend_exclude_adds(lint, tmp_path: Path):
    write(tmp_path / "build" / "gen.py", SYNTAX_ERROR_SOURCE)
    write(tmp_path / "vendored" / "lib.py", SYNTAX_ERROR_SOURCE)
    write(tmp_path / "src" / "ok.py", GOOD_SOURCE)
    pyproject(tmp_path, "[tool.nozero]\nextend-exclude = ['vendored/']\n")
    assert reported(lint()) == []  # build/ by default, vendored/ by extension
    pyproject(tmp_path, "[tool.nozero]\nexclude = ['vendored']\n")
    assert reported(lint()) == [("build/gen.py", "NZ001")]


def test_exclude_holds_for_files_named_by_pre_commit(lint, tmp_path: Path):
    write(tmp_path / "vendored" / "lib.py", SYNTAX_ERROR_SOURCE)
    pyproject(tmp_path, "[tool.nozero]\nextend-exclude = ['vendored/']\n")
    result = lint("vendored/lib.py")
    assert (result.code, result.out) == (0, "")
    # Never silently: the file is named on stderr, with the setting that dropped it.
    said = "vendored/lib.py: excluded by the default excludes or [tool.nozero] extend-exclude in"
    assert said in result.err
    assert "1 finding" not in result.err and "0 files checked" in result.err
    # Naming its directory lints it.
    assert reported(lint("vendored")) == [("vendored/lib.py", "NZ001")]


def test_an_explicit_config_file_is_used(lint, tmp_path: Path):
    write(tmp_path / "broken.py", SYNTAX_ERROR_SOURCE)
    other = write(tmp_path / "conf" / "pyproject.toml", "[tool.nozero]\nignore = ['NZ001']\n")
    assert lint().code == 1
    assert lint("--config", str(other)).code == 0


@pytest.mark.parametrize(
    ("body", "named"),
    [
        ("[tool.nozero]\nselct = ['NZ001']\n", "'selct'"),
        ("[tool.nozero]\nselect = 'NZ001'\n", "select"),
        ("[tool.nozero]\nignore = [1]\n", "ignore"),
        ("[tool.nozero]\nexclude = 'build'\n", "exclude"),
        ("[tool.nozero]\nper-file-ignores = ['x']\n", "per-file-ignores"),
        ("[tool.nozero.per-file-ignores]\n'a.py' = 'NZ001'\n", "per-file-ignores 'a.py'"),
        ("[tool.nozero]\nselect = ['NZ999']\n", "select"),
        ("[tool.nozero]\nignore = ['XX']\n", "ignore"),
        ("[tool.nozero.per-file-ignores]\n'a.py' = ['NZ999']\n", "per-file-ignores 'a.py'"),
        ("[tool.nozero\nselect = []\n", "invalid TOML"),
    ],
)
def test_bad_configuration_is_a_clear_error_naming_key_and_file(
    lint, tmp_path: Path, body: str, named: str
):
    write(tmp_path / "a.py", GOOD_SOURCE)
    config = pyproject(tmp_path, body)
    result = lint()
    assert result.code == 2
    assert result.out == ""
    assert str(config) in result.err
    assert named in result.err


def test_bad_configuration_raises_config_error_from_the_loader(tmp_path: Path):
    pyproject(tmp_path, "[tool.nozero]\nextend-exclude = [3]\n")
    with pytest.raises(ConfigError, match="extend-exclude"):
        load_settings(tmp_path)


def test_all_and_prefixes_select_groups_of_codes(lint, tmp_path: Path, nan_code: str):
    write(tmp_path / "train.py", BAD_SOURCE)
    write(tmp_path / "broken.py", SYNTAX_ERROR_SOURCE)
    pyproject(tmp_path, "[tool.nozero]\nselect = ['ALL']\nignore = ['NZ0']\n")
    assert reported(lint()) == [("train.py", nan_code)]


def test_every_configuration_error_is_reported_at_once(tmp_path: Path):
    """Bad keys and wrongly typed or unknown values, each on its own line naming the key
    and the file; nothing is linted, exit 2."""
    write(tmp_path / "train.py", BAD_SOURCE)
    config = pyproject(
        tmp_path,
        "[tool.nozero]\n"
        "selct = ['NZ101']\n"
        "exclde = ['build']\n"
        "ignore = 'NZ406'\n"
        "select = ['NZ101', 'NZ999']\n"
        "exclude = [3]\n"
        "[tool.nozero.per-file-ignores]\n"
        "'tests/*' = 'NZ1'\n"
        "'gen/*' = ['NZ42']\n",
    )
    result = run_console_script("lint", cwd=tmp_path, timeout=60)
    assert (result.code, result.out) == (2, "")
    errors = result.err.splitlines()
    assert all(line.startswith("nozero: error: ") and str(config) in line for line in errors)
    expected = [
        "unknown key 'selct'",
        "unknown key 'exclde'",
        "ignore in",
        "'NZ406'",
        "select in",
        "'NZ999'",
        "exclude in",
        "per-file-ignores 'tests/*'",
        "per-file-ignores 'gen/*'",
    ]
    for fragment in expected:
        assert any(fragment in line for line in errors), (fragment, errors)
    assert len(errors) == 7, errors
