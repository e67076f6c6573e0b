"""The commands' kept compositions (``cgbench.config.compose_cache``, read by ``cgbench.config.load``):
a config read back equals a fresh Hydra composition's (configs and errors), an edited option file or
another working directory is seen, nothing but a successful, environment-free, plug-in-free
composition is kept, a bad entry is composed afresh, and a read-back imports no Hydra."""

from __future__ import annotations

import os
import pickle
import subprocess
import sys
from dataclasses import asdict
from pathlib import Path

import pytest

from cgbench.config import compose_cache
from cgbench.config.compose import load_config_fresh
from cgbench.config.load import load_config
from cgbench.config.schema import ConfigError
from cgbench.user_cache import ENV_CACHE_DIR
from tests.config.test_shared_composer import BAD as SHARED_BAD
from tests.config.test_shared_composer import GOOD as SHARED_GOOD

ROOT = Path(__file__).resolve().parents[2]
GOOD = [*SHARED_GOOD, ["workload=trace"]]  # the in-process cache's cases, and a relative data path
BAD = SHARED_BAD


def _entries(folder: Path) -> list[Path]:
    return sorted(folder.glob("*.pickle")) if folder.is_dir() else []


@pytest.mark.slow
def test_a_config_read_back_equals_a_fresh_composition(cache, monkeypatch, found_by):
    found = found_by("read")
    for overrides in GOOD:
        first = load_config(overrides)
        again = load_config(overrides)
        assert asdict(first) == asdict(again) == asdict(load_config_fresh(overrides)), overrides
    assert found == [False, True] * len(GOOD)
    assert len(_entries(cache)) == len(GOOD)


@pytest.mark.slow
@pytest.mark.parametrize("overrides", BAD)
def test_an_error_is_the_fresh_compositions_and_nothing_is_kept(cache, overrides):
    with pytest.raises(ConfigError) as fresh:
        load_config_fresh(overrides)
    for _ in range(2):
        with pytest.raises(ConfigError) as kept:
            load_config(overrides)
        assert str(kept.value) == str(fresh.value)
    assert _entries(cache) == []


def test_checks_after_the_composition_run_on_a_config_read_back(cache, tmp_path, monkeypatch, found_by):
    """A kept composition is checked again: the trace it names is resolved against this working
    directory, and one that no longer exists is the fresh composition's error."""
    load_config(["workload=trace"])
    here = tmp_path / "elsewhere"
    (here / "examples" / "traces").mkdir(parents=True)
    (here / "examples" / "traces" / "small.jsonl").write_text((ROOT / "examples/traces/small.jsonl").read_text())
    monkeypatch.chdir(here)
    found = found_by("read")
    kept = load_config(["workload=trace"])
    assert found == [True]
    assert kept.workload.trace == "examples/traces/small.jsonl"  # relative: it exists here
    assert asdict(kept) == asdict(load_config_fresh(["workload=trace"]))


@pytest.mark.slow
def test_an_edited_option_file_is_a_new_composition(cache, tmp_path, monkeypatch):
    conf = tmp_path / "userconf"
    (conf / "model").mkdir(parents=True)
    path = conf / "model" / "mine.yaml"
    path.write_text("defaults: [hybrid]\nname: mine\nhidden_size: 4608\n")
    monkeypatch.setenv("CGBENCH_CONFIG_DIR", str(conf))
    assert load_config(["model=mine"]).model.hidden_size == 4608
    path.write_text("defaults: [hybrid]\nname: mine\nhidden_size: 5120\n")
    os.utime(path, ns=(0, 0))  # the same time stamp as before would not hide the change either
    assert load_config(["model=mine"]).model.hidden_size == 5120
    assert len(_entries(cache)) == 2


def test_an_interpolation_is_not_kept(cache, monkeypatch):
    monkeypatch.setenv("CGBENCH_TEST_OUT", "somewhere")
    cfg = load_config(["out_dir=${oc.env:CGBENCH_TEST_OUT}"])
    assert cfg.out_dir == "somewhere"
    assert _entries(cache) == []


@pytest.mark.slow
def test_a_tree_read_back_is_the_composed_tree(cache, monkeypatch):
    """The sweep's compositions (its settings, each selection's base tree) are kept as trees: read
    back, the tree is Hydra's (the same values, types and struct flag), and a bad one is composed afresh."""
    from omegaconf import OmegaConf

    from cgbench.config.compose import compose_dict

    fresh = compose_dict(["workload=small"], resolve=False)
    kept = compose_dict(["workload=small"], resolve=False, kept=True)  # composed, and kept
    [entry] = sorted(cache.glob("*.tree"))
    back = compose_dict(["workload=small"], resolve=False, kept=True)
    for tree in (kept, back):
        assert OmegaConf.to_container(tree) == OmegaConf.to_container(fresh)
        assert OmegaConf.is_struct(tree) and OmegaConf.get_type(tree.engine) is OmegaConf.get_type(fresh.engine)
    OmegaConf.update(back, "seed", "5", merge=True)  # typed: the string becomes the int field's value
    assert back.seed == 5
    entry.write_bytes(pickle.dumps(_Planted()))
    assert OmegaConf.to_container(compose_dict(["workload=small"], resolve=False, kept=True)) == \
        OmegaConf.to_container(fresh)


