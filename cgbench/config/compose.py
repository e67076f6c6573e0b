"""The one module that knows Hydra: config discovery, composition, sweep expansion.

Everything else receives plain ``cgbench.config.schema`` dataclasses.

Config search path (``cgbench.config.paths``): the shipped tree first, then ``$CGBENCH_CONFIG_DIR``
and ``--config-dir`` folders, so a user's own ``<dir>/model/my70b.yaml`` adds ``model=my70b``
without copying the tree. A user file with the name of a shipped option (and other content) is refused.

Strictness: an override must name a key of the schema (``+`` or not), ``~key`` deletions and
``hydra/*`` / ``hydra.*`` overrides are refused, and an override of a key
that the chosen options never read (``cgbench.config.schema.unread_keys``) is refused.
"""

from __future__ import annotations

import copy
import dataclasses
import itertools
import pickle
import typing
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from pathlib import Path

import yaml
from hydra import compose, initialize_config_dir
from hydra.core.config_store import ConfigStore
from hydra.core.global_hydra import GlobalHydra
from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.errors import HydraException
from omegaconf import DictConfig, OmegaConf, open_dict
from omegaconf.errors import OmegaConfBaseException

from cgbench.config import compose_cache
from cgbench.config.labels import EXPERIMENT
from cgbench.config.limits import check_sweep_axis, check_sweep_points, validate_within_limits
from cgbench.config.model_files import check_model_file
from cgbench.config.override_checks import check_override_keys, check_read, is_hydra_key, known_keys, resolve_paths
from cgbench.config.overrides import override_key, override_value, quoting_advice
from cgbench.config.paths import (
    GROUPS,
    check_files_read,
    config_dir,
    data_roots,
    group_options,
    user_config_dirs,
    yaml_tree_signature,
)
from cgbench.config.plugin_schema import grid_plugins_named, plugins_held, plugins_named, schema_types
from cgbench.config.registry.plugin_files import plugin_folders
from cgbench.config.registry.policies import is_plugin, policy_names, policy_spec
from cgbench.config.schema import BenchConfig, ConfigError
from cgbench.errors import did_you_mean
from cgbench.safeio import require_cwd

__all__ = ["GROUPS", "Composer", "check_override_keys", "compose_dict", "composed_yaml", "config_dir", "data_roots",
           "expand_sweep", "group_options", "is_hydra_key", "known_keys", "load_config", "load_config_fresh",
           "shared_composer", "to_bench_config", "user_config_dirs"]

SCHEMA_NODE = "cgbench_schema"
ConfigStore.instance().store(name=SCHEMA_NODE, node=BenchConfig)


@contextmanager
def _hydra() -> Iterator[None]:
    with initialize_config_dir(config_dir=str(config_dir()), version_base="1.3", job_name="cgbench"):
        yield


@contextmanager
def plugin_schema(plugins: Sequence[str], grids: Sequence[str] = ()) -> Iterator[type[BenchConfig]]:
    """Compose against the schema holding ``plugins``' option sections (``cgbench.config.plugin_schema``),
    with ``policy=NAME`` an option of the policy group for each (and ``cg=NAME`` for each plug-in
    grid kind of ``grids``); after, the plain schema and the shipped options only (so ``glob(*)``
    and Hydra's option lists never depend on what was composed before)."""
    _, schema = schema_types(plugins)
    store = ConfigStore.instance()
    options = [("policy", name, {"name": name}) for name in plugins] + [("cg", name, {"kind": name}) for name in grids]
    for group, name, node in options:
        store.store(group=group, name=name, node=node)
    if schema is not BenchConfig:
        store.store(name=SCHEMA_NODE, node=schema)
    try:
        yield schema
    finally:
        store.store(name=SCHEMA_NODE, node=BenchConfig)
        for group, name, _ in options:
            store.repo.get(group, {}).pop(f"{name}.yaml", None)


def _searchpath_override(dirs: Sequence[Path]) -> list[str]:
    if not dirs:
        return []
    return ["hydra.searchpath=[" + ",".join(f"file://{d}" for d in dirs) + "]"]


