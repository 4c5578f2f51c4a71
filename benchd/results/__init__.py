"""The results stage: the runbook (`runbook`, `provenance`, `deferred`), its views and reports, the Pareto
view, comparisons. It never picks a winner. May import the engine's public statistics, servers,
sensors and the floor; never the daemon."""
