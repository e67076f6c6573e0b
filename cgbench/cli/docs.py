"""``cgbench docs [TOPIC]`` (registered in ``cli.app``): the guides, from the installed package as
from a checkout (the wheel ships ``docs/`` as ``cgbench/docs``), so that every "see cgbench docs
TOPIC" in help and error messages works wherever cgbench runs."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer


def docs_dir() -> Path:
    """The guides: the packaged ``cgbench/docs`` (a wheel), else ``<checkout>/docs``."""
    from importlib import resources

    packed = resources.files("cgbench") / "docs"
    if packed.is_dir():
        return Path(str(packed))
    return Path(__file__).resolve().parents[2] / "docs"


def topics() -> dict[str, Path]:
    return {p.stem: p for p in sorted(docs_dir().glob("*.md"))}


def _title(path: Path) -> str:
    for line in path.read_text(encoding="utf-8").splitlines():
        if line.startswith("# "):
            return line[2:].strip()
    return path.stem


def docs_cmd(
    topic: Annotated[Optional[str], typer.Argument(help="A guide (sweeps, exports, metrics, ...); none: the list.",
                                                   show_default=False)] = None,
    path: Annotated[bool, typer.Option("--path", help="Print the guide's file path instead of its text.")] = False,
    fmt: Annotated[str, typer.Option("--format", "-f", help="table or json (the list of guides).")] = "table",
) -> None:
    """Print one of cgbench's guides (Markdown), or list them: the same files as the repository's docs/,
    shipped in the package."""
    from cgbench.cli.errors import out, user_errors

    with user_errors():
        import json
        import sys

        from cgbench.cli.formats import TABLE_OR_JSON, check_format
        from cgbench.config.schema import ConfigError
        from cgbench.errors import did_you_mean

        check_format(fmt, TABLE_OR_JSON)
        found = topics()
        if topic is None:
            rows = [{"topic": name, "title": _title(p), "path": str(p)} for name, p in found.items()]
            if fmt == "json":
                sys.stdout.write(json.dumps(rows, indent=1) + "\n")
                return
            for r in rows:
                out.print(f"{r['topic']:<16} {r['title']}", markup=False, highlight=False, soft_wrap=True)
            out.print(f"(cgbench docs TOPIC prints one; they are in {docs_dir()})", markup=False, highlight=False,
                      soft_wrap=True)
            return
        name = topic.removesuffix(".md").removeprefix("docs/")
        if name not in found:
            raise ConfigError(f"docs: no guide {topic!r}{did_you_mean(name, list(found))} (cgbench docs lists them)")
        if path or fmt == "json":
            sys.stdout.write(json.dumps({"topic": name, "path": str(found[name])}) + "\n" if fmt == "json"
                             else f"{found[name]}\n")
            return
        sys.stdout.write(found[name].read_text(encoding="utf-8"))
