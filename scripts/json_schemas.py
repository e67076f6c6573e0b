"""Write cgbench/schemas/*.schema.json from the registry and the typed configs
(cgbench/analysis/schemas.py).

    python scripts/json_schemas.py          # rewrite the files
    python scripts/json_schemas.py --check  # exit 1 if a file is not current (the tests check the same)
"""

from __future__ import annotations

import sys

from cgbench.analysis.schemas import KINDS, SCHEMA_DIR, render, schema_path


def stale() -> list[str]:
    """The kinds whose committed schema differs from the generated one."""
    return [k for k in KINDS if not schema_path(k).is_file() or schema_path(k).read_text(encoding="utf-8") != render(k)]


def main() -> int:
    if "--check" in sys.argv[1:]:
        out = stale()
        for kind in out:
            print(f"{schema_path(kind)} is not current: run python scripts/json_schemas.py", file=sys.stderr)
        return 1 if out else 0
    SCHEMA_DIR.mkdir(exist_ok=True)
    for kind in KINDS:
        schema_path(kind).write_text(render(kind), encoding="utf-8")
        print(f"wrote {schema_path(kind)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
