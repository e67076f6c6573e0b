"""Build the optional compiled simulator (``make native``): mypyc compiles ``cgbench.native.COMPILED_MODULES``
into extension modules next to their sources, then records the sources' digests so that a later
edit makes ``cgbench`` fall back to plain Python instead of running stale code.

Needs mypy (``pip install -e ".[native]"``) and a C compiler. ``--clean`` removes the build.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import sys
import tempfile
import warnings
from pathlib import Path

from cgbench.native import BUILD_INFO, COMPILED_MODULES, GROUP_NAME, PACKAGE_ROOT, build_record, source_path

ROOT = PACKAGE_ROOT.parent


def built_files() -> list[Path]:
    """Every extension module a build leaves in the package (the group library included)."""
    return sorted(p for p in PACKAGE_ROOT.rglob("*") if p.suffix in (".so", ".pyd") and p.is_file())


def clean(quiet: bool = False) -> int:
    removed = built_files()
    for path in removed:
        path.unlink()
    BUILD_INFO.unlink(missing_ok=True)
    if not quiet:
        print(f"removed {len(removed)} compiled module(s)")
    return 0


def build() -> int:
    try:
        from mypyc.build import mypycify
        from setuptools import setup
    except ImportError:
        print('build_native: mypy (mypyc) and setuptools are needed: pip install -e ".[native]"', file=sys.stderr)
        return 2
    clean(quiet=True)
    sources = [str(source_path(m).relative_to(ROOT)) for m in COMPILED_MODULES]
    with tempfile.TemporaryDirectory(prefix="cgbench-native-") as tmp:
        log = Path(tmp) / "build.log"
        try:
            with open(log, "w") as out, contextlib.redirect_stdout(out), contextlib.redirect_stderr(out):
                warnings.simplefilter("ignore")
                # mypy checks the compiled modules strictly; the modules they import are trusted as annotated
                ext = mypycify(["--ignore-missing-imports", "--follow-imports=silent", *sources],
                               opt_level="3", group_name=GROUP_NAME, target_dir=str(Path(tmp) / "c"))
                setup(name="cgbench-native", packages=[], py_modules=[], ext_modules=ext,
                      script_args=["build_ext", "--inplace", "--build-temp", str(Path(tmp) / "obj"),
                                   "--build-lib", str(Path(tmp) / "lib")])
        except (Exception, SystemExit) as err:  # a type error or a compiler error: show the build's own log
            clean(quiet=True)
            print(log.read_text()[-6000:], file=sys.stderr)
            print(f"build_native: the build failed ({err}); cgbench runs as plain Python", file=sys.stderr)
            return 1
    BUILD_INFO.write_text(json.dumps(build_record(), indent=1, sort_keys=True) + "\n")
    print(f"compiled {len(COMPILED_MODULES)} modules into {len(built_files())} extension files; "
          f"record: {BUILD_INFO.relative_to(ROOT)}")
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--clean", action="store_true", help="remove the compiled modules")
    args = parser.parse_args()
    return clean() if args.clean else build()


if __name__ == "__main__":
    sys.exit(main())
