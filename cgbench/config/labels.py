"""Honest labels for a run: the group options it used, and which keys overrode them.

A label is the chosen option of a config group (``cg=dense``), followed by ``+key`` for every key
of that group an override changed (``workload=default+trace``, ``engine=default+max_requests``).
The chosen option is the one that ran: an option file's own defaults list may pick another group's
option (``workload=azure_conv`` sets ``engine=azure_conv``), and a ``group=option`` typed on the
command line wins over it, as Hydra composes them.
The run header, the result file name and the result JSON's ``labels`` block all come from here.
Under ``backend=torch`` the hardware label is the device the model ran on (``cpu``, ``cuda``): the
``hardware`` presets describe simulated GPUs, which a torch run does not use.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from functools import lru_cache
from pathlib import Path
from typing import Any

from cgbench.config.overrides import split_override
from cgbench.config.paths import config_dir
from cgbench.config.schema import BenchConfig
from cgbench.config.yaml_kept import parse_plain

LABEL_GROUPS = ("model", "cg", "policy", "workload", "engine", "backend", "hardware")
EXPERIMENT = "experiment"  # +experiment=NAME: a user folder's experiment/NAME.yaml (# @package _global_)


@lru_cache(maxsize=1)
def default_options() -> dict[str, str]:
    """The default option of every group, read from the shipped ``config.yaml`` defaults list."""
    defaults = _yaml_file(config_dir() / "config.yaml").get("defaults", [])
    chosen: dict[str, str] = {}
    for item in defaults:
        if isinstance(item, dict):
            chosen.update({str(k): str(v) for k, v in item.items()})
    return chosen


def choices(overrides: list[str] | tuple[str, ...]) -> dict[str, str]:
    """group -> chosen option: the defaults list, replaced by the options' own ``override /group``
    entries (``preset_choices``), then by ``group=option`` overrides."""
    typed = {}
    experiment = None
    for o in overrides:
        key, value = split_override(o)
        if key in LABEL_GROUPS or key == "sweep":
            typed[key] = value
        elif key == EXPERIMENT:
            experiment = value
    chosen = {**default_options(), **typed}
    picked = preset_choices(chosen)
    if experiment is not None:  # +experiment=NAME: its defaults list overrides the presets'
        picked.update(preset_overrides(EXPERIMENT, experiment))
    return {**chosen, **{g: v for g, v in picked.items() if g not in typed}, **typed}


def preset_choices(chosen: dict[str, str]) -> dict[str, str]:
    """The group options that the ``chosen`` options' files pick in their defaults lists
    (``- override /engine@_global_.engine: azure_conv``), the later group of the list winning."""
    picked: dict[str, str] = {}
    for group, option in chosen.items():
        picked.update(preset_overrides(group, option))
    return picked


# Within ``trees_fixed(token)``: each option's picks, looked up once for every token (one sweep).
_fixed: ContextVar[dict[tuple, dict[str, str]] | None] = ContextVar("cgbench_label_picks", default=None)
_fixed_picks: dict[tuple, dict[str, str]] = {}
_fixed_token: list[str] = [""]


@contextmanager
def trees_fixed(token: str) -> Iterator[None]:
    """Within: each option file's picks are looked up once for every ``token``, not once per label. A
    sweep's points were composed from the config trees as they were when it planned; its labels then
    cost a dictionary lookup a group instead of a file search and a stat (0.2 ms a point). An empty
    ``token`` fixes nothing: each label reads the files as they are."""
    if not token:
        yield
        return
    if token != _fixed_token[0]:
        _fixed_picks.clear()
        _fixed_token[0] = token
    reset = _fixed.set(_fixed_picks)
    try:
        yield
    finally:
        _fixed.reset(reset)


def preset_overrides(group: str, option: str) -> dict[str, str]:
    """The group options that ``group``'s ``option`` file picks in its defaults list."""
    fixed = _fixed.get()
    if fixed is None:
        return _preset_overrides(group, option)
    from cgbench.config.registry.plugin_files import folders_in_effect

    key = (group, option, tuple(folders_in_effect()))
    picks = fixed.get(key)
    if picks is None:
        picks = fixed[key] = _preset_overrides(group, option)
    return dict(picks)