def _error_text(e: BaseException) -> str:
    """Hydra/OmegaConf errors as one line: the message, the cause, the available options."""
    text = str(e).strip()
    cause = e.__cause__
    if cause is not None and str(cause).strip() and str(cause).strip() not in text:
        text = f"{text}: {str(cause).strip()}"
    text = text.split("Config search path")[0]
    parts: list[str] = []
    options: list[str] = []
    for line in text.splitlines():
        if line.startswith("\t"):
            options.append(line.strip())
        elif line.strip() and not line.strip().startswith(("object_type", "reference_type")):
            parts.append(line.strip())
    msg = " ".join(parts) if parts else "invalid configuration"
    if options:
        msg = f"{msg} {', '.join(options)}"
    return msg


# ---------------------------------------------------------------------------------------------
# Composition


def _yaml_error_text(e: yaml.YAMLError) -> str:
    mark = getattr(e, "problem_mark", None)
    where = f"{mark.name}:{mark.line + 1}" if mark is not None else "a config file"
    what = getattr(e, "problem", None) or str(e).splitlines()[0]
    context = getattr(e, "context", None)
    return f"{where}: invalid YAML: {what}" + (f" ({context})" if context else "")


def compose_dict(overrides: list[str], *, config_dirs: Sequence[str | Path] = (),
                 with_hydra: bool = False, resolve: bool = True, kept: bool = False) -> DictConfig:
    """Compose ``conf/config.yaml`` with overrides; config errors become ConfigError.
    ``with_hydra`` keeps Hydra's own ``hydra`` node (``--cfg all``); ``resolve=False`` skips the
    check that every value resolves (a partial composition that later overrides complete).
    ``kept``: read the tree back from the compositions kept across processes when this one was made
    before (``compose_cache``; a tree holding no interpolation, with the plain schema), else keep it."""
    key = None
    if kept and not with_hydra and not plugins_named(overrides) and not grid_plugins_named(overrides):
        key = compose_cache.entry_key(["compose_dict", f"resolve={resolve}", *overrides], config_dirs)
        tree = compose_cache.read_tree(key) if key is not None else None
        if tree is not None:
            require_cwd()
            return tree
    cfg = _compose_dict(overrides, config_dirs, with_hydra, resolve)
    if key is not None and not has_interpolation(OmegaConf.to_container(cfg, resolve=False)):
        compose_cache.write(key, pickle.dumps(cfg), kind="tree")
    return cfg


def _compose_dict(overrides: list[str], config_dirs: Sequence[str | Path], with_hydra: bool,
                  resolve: bool) -> DictConfig:
    dirs = user_config_dirs(config_dirs)
    check_files_read(dirs, overrides)  # a bad file of the tree counts only if this config may read it
    search = _searchpath_override(dirs)
    require_cwd()  # Hydra reads the working directory; a deleted one is one clear line
    try:
        with _hydra():
            cfg = compose(config_name="config", overrides=[*overrides, *search], return_hydra_config=with_hydra)
        if with_hydra or not resolve:
            return cfg
        OmegaConf.to_container(cfg, resolve=True, throw_on_missing=True)
        return cfg
    except yaml.YAMLError as e:  # a user's config file: name it, with the line
        raise ConfigError(_yaml_error_text(e)) from None
    except RecursionError:  # Hydra follows a defaults list that includes itself until the stack ends
        from cgbench.config.defaults_cycle import find_cycle

        named = [v.strip() for o in overrides for v in override_value(o).split(",")]
        cycle = find_cycle(user_config_dirs(config_dirs), named)
        raise ConfigError(f"a defaults list includes itself: {cycle}; remove the include that closes the cycle"
                          if cycle else "a defaults list includes itself (a cycle of config files)") from None
    except (HydraException, OmegaConfBaseException, ValueError) as e:
        msg = _error_text(e)
        advice = quoting_advice(overrides) if "LexerNoViableAlt" in msg else None
        if advice:
            raise ConfigError(advice) from None
        if msg.startswith("Config group override must be a string"):  # `engine=null`: name the key
            bad = next((o for o in overrides if override_value(o).strip().lower() in ("null", "~", "")), "")
            group = override_key(bad) if bad else "a config group"
            options = ", ".join(group_options(group)) if bad else ""
            raise ConfigError(f"{bad or group}: a config group needs one of its options"
                              + (f" ({group}: {options})" if options else "")) from None
        if "--multirun" in msg or "multirun" in msg.lower():
            bad = next((o for o in overrides if "," in o.partition("=")[2]), "")
            msg = (f"{bad or 'a sweep value'}: run takes one value per key; for several points use "
                   f"cgbench sweep {bad}".rstrip())
        raise ConfigError(msg) from e


