"""The CLI's argument contract: `--config` before or after the command (CONTRACT.md: every command takes it)."""

import pytest

from hygraph.cli import _parser, main


@pytest.mark.parametrize("argv", [
    ["--config", "a.yaml", "index", "--corpus", "c.jsonl", "--index-dir", "i"],
    ["index", "--config", "a.yaml", "--corpus", "c.jsonl", "--index-dir", "i"],
    ["index", "--corpus", "c.jsonl", "--index-dir", "i", "--config", "a.yaml"],
])
def test_config_is_taken_before_or_after_the_command(argv: list[str]) -> None:
    assert _parser().parse_args(argv).config == "a.yaml"


def test_config_after_the_command_overrides_the_one_before() -> None:
    args = _parser().parse_args(["--config", "a.yaml", "query", "--config", "b.yaml", "--index-dir", "i", "q"])
    assert args.config == "b.yaml"


def test_no_config_means_the_default() -> None:
    assert _parser().parse_args(["delete", "--index-dir", "i", "--ids", "d1"]).config is None


def test_a_missing_config_after_the_command_exits_2_naming_it(tmp_path, capsys) -> None:
    missing = tmp_path / "nope.yaml"
    assert main(["index", "--config", str(missing), "--corpus", "c.jsonl", "--index-dir", str(tmp_path)]) == 2
    assert str(missing) in capsys.readouterr().err
