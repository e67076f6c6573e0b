"""Extract the argument names of an unpacked megatron-core wheel into cgbench's committed list.

    pip download --no-deps --python-version 3.12 --only-binary=:all: megatron-core==0.19.2 -d /tmp/mcore
    unzip -q /tmp/mcore/megatron_core-*.whl -d /tmp/mcore/whl
    python3.12 scripts/megatron_arg_names.py /tmp/mcore/whl > cgbench/config/data/megatron_args.txt

    python3 scripts/megatron_arg_names.py --examples MEGATRON_GIT_DIR main core_r0.19.0 \
        > cgbench/config/data/megatron_example_args.txt

The second form lists the arguments Megatron-LM's own inference scripts add to that parser
(``examples/inference/``, ``megatron/inference/`` with its ``add_inference_args``,
``tools/run_text_generation_server.py``), read with ``ast`` from a Megatron-LM git folder at each
ref (``git show``), each with the files that add it.

It builds Megatron's own parser (``megatron.training.arguments.add_megatron_arguments``) so the
names that ``ArgumentGroupFactory`` derives from config dataclasses are included (with the
``add_argument('--...')`` names written in arguments.py, some added only with optional packages), every
third-party import (torch, transformer_engine, ...) replaced by an inert stand-in: only the
parser is built, nothing runs. The inference config's field names (``InferenceConfig`` in
``megatron/core/inference/config.py``) are read with ``ast``. Needs Python >= 3.12 (the wheel's).
"""

from __future__ import annotations

import argparse
import ast
import importlib.abc
import importlib.machinery
import sys
import types
from pathlib import Path


class _Inert(types.ModuleType):
    """A module, attribute, callable, decorator and base class that does nothing."""

    def __getattr__(self, name: str) -> _Inert:
        if name.startswith("__") and name != "__version__":
            raise AttributeError(name)
        child = _Inert(f"{self.__name__}.{name}")
        child.__path__ = []
        setattr(self, name, child)
        return child

    def __call__(self, *args: object, **kwargs: object) -> object:
        if len(args) == 1 and callable(args[0]) and not kwargs:
            return args[0]  # used as a decorator
        return _Inert(f"{self.__name__}()")

    def __mro_entries__(self, bases: tuple) -> tuple[type]:
        return (type(self.__name__.rsplit(".", 1)[-1], (), {}),)

    def __or__(self, other: object) -> _Inert:
        return self

    __ror__ = __or__

    def __getitem__(self, key: object) -> _Inert:
        return self

    def __iter__(self):
        return iter(())

    def __bool__(self) -> bool:
        return False

    def __ge__(self, other: object) -> bool:  # version checks pass
        return True

    __gt__ = __ge__

    def __lt__(self, other: object) -> bool:
        return False

    __le__ = __lt__

    def __int__(self) -> int:
        return 0

    __index__ = __int__

    def __float__(self) -> float:
        return 0.0