def _check_policy_choice(overrides: Sequence[str], config_dirs: Sequence[str | Path]) -> None:
    """``policy=NAME`` names a policy file or an installed plug-in; else one line with the closest."""
    for o in overrides:
        if override_key(o) != "policy" or o.lstrip().startswith(("~", "+")):
            continue
        value = override_value(o).strip()
        names = sorted({*group_options("policy", config_dirs), *policy_names()})
        if value and value not in names:
            raise ConfigError(f"policy: {value!r} is not one of {', '.join(names)}{did_you_mean(value, names)}")


def load_config(overrides: list[str] | None = None, *, config_dirs: Sequence[str | Path] = ()) -> BenchConfig:
    """Check the overrides' keys, compose, convert to typed dataclasses, validate, and refuse an
    override of a key the chosen options never read. The ``plugins.yaml`` of ``config_dirs`` count
    while composing; a caller that then runs the config keeps them in effect (``plugin_folders``)."""
    ovr = list(overrides or [])
    with plugin_folders(config_dirs):
        try:
            composer = shared_composer(config_dirs)
        except ConfigError:  # a bad config folder: the error where a fresh composition gives it
            return _load_config(ovr, config_dirs)
        return composer.load(ovr)


# While ``load_config_recorded`` runs: the typed configs its compositions made, before their paths
# resolve (pickled; None for one whose tree held an interpolation, which may read the environment).
_recorded: ContextVar[list[bytes | None] | None] = ContextVar("cgbench_recorded_compositions", default=None)


def _record(typed: BenchConfig, *, pure: bool) -> None:
    recorded = _recorded.get()
    if recorded is not None:
        recorded.append(pickle.dumps(typed) if pure else None)


def load_config_recorded(overrides: list[str], *, config_dirs: Sequence[str | Path] = ()
                         ) -> tuple[BenchConfig, bytes | None]:
    """``load_config``, and the composition it validated as the cache keeps it (the typed config before
    its relative paths resolve, pickled), or None where it may not be kept: a plug-in's schema or
    policy, or an interpolation in the composed tree."""
    return _recording(list(overrides), lambda ovr: load_config(ovr, config_dirs=config_dirs))


def _recording(ovr: list[str], load: typing.Callable[[list[str]], BenchConfig]) -> tuple[BenchConfig, bytes | None]:
    recorded: list[bytes | None] = []
    token = _recorded.set(recorded)
    try:
        cfg = load(ovr)
    finally:
        _recorded.reset(token)
    plugin = bool(plugins_named(ovr) or grid_plugins_named(ovr)) or is_plugin(cfg.policy.name)
    return cfg, (recorded[-1] if recorded and not plugin else None)


def load_config_fresh(overrides: list[str] | None = None, *, config_dirs: Sequence[str | Path] = ()) -> BenchConfig:
    """``load_config`` through a fresh Hydra composition, with no cache (what the caches are tested against)."""
    with plugin_folders(config_dirs):
        return _load_config(list(overrides or []), config_dirs)


# The process's Composer for ``load_config``, for the config trees as they are now: an edited, added
# or removed YAML file anywhere on the search path (or another ``$CGBENCH_CONFIG_DIR``) starts a new
# one. A command composes once, so this pays where one process composes many configs (advise's
# re-checks, explain, the Python API, the test suite).
# The few most recent states are kept (a process that alternates between config folders), each
# state's key holding its files' signatures, so a stale one is never found again.
_shared: dict[tuple, Composer] = {}
_SHARED_STATES = 8


def shared_composer(config_dirs: Sequence[str | Path] = ()) -> Composer:
    """The process's ``Composer`` for ``config_dirs`` and the config trees as they are now."""
    dirs = user_config_dirs(config_dirs)
    key = (tuple(config_dirs), tuple(dirs), yaml_tree_signature([config_dir(), *dirs]))
    composer = _shared.pop(key, None)
    if composer is None:
        composer = Composer(config_dirs)
        while len(_shared) >= _SHARED_STATES:
            del _shared[next(iter(_shared))]  # the least recently used
    _shared[key] = composer
    return composer


