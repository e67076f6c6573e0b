"""The registries' config half: for each extensible family (policies, grid families, workload
sources, step pricers) the names it holds and what the config reads for each (option schemas, the
keys a choice reads, graph-count estimates). A policy and a workload source are each one record here
(``policies.PolicySpec``, ``workloads.WorkloadSource``): a policy's build as data, a source's builder
by name (``records.builder`` resolves ``module:function`` for ``cgbench.workload.sources``); the other
families' builders live in the package that owns the concept (``cgbench.grids.registry``,
``cgbench.backends.sim.factory``); installed plug-ins join through ``plugins``."""
