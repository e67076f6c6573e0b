"""The cross-field rules of a ``BenchConfig``, one module per feature that owns them.

``cgbench.config.schema.validate`` runs each feature's ``check_*`` in turn (``schema.RULES``: the
order is the order the errors are found in, which the bad-input corpus pins). A rule module reads a
config through its fields only and imports nothing of the schema, which imports it (the constants
it checks against live here and the schema re-exports them)."""