def test_off_keeps_nothing(tmp_path, monkeypatch):
    monkeypatch.setenv(ENV_CACHE_DIR, "off")
    assert compose_cache.cache_dir() is None
    assert compose_cache.entry_key([], ()) is None
    assert asdict(load_config(["seed=5"])) == asdict(load_config_fresh(["seed=5"]))


def _the_entry(cache: Path) -> Path:
    load_config(["seed=6"])
    [entry] = _entries(cache)
    return entry


@pytest.mark.parametrize("content", [b"", b"\x80\x05truncated", pickle.dumps({"not": "a config"})])
def test_a_bad_entry_is_composed_afresh_and_replaced(cache, content):
    entry = _the_entry(cache)
    entry.write_bytes(content)
    assert asdict(load_config(["seed=6"])) == asdict(load_config_fresh(["seed=6"]))
    assert entry.read_bytes() != content  # replaced by the fresh composition


class _Planted:
    def __reduce__(self):
        return (os.remove, ("planted",))


def test_a_foreign_pickle_is_refused_not_run(cache, tmp_path):
    entry = _the_entry(cache)
    (tmp_path / "planted").write_text("still here")
    entry.write_bytes(pickle.dumps(_Planted()))
    assert load_config(["seed=6"]).seed == 6
    assert (tmp_path / "planted").read_text() == "still here"


def test_at_most_max_entries_the_oldest_go_first(cache, monkeypatch, found_by):
    monkeypatch.setattr(compose_cache, "MAX_ENTRIES", 2)
    for seed in (1, 2, 3):
        load_config([f"seed={seed}"])
    assert len(_entries(cache)) == 2
    found = found_by("read")
    load_config(["seed=1"])  # the oldest, removed
    load_config(["seed=3"])
    assert found == [False, True]


def test_an_unwritable_cache_only_costs_time(tmp_path, monkeypatch):
    blocker = tmp_path / "file"
    blocker.write_text("a file where the cache folder would be")
    monkeypatch.setenv(ENV_CACHE_DIR, str(blocker))
    assert load_config(["seed=7"]).seed == 7


@pytest.mark.slow
def test_a_config_read_back_imports_no_hydra(cache, tmp_path):
    code = ("import sys; from cgbench.config.load import load_config; cfg = load_config(['seed=8']); "
            "print(cfg.seed, sorted({m.split('.')[0] for m in sys.modules} & {'hydra', 'omegaconf', 'yaml'}))")
    env = {**os.environ, ENV_CACHE_DIR: str(cache.parent)}
    runs = [subprocess.run([sys.executable, "-c", code], env=env, cwd=tmp_path, capture_output=True, text=True,
                           check=True).stdout.split(maxsplit=1) for _ in range(2)]
    assert runs[0] == ["8", "['hydra', 'omegaconf', 'yaml']\n"]  # composed, and kept
    assert runs[1] == ["8", "[]\n"]  # read back: the model file is not read again (its bytes are in the key)


def test_an_edit_in_a_linked_group_folder_is_seen(cache, tmp_path, monkeypatch):
    """A group folder that is a link is composed through but not digested (not walked, for loops): such
    a tree keeps nothing, so an edit behind the link is never read back stale."""
    outside, conf = tmp_path / "outside", tmp_path / "userconf"
    outside.mkdir()
    conf.mkdir()
    (conf / "model").symlink_to(outside, target_is_directory=True)
    (outside / "loop").symlink_to(outside, target_is_directory=True)  # a loop is walked once
    path = outside / "mine.yaml"
    path.write_text("defaults: [hybrid]\nname: mine\nhidden_size: 4608\n")
    monkeypatch.setenv("CGBENCH_CONFIG_DIR", str(conf))
    assert load_config(["model=mine"]).model.hidden_size == 4608
    path.write_text("defaults: [hybrid]\nname: mine\nhidden_size: 5120\n")
    assert load_config(["model=mine"]).model.hidden_size == 5120
    assert _entries(cache) == []
    assert compose_cache.entry_key(["model=mine"], ()) is None


def test_a_model_file_the_key_does_not_hold_is_checked_again(cache, tmp_path, monkeypatch):
    """On a read-back the model-file check runs again only for a file outside the config folders (its
    bytes are not in the key): a file inside them changes the key when it changes."""
    from cgbench.config import load

    conf = tmp_path / "userconf"
    (conf / "model").mkdir(parents=True)
    (conf / "model" / "inside.yaml").write_text("defaults: [hybrid]\nname: inside\n")
    (tmp_path / "outside.yaml").write_text("defaults: [hybrid]\nname: linked\n")
    (conf / "model" / "linked.yaml").symlink_to(tmp_path / "outside.yaml")
    monkeypatch.setenv("CGBENCH_CONFIG_DIR", str(conf))
    assert load._model_file_keyed(["model=inside"], ())
    assert load._model_file_keyed([], ())  # the shipped hybrid model
    assert not load._model_file_keyed(["model=linked"], ())
    checked: list[list[str]] = []
    monkeypatch.setattr(load, "check_model_file", lambda overrides, dirs: checked.append(list(overrides)))
    for overrides in (["model=inside"], ["model=linked"]):
        load_config(overrides)
        load_config(overrides)  # read back
    assert checked == [["model=linked"]]