def _load_config(ovr: list[str], config_dirs: Sequence[str | Path]) -> BenchConfig:
    check_override_keys(ovr)
    plugins = plugins_named(ovr)
    _check_policy_choice(ovr, config_dirs)
    job = ovr  # check_override_keys refused every Hydra setting
    with plugin_schema(plugins, grid_plugins_named(ovr)):
        cfg = to_bench_config(compose_dict(job, config_dirs=config_dirs))
    name = cfg.policy.name
    if is_plugin(name) and policy_spec(name).options is not None and name not in plugins_held(cfg):
        # chosen by a config file, not an override: compose again with its section
        with plugin_schema((*plugins, name), grid_plugins_named(ovr)):
            cfg = to_bench_config(compose_dict(job, config_dirs=config_dirs))
    check_read(cfg, ovr)
    check_model_file(ovr, config_dirs)  # a model file states its whole architecture
    return cfg


@dataclasses.dataclass
class _Base:
    """One set of group selections, composed: the tree Hydra would apply ``key=value`` overrides to,
    and (when no value anywhere in it is an interpolation) its typed config before path resolution
    and validation, pickled, for overrides that only replace plain values; ``pristine``, the tree as
    plain containers, tells whether a failed quick path left it changed."""

    tree: DictConfig
    frozen: bytes | None
    pristine: typing.Any = None

    def intact(self) -> bool:
        try:
            return OmegaConf.to_container(self.tree, resolve=False) == self.pristine
        except Exception:  # noqa: BLE001 - a tree that cannot even be read back is not intact
            return False


class Composer:
    """``load_config`` for the many points of one sweep, composing through Hydra once per distinct
    set of config-group selections (``model=hybrid cg=dense``) instead of once per point.

    Hydra composes in two steps: the defaults list (the group selections, with every option's own
    defaults list, ``_self_`` order and packages) is merged into one config, then every
    ``key=value`` override is applied to that config (``OmegaConf.update``, in order, on the
    struct-mode tree). The first step is the expensive one and depends on the group selections only,
    so it is done once per selection set and cached. The second is repeated here for each point:

    * the quick path, for overrides that replace plain values (no ``+``, no list or mapping, no
      interpolation in the value or anywhere in the tree): each value is converted by OmegaConf on
      the cached tree itself (``OmegaConf.update``, then ``OmegaConf.select``; the old value is put
      back) and set on a copy of the cached typed config;
    * otherwise Hydra's own rules (``_apply_overrides_to_config``) on a copy of the cached tree,
      then the typed conversion.

    Both end with the checks of ``load_config`` (paths, limits, unread keys). Whenever a path raises,
    the point is composed afresh (``load_config``'s own steps), so an error is always the one a fresh
    composition gives. One instance belongs to one sweep, or (``load_config``'s) to one state of the
    config trees: the cache itself does not notice config files edited meanwhile."""

    def __init__(self, config_dirs: Sequence[str | Path] = ()) -> None:
        self.config_dirs = tuple(config_dirs)
        self._bases: dict[tuple[str, ...], _Base] = {}
        self._parsed: dict[str, typing.Any] = {}
        self._parser: OverridesParser | None = None
        self._models_checked: set[tuple[str, ...]] = set()
        self.compositions = 0  # Hydra compositions so far (the cost this class saves)

    def load(self, overrides: Sequence[str]) -> BenchConfig:
        ovr = list(overrides)
        with plugin_folders(self.config_dirs):
            cfg = self._cached(ovr)
            if cfg is None:
                self.compositions += 1
                cfg = _load_config(ovr, self.config_dirs)
            return cfg

    def load_recorded(self, overrides: Sequence[str]) -> tuple[BenchConfig, bytes | None]:
        """``load``, and the composition as the kept compositions hold it (``load_config_recorded``)."""
        return _recording(list(overrides), self.load)

    def _cached(self, ovr: list[str]) -> BenchConfig | None:
        """The config from the cached composition, or None where a fresh one must decide. The only
        errors raised are those a fresh composition raises at the same step on the same input: its
        first check (the keys), and the validation and unread-key checks of a config the quick path
        built (equal to the fresh one); any other failure is left to the fresh composition."""
        check_override_keys(ovr)
        if plugins_named(ovr) or grid_plugins_named(ovr):  # composed against a schema of their own
            return None
        model_keys = tuple(o for o in ovr if override_key(o) == "model" or override_key(o).startswith("model."))
        groups = tuple(o for o in ovr if override_key(o) in GROUPS or override_key(o) == EXPERIMENT)
        values = [o for o in ovr if o not in groups]
        try:
            if model_keys not in self._models_checked:  # what load_config checks after composing
                check_model_file(ovr, self.config_dirs)
                self._models_checked.add(model_keys)
            base = self._base(groups)
            parsed = [self._parse(o) for o in values]
            bench = self._quick(base, parsed) if base.frozen is not None and all(map(_plain, parsed)) else None
            if bench is None:
                tree = copy.deepcopy(base.tree)
                _apply(tree, parsed)
                OmegaConf.to_container(tree, resolve=True, throw_on_missing=True)
                bench = to_bench_config(tree)  # checked by the conversion itself
                quick = False
            else:
                quick = True
        except Exception:  # noqa: BLE001 - the canonical error (or, should a path here be stricter, the config)
            base = self._bases.get(groups)
            if base is not None and not base.intact():  # a failed update left the cached tree changed
                del self._bases[groups]
            return None
        if is_plugin(bench.policy.name):  # a plug-in policy chosen by a config file: its section
            return None
        if quick:  # the fresh composition's own checks, on the config it would build
            _record(bench, pure=True)  # the base tree holds no interpolation, the values are plain
            resolve_paths(bench)
            bench = validate_within_limits(bench)
        check_read(bench, ovr)
        return bench

    def _base(self, groups: tuple[str, ...]) -> _Base:
        base = self._bases.get(groups)
        if base is None:
            self.compositions += 1
            tree = compose_dict(list(groups), config_dirs=self.config_dirs, resolve=False, kept=True)
            frozen = None
            pristine = OmegaConf.to_container(tree, resolve=False)
            if not has_interpolation(pristine):
                try:
                    frozen = pickle.dumps(OmegaConf.to_object(tree))
                except OmegaConfBaseException:  # a missing value that the overrides must supply
                    frozen = None
            base = self._bases[groups] = _Base(tree, frozen, pristine)
        return base

    def _parse(self, o: str):
        parsed = self._parsed.get(o)
        if parsed is None:
            if self._parser is None:
                self._parser = OverridesParser.create()
            [parsed] = self._parser.parse_overrides([o])
            self._parsed[o] = parsed
        return parsed

    @staticmethod
    def _quick(base: _Base, parsed: list) -> BenchConfig | None:
        """The typed config with each plain value set as OmegaConf converts it; None when a key is
        not a plain field of the typed records (the full path then decides)."""
        assert base.frozen is not None
        bench = pickle.loads(base.frozen)
        for o in parsed:
            key = o.key_or_group
            *parents, leaf = key.split(".")
            holder = bench
            for name in parents:
                holder = getattr(holder, name, None)
            old = OmegaConf.select(base.tree, key, throw_on_missing=False)
            if not dataclasses.is_dataclass(holder) or not hasattr(holder, leaf) or OmegaConf.is_config(old):
                return None
            OmegaConf.update(base.tree, key, o.value(), merge=True)
            try:
                converted = OmegaConf.select(base.tree, key)
            finally:
                OmegaConf.update(base.tree, key, old, merge=True)
            setattr(holder, leaf, converted)
        return bench


