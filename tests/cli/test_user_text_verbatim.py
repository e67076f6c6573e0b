"""User text is printed as it is: Rich markup (``[b]``, ``[/]``) and emoji codes (``:100:``,
``:smile:``) in paths, file contents and override values are never interpreted, on success lines,
in tables and in error lines (the consoles of ``cgbench.cli.console`` read no markup at all)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from rich.table import Table
from typer.testing import CliRunner

from cgbench.cli.app import app
from cgbench.cli.console import make_console, print_error, print_warning, styled
from tests.helpers import one_error_line

runner = CliRunner()
ROOT = Path(__file__).resolve().parents[2]
SMALL = "workload.num_requests=8"
HOSTILE = "m[b]x:100::smile:[/]"  # a folder name: bold markup, two emoji codes, a closing tag



def test_the_consoles_print_markup_and_emoji_codes_literally(capsys):
    text = "[bold]a[/bold] [/] :100: :smile: [link=x]y"
    console = make_console()
    console.print(text)
    table = Table(title=f"title {text}")
    table.add_column(f"col {text}")
    table.add_row(f"cell {text}")
    console.print(table)
    shown = capsys.readouterr().out
    assert shown.count(text) == 4, shown
    assert "💯" not in shown and "😄" not in shown


def test_error_and_warning_lines_are_verbatim_with_our_own_prefix_styled(capsys):
    print_error("bad2.jsonl:100: invalid JSON [/] [b]")
    print_warning(":smile: [red]x[/red]")
    err = capsys.readouterr().err
    assert err == "error: bad2.jsonl:100: invalid JSON [/] [b]\nwarning: :smile: [red]x[/red]\n"
    assert styled("[b]", "bold").plain == "[b]"


def test_run_success_line_names_an_out_path_with_markup_and_emoji_codes(tmp_path):
    folder = tmp_path / HOSTILE
    folder.mkdir(parents=True)
    out = folder / "r[b]:100:.json"
    r = runner.invoke(app, ["run", SMALL, f"out_dir={tmp_path / 'results'}", "--out", str(out)])
    assert r.exit_code == 0, r.output
    assert out.is_file() and json.loads(out.read_text())["metrics"]["outcome"] == "completed"
    assert f"result: {out}\n" in r.stderr, r.stderr
    assert "💯" not in r.output and "😄" not in r.output


def test_an_invalid_trace_line_100_is_named_with_its_colons_not_an_emoji(tmp_path):
    folder = tmp_path / HOSTILE
    folder.mkdir(parents=True)
    trace = folder / "bad2.jsonl"
    good = (ROOT / "examples" / "traces" / "small.jsonl").read_text().splitlines()[0]
    trace.write_text("\n".join([good] * 99 + ["{not json"]) + "\n")
    r = runner.invoke(app, ["run", "workload=trace", f"workload.trace='{trace}'", f"out_dir={tmp_path / 'results'}"])
    line = one_error_line(r, f"{trace}:100", "invalid JSON")
    assert "💯" not in line and "😄" not in line


def test_an_override_value_with_markup_is_quoted_verbatim(tmp_path):
    r = runner.invoke(app, ["run", "engine.max_requests='[b]:100:[/]'", f"out_dir={tmp_path}"])
    one_error_line(r, "engine.max_requests", "[b]:100:[/]")


@pytest.mark.slow
def test_grid_from_a_config_folder_whose_path_has_emoji_codes(tmp_path):
    folder = tmp_path / "x:100::smile:"  # (brackets in a search path: Hydra's override grammar refuses them)
    (folder / "cg").mkdir(parents=True)
    (folder / "cg" / "mine.yaml").write_text("kind: explicit\ngraphs:\n  - [256, 1, 0]\n  - [64, 0, 64]\n")
    r = runner.invoke(app, ["grid", "--config-dir", str(folder), "cg=mine"])
    assert r.exit_code == 0, r.output
    assert "Captured graphs" in r.stdout and "Capture cost" in r.stdout
    missing = tmp_path / "no[b]:smile:[/]"
    r = runner.invoke(app, ["grid", "--config-dir", str(missing)])
    one_error_line(r, f"--config-dir: {missing}: no such folder")


def test_schedule_names_a_state_file_with_markup_in_its_summary_and_errors(tmp_path):
    folder = tmp_path / HOSTILE
    folder.mkdir(parents=True)
    state = folder / "s[b]:100:.json"
    shutil.copy(ROOT / "tests" / "states" / "11_2_round1.json", state)
    r = runner.invoke(app, ["schedule", str(state)])
    assert r.exit_code == 0, r.output
    assert f"{state}: start of round" in r.stdout.replace("\n", "")
    bad = folder / "bad[b]:100:.json"
    bad.write_text("{")
    r = runner.invoke(app, ["schedule", str(bad)])
    one_error_line(r, str(bad), "not valid JSON")


def test_run_help_lists_a_users_option_named_like_markup_as_it_is(monkeypatch):
    from rich.text import Text

    import cgbench.cli.app as app_module
    import cgbench.config.paths as paths

    monkeypatch.setattr(paths, "group_options", lambda group, config_dirs=(): ["[b]mine", "default"])
    epilog = app_module._groups_epilog()  # Rich markup, as Typer renders the help
    assert "model: [b]mine, default" in Text.from_markup(epilog).plain
