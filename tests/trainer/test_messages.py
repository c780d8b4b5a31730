"""Every refusal of ``nozero-train`` names its flag, file, column or row, and leaves nothing.

Each case runs the real entry point (``main(argv)``) in this process on real shards and
checks the exact message a user sees, and that no run directory or checkpoint is left.
"""

from __future__ import annotations

import re
import shutil

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from nozero_trainer.cli import build_parser, main

from .conftest import DIM, random_rows, write_shard


def _run(capsys, *args):
    """Exit status and stderr of ``nozero-train ARGS`` (argparse's SystemExit included)."""
    capsys.readouterr()
    try:
        code = main([str(a) for a in args])
    except SystemExit as exit_:
        code = exit_.code
    return code, capsys.readouterr().err


def _leftovers(tmp_path, *keep):
    return sorted(p.name for p in tmp_path.iterdir() if p.name not in keep)


def test_a_fractional_step_count_names_the_flag_and_what_it_expects(
    synthetic_dir, tmp_path, capsys
):
    code, err = _run(
        capsys, "train", "--data", synthetic_dir, "--out", tmp_path / "r", "--steps", "10.5"
    )
    assert code == 2
    assert err == "nozero-train: error: --steps: expected an integer, got '10.5'\n"
    assert _leftovers(tmp_path) == []


def test_a_bad_number_names_the_flag(synthetic_dir, tmp_path, capsys):
    code, err = _run(
        capsys, "train", "--data", synthetic_dir, "--out", tmp_path / "r", "--peak-lr", "fast"
    )
    assert code == 2
    assert err == "nozero-train: error: --peak-lr: expected a number, got 'fast'\n"
    assert _leftovers(tmp_path) == []


def test_make_data_with_too_few_rows_names_the_flag(tmp_path, capsys):
    code, err = _run(capsys, "make-data", tmp_path / "d", "--rows", "5", "--dim", "4")
    assert code == 2
    assert err == "nozero-train: error: --rows: must be at least 10 (rows in all), got 5\n"
    assert _leftovers(tmp_path) == []


def test_make_data_reports_every_bad_flag_at_once(tmp_path, capsys):
    code, err = _run(
        capsys, "make-data", tmp_path / "d", "--rows", "5", "--dim", "0", "--shards", "0"
    )
    assert code == 2
    assert err.splitlines() == [
        "nozero-train: error: 3 bad settings:",
        "  --rows: must be at least 10 (rows in all), got 5",
        "  --dim: must be at least 1 (embedding width), got 0",
        "  --shards: must be at least 1 (shards per split), got 0",
    ]
    assert _leftovers(tmp_path) == []


def test_demo_with_too_few_rows_names_the_flag_before_writing_anything(tmp_path, capsys):
    code, err = _run(capsys, "demo", "--rows", "9", "--out", tmp_path / "run")
    assert code == 2
    assert err == "nozero-train: error: --rows: must be at least 10 (rows in all), got 9\n"
    assert _leftovers(tmp_path) == []


def test_a_mistyped_train_flag_shows_the_usage_of_train(synthetic_dir, tmp_path, capsys):
    code, err = _run(
        capsys, "train", "--data", synthetic_dir, "--out", tmp_path / "r", "--stepz", "10"
    )
    assert code == 2
    assert err.startswith("usage: nozero-train train [-h] --data DATA --out OUT")
    assert err.endswith("nozero-train train: error: unrecognized arguments: --stepz 10\n")
    assert _leftovers(tmp_path) == []


def test_postmortem_of_a_directory_that_does_not_exist_says_so(tmp_path, capsys):
    missing = tmp_path / "nowhere"
    code, err = _run(capsys, "postmortem", missing)
    assert code == 2
    assert err == f"nozero-train: error: {missing}: no such run directory or post-mortem bundle\n"
    assert _leftovers(tmp_path) == []


def _every_help():
    parser = build_parser()
    subcommands = parser._subparsers._group_actions[0].choices
    return [parser.format_help(), *(sub.format_help() for sub in subcommands.values())]


def test_help_has_no_markup():
    for text in _every_help():
        assert not re.search(r"``|:(data|func|mod|class|meth):`", text), text


def test_the_no_class_weighting_help_says_what_the_flag_does():
    train = build_parser()._subparsers._group_actions[0].choices["train"]
    [action] = [a for a in train._actions if "--no-class-weighting" in a.option_strings]
    assert action.help == (
        "weigh every head equally (default: each head by its class-balanced weight)"
    )


def _copy(synthetic_dir, tmp_path):
    data = tmp_path / "data"
    shutil.copytree(synthetic_dir, data)
    return data


def test_a_null_user_id_names_the_file_column_and_row(synthetic_dir, tmp_path, capsys):
    data = _copy(synthetic_dir, tmp_path)
    shard = sorted((data / "train").glob("*.parquet"))[1]
    table = pq.read_table(shard)
    ids = table["user_id"].to_pylist()
    ids[7] = None
    pq.write_table(table.set_column(0, "user_id", pa.array(ids, pa.int64())), shard)
    code, err = _run(capsys, "train", "--data", data, "--out", tmp_path / "r", "--steps", "4")
    assert code == 2
    assert err.splitlines()[-1] == (
        f"nozero-train: error: {shard}: column 'user_id' is null at row 7"
    )
    assert _leftovers(tmp_path, "data") == []


def test_a_null_label_list_of_a_kept_row_names_its_row_in_the_file(tmp_path, capsys, rng):
    rows = random_rows(rng, 12, 0)
    rows[4]["label_strength"] = "weak"
    rows[4]["labels"] = None  # a dropped row may lack labels
    rows[9]["labels"] = None
    rows[9]["cls"] = [0.5] * DIM  # finite and strong: kept, so its labels are needed
    rows[9]["label_strength"] = "strong"
    shard = write_shard(tmp_path / "d" / "train" / "part-0.parquet", rows)
    write_shard(tmp_path / "d" / "holdout" / "part-0.parquet", random_rows(rng, 12, 100))
    code, err = _run(capsys, "train", "--data", tmp_path / "d", "--out", tmp_path / "r")
    assert code == 2
    assert err.splitlines()[-1] == f"nozero-train: error: {shard}: column 'labels' is null at row 9"
    assert _leftovers(tmp_path, "d") == []


@pytest.mark.parametrize("split", ["holdout", "train"])
def test_a_split_with_no_finite_row_is_refused_before_training(
    synthetic_dir, tmp_path, capsys, split
):
    data = _copy(synthetic_dir, tmp_path)
    read = dropped_non_strong = 0
    shards = sorted((data / split).glob("*.parquet"))
    for shard in shards:
        table = pq.read_table(shard)
        widths = [len(row) for row in table["cls"].to_pylist()]
        poisoned = pa.array([[float("nan")] * w for w in widths], pa.list_(pa.float32()))
        index = table.column_names.index("cls")
        pq.write_table(table.set_column(index, "cls", poisoned), shard)
        read += table.num_rows
        dropped_non_strong += sum(s != "strong" for s in table["label_strength"].to_pylist())
    code, err = _run(capsys, "train", "--data", data, "--out", tmp_path / "r", "--steps", "4")
    assert code == 2
    purpose = "evaluate on" if split == "holdout" else "train on"
    assert err.splitlines()[-1] == (
        f"nozero-train: error: {data / split}: kept 0 of {read} rows from {len(shards)} "
        f"shard(s); dropped {dropped_non_strong} non-strong, {read - dropped_non_strong} "
        f"with non-finite cls: no rows left to {purpose}"
    )
    assert _leftovers(tmp_path, "data") == []