class _InertFinder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Serve an inert module for any import that is neither megatron, the standard library nor
    installed."""

    def find_spec(self, name, path, target=None):
        top = name.split(".")[0]
        if top == "megatron" or top in sys.stdlib_module_names:
            return None
        for finder in sys.meta_path:
            if finder is self:
                continue
            try:
                if finder.find_spec(name, path, target) is not None:
                    return None
            except Exception:
                continue
        return importlib.machinery.ModuleSpec(name, self, is_package=True)

    def create_module(self, spec):
        module = _Inert(spec.name)
        module.__path__ = []
        return module

    def exec_module(self, module) -> None:
        pass


def parser_flags(root: Path) -> list[str]:
    sys.path.insert(0, str(root))
    sys.meta_path.insert(0, _InertFinder())
    from megatron.training import arguments

    parser = argparse.ArgumentParser(allow_abbrev=False)
    parser = arguments.add_megatron_arguments(parser) or parser
    return sorted({s for action in parser._actions for s in action.option_strings if s.startswith("--")})


def literal_flags(source: Path | str) -> set[str]:
    """The ``add_argument('--...')`` names written out in ``source`` (a file, or its text; also those
    added only when an optional package is installed, which the stand-in parser skips)."""
    flags = set()
    text = source.read_text() if isinstance(source, Path) else source
    for node in ast.walk(ast.parse(text)):
        if isinstance(node, ast.Call) and getattr(node.func, "attr", "") == "add_argument":
            flags |= {a.value for a in node.args if isinstance(a, ast.Constant) and str(a.value).startswith("--")}
    return flags


def dataclass_fields(source: Path, class_name: str) -> list[str]:
    tree = ast.parse(source.read_text())
    for node in ast.walk(tree):
        if isinstance(node, ast.ClassDef) and node.name == class_name:
            return [s.target.id for s in node.body if isinstance(s, ast.AnnAssign) and isinstance(s.target, ast.Name)]
    raise SystemExit(f"{source}: no class {class_name}")


EXAMPLE_PATHS = ("examples/inference", "megatron/inference", "tools/run_text_generation_server.py")


def example_flags(git_dir: str, refs: list[str]) -> dict[str, set[str]]:
    """``{flag: {file, ...}}``: the arguments the inference scripts of a Megatron-LM git folder add, at
    each of ``refs`` (only the scripts' own ``add_argument`` calls: a flag of Megatron's main parser is
    in the wheel's list already)."""
    import subprocess

    def git(*args: str) -> str:
        return subprocess.run(["git", f"--git-dir={git_dir}", *args], check=True, capture_output=True,
                              text=True).stdout

    found: dict[str, set[str]] = {}
    for ref in refs:
        for path in git("ls-tree", "-r", "--name-only", ref, "--", *EXAMPLE_PATHS).split():
            if path.endswith(".py"):
                for flag in literal_flags(git("show", f"{ref}:{path}")):
                    found.setdefault(flag, set()).add(path)
    return found


def main_examples(git_dir: str, refs: list[str]) -> None:
    import subprocess

    shas = [subprocess.run(["git", f"--git-dir={git_dir}", "rev-parse", "--short=8", r], check=True,
                           capture_output=True, text=True).stdout.strip() for r in refs]
    print("# Arguments Megatron-LM's own inference scripts add to its parser (examples/inference/,")
    print("# megatron/inference/ add_inference_args, tools/run_text_generation_server.py), extracted by")
    print("# scripts/megatron_arg_names.py --examples at "
          + ", ".join(f"{r} ({s})" for r, s in zip(refs, shas, strict=True)) + ":")
    print("# a flag, then the files that add it. Names only: no Megatron code.")
    for flag, files in sorted(example_flags(git_dir, refs).items()):
        print(f"{flag} {' '.join(sorted(files))}")


def main() -> None:
    if sys.argv[1:2] == ["--examples"]:
        main_examples(sys.argv[2], sys.argv[3:])
        return
    root = Path(sys.argv[1])
    version = next(root.glob("megatron_core-*.dist-info")).name.removesuffix(".dist-info").split("-")[1]
    flags = sorted(set(parser_flags(root)) | literal_flags(root / "megatron/training/arguments.py"))
    fields = dataclass_fields(root / "megatron/core/inference/config.py", "InferenceConfig")
    print(f"# Megatron-LM argument names, megatron-core {version} (PyPI wheel), extracted by")
    print("# scripts/megatron_arg_names.py: every option string of megatron.training.arguments."
          "add_megatron_arguments")
    print("# and every add_argument('--...') written in megatron/training/arguments.py")
    print("# (argparse flags, one a line), then the field names of megatron.core.inference.config."
          "InferenceConfig")
    print("# (lines 'InferenceConfig.<field>'). Names only: no Megatron code.")
    print(f"# version: {version}")
    for f in flags:
        print(f)
    for f in fields:
        print(f"InferenceConfig.{f}")


if __name__ == "__main__":
    main()
