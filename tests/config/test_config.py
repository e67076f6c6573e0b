"""Every option of every group composes; typos, wrong types and bad values are ConfigErrors."""

from __future__ import annotations

import pytest

from cgbench.config.compose import GROUPS, expand_sweep, group_options, load_config
from cgbench.config.schema import BenchConfig, ConfigError


@pytest.mark.parametrize("group", GROUPS)
def test_every_group_has_options(group):
    assert group_options(group), f"conf/{group}/ is empty"


@pytest.mark.slow
@pytest.mark.parametrize("group,option", [(g, o) for g in GROUPS for o in group_options(g)])
def test_every_option_composes(group, option):
    cfg = load_config([f"{group}={option}"])
    assert isinstance(cfg, BenchConfig)
    if group in ("model", "workload", "hardware", "sweep"):
        assert getattr(cfg, group).name == option


def test_defaults_are_the_documented_job():
    cfg = load_config([])
    assert (cfg.model.kind, cfg.cg.kind, cfg.policy.name, cfg.backend.name) == ("hybrid", "megatron", "megatron", "sim")
    assert (cfg.engine.max_requests, cfg.engine.max_tokens, cfg.engine.max_sequence_length) == (256, 16384, 2560)


@pytest.mark.slow
@pytest.mark.parametrize("override,needle", [
    ("cg.num_cuda_graphs=abc", "cg.num_cuda_graphs"),
    ("cg.kind=nope", "cg.kind"),
    ("engine.max_tokens=-1", "engine.max_tokens"),
    ("engine.max_tokkens=5", "max_tokkens"),
    ("model=nope", "model/nope"),
    ("policy.name=greedy", "policy.name"),
    ("engine.max_tokens=100", "engine.max_tokens"),
    ("engine.chunked_prefill=maybe", "chunked_prefill"),
    ("workload.num_requests=0", "workload.num_requests"),
])
def test_bad_overrides_are_config_errors(override, needle):
    with pytest.raises(ConfigError) as e:
        load_config([override])
    assert needle in str(e.value)


def test_sweep_expansion_is_cartesian_first_key_slowest():
    points = expand_sweep(["model=transformer,hybrid", "policy=budget,megatron,defer", "seed=7"])
    assert len(points) == 6
    assert points[0] == ["model=transformer", "policy=budget", "seed=7"]
    assert points[1] == ["model=transformer", "policy=megatron", "seed=7"]
    assert points[3][0] == "model=hybrid"


def test_sweep_range_and_glob():
    assert [p[0] for p in expand_sweep(["seed=range(0,3)"])] == ["seed=0", "seed=1", "seed=2"]
    policies = [p[0].split("=")[1] for p in expand_sweep(["policy=glob(*)"])]
    assert sorted(policies) == sorted(group_options("policy"))


def test_sweep_rejects_interval_and_duplicates():
    with pytest.raises(ConfigError):
        expand_sweep(["seed=interval(0,1)"])
    with pytest.raises(ConfigError):
        expand_sweep(["seed=1,2", "seed=3"])


def _configs_covering_every_rule() -> list[BenchConfig]:
    out = []
    for cg in ("megatron", "decode_only", "none", "explicit", "vllm", "sglang", "trtllm"):
        for policy in ("budget", "pad_guard", "wait_timeout"):
            cfg = BenchConfig()
            cfg.cg.kind, cfg.policy.name = cg, policy
            out.append(cfg)
    for process in ("all_at_once", "poisson", "gamma", "constant", "closed_loop"):
        for trace in (None, "t.jsonl"):
            cfg = BenchConfig()
            cfg.workload.arrival.process, cfg.workload.trace = process, trace
            cfg.backend.name = "torch" if trace else "sim"
            out.append(cfg)
    return out


def test_every_unread_key_is_a_schema_key():
    from cgbench.config.compose import known_keys
    from cgbench.config.schema import unread_keys

    keys, _ = known_keys()
    for cfg in _configs_covering_every_rule():
        for key in unread_keys(cfg):
            assert key in keys, key


@pytest.mark.slow
def test_the_chosen_options_read_their_own_keys():
    """No preset's own keys are flagged as unread under that preset (a rule would refuse them)."""
    from cgbench.config.schema import unread_keys

    assert "cg.graphs" not in unread_keys(load_config(["cg=explicit"]))
    assert "policy.pad_guard" not in unread_keys(load_config(["policy=pad_guard"]))
    chat = unread_keys(load_config(["workload=chat"]))
    assert "workload.arrival.rate" not in chat and "workload.prompt_len.sigma" not in chat
    assert "workload.time_scale" not in unread_keys(load_config(["workload=trace"]))
    assert "cg.capture_sizes" not in unread_keys(load_config(["cg=vllm"]))


