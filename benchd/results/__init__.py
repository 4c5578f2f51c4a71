"""The results stage: what a finished (or interrupted) job means, for a human choosing a model.

What it does: assembles and writes the runbook (`runbook`, with `provenance` and `deferred` axes),
renders it as Markdown (`report`) and a chart (`plot`, drawn by the worker process in `render` from the `views` table), computes the Pareto view (`pareto`), compares
two runbooks (`compare`) and writes the human's lock (`lock`). It never picks a winner.

May import: the engine's public statistics and prompt provenance (`engine.metrics`, `engine.prompts`),
servers (the lock's server command line), sensors (machine facts), the floor. Never the daemon.

Public names: `write_runbook`, `load_runbook` (runbook), `render_markdown` (report),
`pareto_from_rows` (pareto), `compare_runbooks` (compare), `lock_candidate`, `read_lock` (lock).
"""
