"""The registries' config half: for each extensible family (policies, grid families, workload
sources, step pricers) the names it holds and what the config reads for each (option schemas, the
keys a choice reads, graph-count estimates). A policy is all here, its build included as data
(``policies.PolicySpec``); the other families' builders live in the package that owns the concept
(``cgbench.grids.registry``, ``cgbench.backends.sim.pricers``); installed plug-ins join through
``plugins``."""
