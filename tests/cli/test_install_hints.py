"""Install hints are right for how cgbench is installed: an editable install of the checkout it
runs from (``pip install -e '.[plot]'``), the extra from the index for an installed wheel
(``pip install 'cgbench[plot]'``; tests/test_wheel.py runs that case for real). One function
(``cgbench.results.extras.install_hint``) makes every hint."""

from __future__ import annotations

import sys
from pathlib import Path

from typer.testing import CliRunner

from cgbench.cli.app import app
from cgbench.results.document import source_checkout
from cgbench.results.extras import OPTIONAL_DEPS, install_hint, needs

runner = CliRunner()
ROOT = Path(__file__).resolve().parents[2]


def test_a_checkout_gets_an_editable_install_of_itself(tmp_path):
    checkout = tmp_path / "my cgbench"
    checkout.mkdir()
    assert install_hint("plot", checkout=checkout, cwd=checkout) == "pip install -e '.[plot]'"
    assert install_hint("torch", checkout=checkout, cwd=tmp_path) == f"pip install -e '{checkout}[torch]'"


def test_an_installed_copy_gets_the_extra_from_the_index(monkeypatch):
    import cgbench.results.document as document

    monkeypatch.setattr(document, "source_checkout", lambda: None)
    assert install_hint("plot") == "pip install 'cgbench[plot]'"
    assert needs("cgbench plot", "matplotlib") == ("cgbench plot needs matplotlib, which is not installed: "
                                                  "pip install 'cgbench[plot]'")


def test_this_checkout_is_one_and_its_hint_says_so(monkeypatch):
    assert source_checkout() == ROOT
    monkeypatch.chdir(ROOT)
    assert install_hint("plot") == "pip install -e '.[plot]'"


def test_every_missing_optional_module_names_the_checkout_install(tmp_path, monkeypatch):
    """plot, advise --plot and a module missing deep inside a command all go through the one hint."""
    monkeypatch.chdir(ROOT)
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    result = tmp_path / "r.json"
    r = runner.invoke(app, ["run", "workload.num_requests=8", f"out_dir={tmp_path}", "--out", str(result)])
    assert r.exit_code == 0, r.output
    r = runner.invoke(app, ["plot", str(result), "--out", str(tmp_path / "plots")])
    assert r.exit_code == 2 and r.stderr.strip() == (
        "error: cgbench plot needs matplotlib, which is not installed: pip install -e '.[plot]'"), r.stderr
    assert not (tmp_path / "plots").exists()
    r = runner.invoke(app, ["advise", "workload.num_requests=8", "--budget-graphs", "4", "--plot",
                            "--out", str(tmp_path / "adv")])
    assert r.exit_code == 2 and "cgbench advise --plot needs matplotlib" in r.stderr
    assert "pip install -e '.[plot]'" in r.stderr and not (tmp_path / "adv").exists()
    assert set(OPTIONAL_DEPS.values()) <= set(_extras())  # each hint names an extra that exists


def _extras() -> list[str]:
    import tomllib

    return list(tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"])