def _preset_overrides(group: str, option: str) -> dict[str, str]:
    path = option_file(group, option)
    if path is None:
        return {}
    try:
        data = _yaml_file(path)
    except Exception:  # noqa: BLE001 - composing the config already named any fault of the file
        return {}
    out: dict[str, str] = {}
    for item in (data.get("defaults") or []) if isinstance(data, dict) else []:
        for key, value in (item.items() if isinstance(item, dict) else ()):
            head, _, target = str(key).partition(" ")
            target_group = target.lstrip("/").split("@", 1)[0]
            if head == "override" and target_group in LABEL_GROUPS and value is not None:
                out[target_group] = str(value)
    return out


_parsed: dict[tuple[str, int, int], Any] = {}  # (path, mtime_ns, size) -> the file as plain containers


def _yaml_file(path: Path) -> Any:
    """A config file as plain containers, parsed once per version of the file (a sweep labels every
    point: parsing the same few files each time cost 0.1 s a point)."""
    st = path.stat()
    key = (str(path), st.st_mtime_ns, st.st_size)
    if key not in _parsed:
        if len(_parsed) > 256:
            _parsed.clear()
        # plain YAML: a defaults list holds names, and OmegaConf (40 ms to import) adds nothing here
        _parsed[key] = parse_plain(path.read_bytes())
    return _parsed[key]


def option_file(group: str, option: str) -> Path | None:
    """``<tree>/<group>/<option>.yaml`` in the shipped tree or a user tree (the first found, as
    Hydra searches them): the folders in effect, ``$CGBENCH_CONFIG_DIR``'s and the command's
    ``--config-dir`` (``plugin_files.folders_in_effect``)."""
    from cgbench.config.registry.plugin_files import folders_in_effect

    trees = [config_dir(), *folders_in_effect()]
    for tree in trees:
        path = tree / group / f"{option}.yaml"
        if path.is_file():
            return path
    return None


def run_labels(cfg: BenchConfig, overrides: list[str] | tuple[str, ...],
               device: str | None = None) -> dict[str, object]:
    """The ``labels`` block of a result: one entry per group, ``chunked``, the trace file and
    ``name`` (the file-name stem: model, grid, policy, workload, then the engine, backend and hardware
    labels where they differ from the defaults (the engine: and from the one a preset picks), and
    ``chunked`` when on). ``device``: what a
    ``backend=torch`` run runs on (``cgbench.pipeline.run_device``), its hardware label."""
    chosen = choices(overrides)
    touched: dict[str, list[str]] = {}
    for o in overrides:
        key, _ = split_override(o)
        group, dot, rest = key.partition(".")
        if dot and group in LABEL_GROUPS and rest not in touched.setdefault(group, []):
            touched[group].append(rest)
    labels: dict[str, object] = {}
    for group in LABEL_GROUPS:
        option = chosen.get(group, "?")
        labels[group] = option + "".join(f"+{k}" for k in touched.get(group, []))
    if cfg.backend.name == "torch":  # the model runs on a real device: no hardware preset is simulated
        labels["hardware"] = device or cfg.backend.device
    experiment = next((split_override(o)[1] for o in overrides if split_override(o)[0] == EXPERIMENT), None)
    if experiment is not None:
        labels[EXPERIMENT] = experiment
    labels["chunked"] = cfg.engine.chunked_prefill
    labels["trace"] = Path(cfg.workload.trace).name if cfg.workload.trace else None
    parts = [labels[g] for g in ("model", "cg", "policy", "workload")]
    if cfg.workload.trace and "trace" in touched.get("workload", []):
        parts.append(Path(cfg.workload.trace).stem)
    engine = str(labels["engine"]).replace("+chunked_prefill", "")  # chunking has its own part
    defaults = default_options()
    if engine not in ("default", "chunked", preset_choices(chosen).get("engine")):  # a preset's is implied
        parts.append(engine)
    parts += [str(labels[g]) for g in ("backend", "hardware") if labels[g] != defaults.get(g)]
    if cfg.engine.chunked_prefill:
        parts.append("chunked")
    labels["name"] = "_".join(_safe(str(p)) for p in parts)
    return labels


def _safe(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9.+-]+", "-", text).strip("-") or "x"


def header(labels: dict[str, object]) -> str:
    """``model=hybrid cg=dense policy=budget workload=default+trace (x.jsonl) chunked=on backend=sim``."""
    trace = f" ({labels['trace']})" if labels.get("trace") else ""
    return (f"model={labels['model']} cg={labels['cg']} policy={labels['policy']} "
            f"workload={labels['workload']}{trace} chunked={'on' if labels['chunked'] else 'off'} "
            f"engine={labels['engine']} backend={labels['backend']} hardware={labels['hardware']}")
