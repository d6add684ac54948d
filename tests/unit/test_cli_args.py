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


def test_query_filter_is_parsed_as_json_under_the_filter_rules(capsys) -> None:
    args = _parser().parse_args(["query", "--index-dir", "i", "--filter", '{"lang": ["en", "fr"], "n": 1.0}', "q"])
    assert args.filter == {"lang": ["en", "fr"], "n": 1.0}
    for bad, said in [('{"lang": {"$ne": "en"}}', "filter.lang: an object"), ("lang=en", "not a JSON object"),
                      ('{"n": NaN}', "NaN is not JSON"), ('["en"]', "filter: must be an object")]:
        with pytest.raises(SystemExit) as exit_:
            _parser().parse_args(["query", "--index-dir", "i", "--filter", bad, "q"])
        assert exit_.value.code == 2 and said in capsys.readouterr().err, bad