def _plain(o) -> bool:
    """An override that only replaces a plain value (``key=3``, ``key=name``, ``key=null``)."""
    if o.package is not None or o.is_delete() or o.is_add() or o.is_force_add() or o.is_sweep_override():
        return False
    value = o.value()
    return not isinstance(value, (dict, list)) and not (isinstance(value, str) and "${" in value)


def has_interpolation(node: typing.Any) -> bool:
    stack = [node]
    while stack:
        v = stack.pop()
        if isinstance(v, str) and "${" in v:
            return True
        if isinstance(v, dict):
            stack.extend(v.values())
        elif isinstance(v, list):
            stack.extend(v)
    return False


def _apply(cfg: DictConfig, parsed: list) -> None:
    """Hydra's own rules for ``key=value``, ``+key=value`` and ``++key=value`` (its config loader's
    ``_apply_overrides_to_config``; deletions are refused earlier by ``check_override_keys``)."""
    for o in parsed:
        if o.package is not None or o.is_delete() or o.is_sweep_override():
            raise ValueError(f"{o.input_line}: left to a fresh composition")
        key, value = o.key_or_group, o.value()
        if o.is_add():
            if OmegaConf.select(cfg, key, throw_on_missing=False) is not None and not isinstance(value, (dict, list)):
                raise ValueError(f"{o.input_line}: adds a key that exists")
            OmegaConf.update(cfg, key, value, merge=True, force_add=True)
        elif o.is_force_add():
            OmegaConf.update(cfg, key, value, merge=True, force_add=True)
        else:
            OmegaConf.update(cfg, key, value, merge=True)


