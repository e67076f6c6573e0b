"""cgbench's optional dependencies and the one command that installs each.

The command depends on how cgbench is installed: from a wheel, ``pip install 'cgbench[plot]'``;
from a source checkout (``cgbench.results.document.source_checkout``), that command would fetch
another copy from the index, so the hint is an editable install of the checkout,
``pip install -e '.[plot]'`` (the checkout's path instead of ``.`` outside its top folder).
"""

from __future__ import annotations

import shlex
from pathlib import Path

OPTIONAL_DEPS = {"torch": "torch", "matplotlib": "plot", "pyarrow": "parquet"}  # module -> the extra that provides it


def install_hint(extra: str, checkout: Path | None = None, cwd: Path | None = None) -> str:
    """The pip command that installs ``extra`` into this cgbench: for a checkout (``checkout``, by
    default the one cgbench runs from) an editable install of it, else the extra from the index."""
    if checkout is None:
        from cgbench.results.document import source_checkout

        checkout = source_checkout()
    if checkout is None:
        return f"pip install {shlex.quote(f'cgbench[{extra}]')}"
    here = (cwd or Path.cwd()).resolve()
    where = "." if here == checkout.resolve() else str(checkout)
    return f"pip install -e {shlex.quote(f'{where}[{extra}]')}"


def needs(what: str, module: str) -> str:
    """``"<what> needs <module>, which is not installed: <install command>"``."""
    return f"{what} needs {module}, which is not installed: {install_hint(OPTIONAL_DEPS[module])}"
