"""User text that matplotlib would read as math (issue 44 class 7): a result file name or a model name
holding ``$...$`` is drawn as written by ``plot`` and ``report`` (``plots.load_pyplot`` turns the math
parser off for every figure), and a figure that fails to draw leaves no PNG (the set is drawn first)."""

from __future__ import annotations

import json
import shutil

import pytest
from typer.testing import CliRunner

from cgbench.cli.app import app

pytest.importorskip("matplotlib")
pytestmark = pytest.mark.slow
runner = CliRunner()
HOSTILE = ("$\\nosuch$", "$x^$", "a $b$ c $")


@pytest.fixture(scope="module")
def run_file(tmp_path_factory):
    d = tmp_path_factory.mktemp("run")
    r = runner.invoke(app, ["run", "workload.num_requests=12", "--trace", "--requests", "--out", str(d / "r.json")])
    assert r.exit_code == 0, r.output
    return d / "r.json"


@pytest.mark.parametrize("text", HOSTILE)
def test_math_in_a_file_name_or_a_model_name_is_drawn_as_written(run_file, tmp_path, text) -> None:
    named = tmp_path / f"run{text.replace('/', '_')}.json"
    shutil.copy(run_file, named)
    doc = json.loads(run_file.read_text())
    doc["config"]["model"]["name"] = text  # a hand-edited result: the name is only a label here
    model = tmp_path / "model.json"
    model.write_text(json.dumps(doc))
    for target in (named, model):
        r = runner.invoke(app, ["plot", str(target), "--out", str(tmp_path / "plots")])
        assert r.exit_code == 0, r.output
        r = runner.invoke(app, ["report", str(target), "--out", str(tmp_path / "r.html")])
        assert r.exit_code == 0, r.output


def test_a_figure_that_fails_to_draw_leaves_no_png_and_no_folder(run_file, tmp_path, monkeypatch) -> None:
    import cgbench.analysis.plots.run as plots_run

    def broken(plt, *args):
        raise RuntimeError("drawing failed")

    monkeypatch.setattr(plots_run, "queue_wait_figure", broken)  # the last of the three figures
    with pytest.raises(RuntimeError):
        from cgbench.analysis.plots.plot import plot_run

        plot_run(run_file, tmp_path / "plots")
    assert not (tmp_path / "plots").exists()
