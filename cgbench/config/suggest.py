"""Suggestions for Hydra's two composition errors that name what the user typed.

* A mistyped group option (``policy=defr``): Hydra says ``Could not find 'policy/defr'`` and lists
  the options; the closest one is added: ``; did you mean policy=defer?``.
* A typo inside a config file (``hiden_size: 64`` in ``my/model/mine.yaml``): Hydra says
  ``In 'model/mine': ... Key 'hiden_size' not in 'ModelConfig' full_key: model.hiden_size``; the
  message becomes the file and line, the key and the closest key of that record.

Every other message is returned unchanged, and so is one that already suggests something.
"""

from __future__ import annotations

import difflib
import os
import re
from collections.abc import Sequence
from pathlib import Path

_MISSING_OPTION = re.compile(r"In '[^']*': Could not find '(?P<path>[^']+)'\s*Available options in "
                             r"'(?P<group>[^']+)':\s*(?P<options>[\w.+-]+(?:, [\w.+-]+)*)")
_UNKNOWN_KEY = re.compile(r"In '(?P<node>[^']+)': \w+ raised while composing config: Key '(?P<key>[^']+)' "
                          r"not in '(?P<record>\w+)'\s*full_key: (?P<full>[\w.]+)")
_DID_YOU_MEAN = "did you mean"


def with_suggestion(message: str, config_dirs: Sequence[str | Path] = ()) -> str:
    """``message`` with a suggestion where it is one of the two errors above."""
    if _DID_YOU_MEAN in message:
        return message
    m = _MISSING_OPTION.search(message)
    if m is not None:
        return message[:m.start()] + _missing_option(m) + message[m.end():]
    m = _UNKNOWN_KEY.search(message)
    if m is not None:
        return message[:m.start()] + _unknown_key(m, config_dirs) + message[m.end():]
    return message


def closest(word: str, candidates: Sequence[str], cutoff: float = 0.6) -> str | None:
    """The candidate nearest to ``word`` (difflib's ratio at least ``cutoff``), or None."""
    match = difflib.get_close_matches(word, list(candidates), n=1, cutoff=cutoff)
    return match[0] if match else None


def _missing_option(m: re.Match[str]) -> str:
    """Hydra's words (which the README quotes), with the nearest option when there is one."""
    group = m["group"]
    option = m["path"][len(group) + 1:] if m["path"].startswith(group + "/") else m["path"]
    near = closest(option, m["options"].split(", "), cutoff=0.5)
    return m[0] + (f"; did you mean {group.replace('/', '.')}={near}?" if near else "")


def _unknown_key(m: re.Match[str], config_dirs: Sequence[str | Path]) -> str:
    from cgbench.config.compose import known_keys

    full, key = m["full"], m["key"]
    head = full[:-len(key) - 1] if full.endswith("." + key) else full.rpartition(".")[0]
    keys, _ = known_keys()
    siblings = sorted(k[len(head) + 1:] for k in keys if k.startswith(head + ".") and "." not in k[len(head) + 1:])
    near = closest(key, siblings, cutoff=0.5)
    where = _file_and_line(m["node"], key, config_dirs)
    hint = f"; did you mean {near}?" if near else f" (keys: {', '.join(siblings)})"
    return f"{where}{key}: not a key of {head or 'the config'} ({m['record']}){hint}"


def _file_and_line(node: str, key: str, config_dirs: Sequence[str | Path]) -> str:
    """``path:line: `` of the first line that sets ``key`` in the config file ``node`` (``model/mine``),
    searched in the user's folders first, then the shipped tree; ``In 'node': `` when not found."""
    from cgbench.config.paths import config_dir, user_config_dirs
    from cgbench.config.schema import ConfigError
    from cgbench.safeio import read_text

    try:
        dirs = [*user_config_dirs(config_dirs), config_dir()]
    except ConfigError:  # a folder that vanished since: the message without the line is still right
        dirs = [config_dir()]
    setting = re.compile(rf"^\s*(?:-\s+)?{re.escape(key)}\s*:")
    for d in dirs:
        path = Path(d) / f"{node}.yaml"
        if not path.is_file():
            continue
        try:
            lines = read_text(path).splitlines()  # bounded, regular files only
        except ConfigError:
            continue
        line = next((i for i, text in enumerate(lines, 1) if setting.match(text)), None)
        return f"{_shown(path)}:{line}: " if line else f"{_shown(path)}: "
    return f"In '{node}': "


def _shown(path: Path) -> str:
    """The path relative to the working directory when it lies below it."""
    try:
        return os.path.relpath(path) if path.resolve().is_relative_to(Path.cwd().resolve()) else str(path)
    except (OSError, ValueError):
        return str(path)
