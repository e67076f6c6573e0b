"""A plug-in module whose import ends the process (``sys.exit`` at module level)."""

import sys

sys.exit(5)
