"""The registries' config half: for each extensible family (policies, grid families, workload
sources, step pricers) the names it holds and what the config reads for each (option schemas, the
keys a choice reads, graph-count estimates). A policy, a workload source and a step pricer are each
one record here (``policies.PolicySpec``, ``workloads.WorkloadSource``, ``pricers.PricerSpec``): a
policy's build as data, a source's or a pricer's builder by name (``records.builder`` resolves
``module:function`` for the package that builds it: ``cgbench.workload.sources``,
``cgbench.backends.sim.factory``); grid families' builders live in ``cgbench.grids.registry``;
installed plug-ins join through ``plugins``."""
