"""The name plug-ins written before ``cgbench.errors`` import ``ConfigError`` by (cgbench's own modules
import it from ``cgbench.errors`` or ``cgbench.config.schema``)."""

from cgbench.errors import ConfigError, did_you_mean

__all__ = ["ConfigError", "did_you_mean"]
