"""``load_config`` composes through one process-wide ``Composer`` for the config trees as they are:
it gives what a fresh Hydra composition gives (configs and errors), and an edited, added or removed
option file, or another ``$CGBENCH_CONFIG_DIR``, is seen on the next call."""

from __future__ import annotations

import os
from dataclasses import asdict

import pytest

from cgbench.config.compose import load_config, load_config_fresh
from cgbench.config.schema import ConfigError

GOOD = [
    [],
    ["model=transformer", "cg=dense", "seed=3"],
    ["workload=chat", "workload.arrival.rate=12", "workload.num_requests=32", "++seed=4"],
    ["cg=explicit", "cg.graphs=[[8,1,0],[16,2,1]]", "cg.all_prefills=false"],
    ["policy=wait_timeout", "policy.wait_timeout.iters=7", "engine.chunked_prefill=true"],
]
BAD = [
    ["workload.num_requests=abc"],
    ["workload.num_requests=0"],
    ["workload.nope=1"],
    ["model=nope"],
    ["policy=budget", "policy.wait_timeout.iters=3"],
    ["cg.graphs=[[8,1,0]"],
]


@pytest.mark.slow
def test_every_config_equals_a_fresh_composition_twice_over():
    for overrides in GOOD * 2:  # the second round comes from the cache
        assert asdict(load_config(overrides)) == asdict(load_config_fresh(overrides)), overrides


@pytest.mark.slow
@pytest.mark.parametrize("overrides", BAD)
def test_every_error_is_the_fresh_compositions(overrides):
    load_config(["seed=1"])  # a warm cache
    with pytest.raises(ConfigError) as fresh:
        load_config_fresh(overrides)
    with pytest.raises(ConfigError) as shared:
        load_config(overrides)
    assert str(shared.value) == str(fresh.value)


def _model_file(folder, name: str, hidden: int) -> None:
    (folder / "model").mkdir(parents=True, exist_ok=True)
    (folder / "model" / f"{name}.yaml").write_text(f"defaults: [hybrid]\nname: {name}\nhidden_size: {hidden}\n")


@pytest.mark.slow
def test_an_edited_added_or_removed_option_file_is_seen(tmp_path, monkeypatch):
    conf = tmp_path / "userconf"
    _model_file(conf, "mine", 4608)
    monkeypatch.setenv("CGBENCH_CONFIG_DIR", str(conf))
    assert load_config(["model=mine"]).model.hidden_size == 4608
    path = conf / "model" / "mine.yaml"
    before = path.stat().st_mtime_ns
    _model_file(conf, "mine", 4609)  # the same size: only the modification time tells
    os.utime(path, ns=(before + 1_000_000, before + 1_000_000))  # whatever the clock's granularity
    assert load_config(["model=mine"]).model.hidden_size == 4609
    _model_file(conf, "other", 5120)
    assert load_config(["model=other"]).model.hidden_size == 5120
    path.unlink()
    with pytest.raises(ConfigError, match="mine"):
        load_config(["model=mine"])


@pytest.mark.slow
def test_another_config_folder_is_seen(tmp_path, monkeypatch):
    a, b = tmp_path / "a", tmp_path / "b"
    _model_file(a, "mine", 4608)
    _model_file(b, "mine", 6144)
    monkeypatch.setenv("CGBENCH_CONFIG_DIR", str(a))
    assert load_config(["model=mine"]).model.hidden_size == 4608
    monkeypatch.setenv("CGBENCH_CONFIG_DIR", str(b))
    assert load_config(["model=mine"]).model.hidden_size == 6144
    monkeypatch.delenv("CGBENCH_CONFIG_DIR")
    assert load_config(["model=mine"], config_dirs=[a]).model.hidden_size == 4608


def test_a_returned_config_is_the_callers_own():
    first = load_config(["seed=5"])
    first.engine.max_requests = 3  # a caller that edits its config does not edit the next one's
    assert load_config(["seed=5"]).engine.max_requests == load_config_fresh(["seed=5"]).engine.max_requests


@pytest.mark.slow
def test_a_bad_value_is_refused_from_the_cache_with_the_fresh_message(monkeypatch):
    """A validation or unread-key error of a config the quick path built is the fresh composition's
    own check on an equal config: no fresh composition is needed to give it."""
    import cgbench.config.compose as compose

    load_config(["seed=1"])  # a warm cache for the default selections
    fresh_calls = []
    real = compose._load_config
    monkeypatch.setattr(compose, "_load_config", lambda *a: fresh_calls.append(a) or real(*a))
    for bad in (["workload.num_requests=0"], ["policy.wait_timeout.iters=3"]):
        with pytest.raises(ConfigError) as shared:
            load_config(bad)
        with pytest.raises(ConfigError) as fresh:
            load_config_fresh(bad)
        assert str(shared.value) == str(fresh.value)
    assert len(fresh_calls) == 2  # the two load_config_fresh calls only