def test_a_key_the_options_do_read_is_accepted():
    cfg = load_config(["cg=explicit", "cg.graphs=[[64,0,64]]", "policy=pad_guard", "policy.pad_guard.max_ratio=3",
                       "workload=chat", "workload.arrival.rate=2", "cg.all_prefills=false",
                       "++engine.max_tokens=8192"])
    assert cfg.cg.graphs == [[64, 0, 64]] and cfg.policy.pad_guard.max_ratio == 3 and cfg.engine.max_tokens == 8192


def test_labels_follow_the_defaults_list_and_the_overrides():
    from cgbench.config.labels import choices, run_labels

    assert choices([])["cg"] == "megatron" and choices(["cg=dense"])["cg"] == "dense"
    ovr = ["cg=linear", "engine.chunked_prefill=true"]
    labels = run_labels(load_config(ovr), ovr)
    assert labels["cg"] == "linear" and labels["engine"] == "default+chunked_prefill"
    assert labels["name"] == "hybrid_linear_megatron_default_chunked"
    ovr = ["engine=kv_tight", "hardware=h200", "engine.max_requests=128"]
    assert run_labels(load_config(ovr), ovr)["name"] == "hybrid_megatron_megatron_default_kv-tight+max-requests_h200"


@pytest.mark.parametrize("workload", group_options("workload"))
def test_every_label_names_the_option_that_ran(workload):
    """A preset's own defaults list picks the engine (workload=azure_conv sets engine=azure_conv): the
    label names it, and composing that engine option explicitly gives the very config that ran
    (Hydra is the oracle). A typed engine=... wins over the preset, in the label as in the config."""
    from cgbench.config.labels import run_labels

    ovr = [f"workload={workload}"]
    cfg = load_config(ovr)
    labels = run_labels(cfg, ovr)
    assert all(load_config([*ovr, f"{g}={labels[g]}"]) == cfg for g in ("model", "cg", "policy", "engine"))
    typed = [*ovr, "engine=chunked"]
    assert run_labels(load_config(typed), typed)["engine"] == "chunked"
    assert load_config(typed).engine == load_config(["engine=chunked"]).engine


def test_a_trace_preset_is_labelled_with_its_engine():
    from cgbench.config.labels import header, run_labels

    for workload, engine in (("azure_conv", "azure_conv"), ("mooncake_conv", "mooncake_conv")):
        ovr = [f"workload={workload}"]
        labels = run_labels(load_config(ovr), ovr)
        assert labels["engine"] == engine and f"engine={engine} " in header(labels)
        assert engine not in labels["name"].removeprefix(f"hybrid_megatron_megatron_{workload.replace('_', '-')}")
        ovr = [*ovr, "engine.max_requests=64"]
        assert run_labels(load_config(ovr), ovr)["engine"] == f"{engine}+max_requests"


def test_labels_within_one_sweeps_scope_read_each_option_once(tmp_path, monkeypatch):
    """Within ``trees_fixed(token)`` (one sweep run) an option file's picks are looked up once: an edit
    meanwhile changes no label of that run, and the next token (the next run) reads the file again."""
    from cgbench.config import labels
    from cgbench.config.labels import choices, trees_fixed

    conf = tmp_path / "userconf"
    (conf / "workload").mkdir(parents=True)
    path = conf / "workload" / "mine.yaml"
    path.write_text("defaults:\n  - small\n  - override /engine@_global_.engine: chunked\n  - _self_\n")
    monkeypatch.setenv("CGBENCH_CONFIG_DIR", str(conf))
    assert choices(["workload=mine"])["engine"] == "chunked"
    looked_up = []
    real = labels.option_file
    monkeypatch.setattr(labels, "option_file", lambda g, o: looked_up.append((g, o)) or real(g, o))
    with trees_fixed("run-1"):
        assert choices(["workload=mine"])["engine"] == "chunked"
        path.write_text("defaults:\n  - small\n  - override /engine@_global_.engine: small\n  - _self_\n")
        assert choices(["workload=mine", "seed=2"])["engine"] == "chunked"
    assert len(looked_up) == len(set(looked_up)) > 0  # each (group, option) once in the run
    assert choices(["workload=mine"])["engine"] == "small"  # outside a run: the file as it is now
    with trees_fixed("run-2"):
        assert choices(["workload=mine"])["engine"] == "small"
        path.write_text("defaults:\n  - small\n  - override /engine@_global_.engine: kv_tight\n  - _self_\n")
    with trees_fixed(""):  # no run's scope (a point run alone): the file as it is now
        assert choices(["workload=mine"])["engine"] == "kv_tight"