def composed_yaml(overrides: list[str], *, which: str = "job", resolve: bool = False,
                  config_dirs: Sequence[str | Path] = ()) -> str:
    """The composed config as YAML (``--cfg job``), or with Hydra's own node (``--cfg all``)."""
    if which not in ("job", "all"):
        raise ConfigError(f"--cfg: {which!r} is not one of job, all")
    if which == "job":
        load_config(overrides, config_dirs=config_dirs)  # the same checks as a run
    with plugin_folders(config_dirs), plugin_schema(plugins_named(overrides), grid_plugins_named(overrides)):
        cfg = compose_dict(list(overrides), config_dirs=config_dirs, with_hydra=which == "all")
    try:
        if which == "job":
            return OmegaConf.to_yaml(cfg, resolve=resolve)
        # Hydra's own node refers to a job number that only a launched job has: resolve the job part only
        hydra_node = OmegaConf.to_container(cfg.hydra, resolve=False)
        with open_dict(cfg):
            del cfg["hydra"]
        job = OmegaConf.to_container(cfg, resolve=resolve)
        return OmegaConf.to_yaml(OmegaConf.create({**job, "hydra": hydra_node}))
    except OmegaConfBaseException as e:
        raise ConfigError(_error_text(e)) from e


def to_bench_config(cfg: DictConfig) -> BenchConfig:
    """A composed DictConfig (from compose or a ``@hydra.main`` job) as validated dataclasses."""
    try:
        obj = OmegaConf.to_object(cfg)
    except OmegaConfBaseException as e:
        raise ConfigError(_error_text(e)) from e
    assert isinstance(obj, BenchConfig)  # or its subclass with plug-in sections (plugin_schema)
    if _recorded.get() is not None:
        _record(obj, pure=not has_interpolation(OmegaConf.to_container(cfg, resolve=False)))
    resolve_paths(obj)
    return validate_within_limits(obj)  # finiteness, names, sizes, validate(), resource estimates




def _as_number(text: str) -> int | float | None:
    """A sweep value as the config's number fields read it (``01`` and ``1`` are both 1), else None."""
    t = text.strip().replace("_", "")
    for kind in (int, float):
        try:
            return kind(t)
        except ValueError:
            continue
    return None


def _refuse_equal_values(key: str, texts: list[str]) -> None:
    """Two values of one sweep axis that the config reads as one (``seed=1,01``, ``x=1,1.0``, or a value
    listed twice) would plan two points of one config: refused, naming both."""
    seen: dict[object, str] = {}
    for text in texts:
        number = _as_number(text)
        value: object = ("n", number) if number is not None and number == number else ("s", text.strip())
        if value in seen:
            raise ConfigError(f"{key}: the sweep values {seen[value]!r} and {text!r} are the same value: each "
                              "point would be the same config; list each value once")
        seen[value] = text


def expand_sweep(overrides: list[str]) -> list[list[str]]:
    """Hydra sweep syntax -> the Cartesian product of override lists (first key varies slowest,
    as Hydra's BasicSweeper). ``a=1,2``, ``range()``, ``choice()`` and ``glob()`` are supported."""
    check_override_keys(list(overrides))
    axes: list[list[str]] = []
    try:
        with _hydra():
            loader = GlobalHydra.instance().hydra.config_loader  # type: ignore[union-attr]
            parsed = OverridesParser.create(config_loader=loader).parse_overrides(list(overrides))
            seen: set[str] = set()
            for o in parsed:
                key = o.get_key_element()
                if key in seen:
                    raise ConfigError(f"{key}: given more than once in the sweep")
                seen.add(key)
                if o.is_sweep_override():
                    if not o.is_discrete_sweep():
                        raise ConfigError(f"{key}: interval() sweeps are not supported; list values instead")
                    check_sweep_axis(key, o.value())  # a zero step, an endless or huge range
                    texts = list(o.sweep_string_iterator())
                    _refuse_equal_values(key, texts)
                    values = [f"{key}={v}" for v in texts]
                    if not values:
                        raise ConfigError(f"{key}: the sweep has no values")
                    axes.append(values)
                else:
                    axes.append([f"{key}={o.get_value_element_as_str()}"])
    except (HydraException, OmegaConfBaseException) as e:
        msg = _error_text(e)
        raise ConfigError((quoting_advice(overrides) if "LexerNoViableAlt" in msg else None) or msg) from e
    check_sweep_points(axes)
    return [list(p) for p in itertools.product(*axes)]


