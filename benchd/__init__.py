"""benchd: measured tradeoffs for choosing a local LLM.

The pipeline as packages (each imports only the ones below it; `pyproject.toml` [tool.importlinter]):

    daemon   socket API, queue, instance guard          -> runs a job, then writes its runbook
    results  runbook, report, chart, Pareto, compare, lock
    engine   scheduler, prompts, probe client, rows, metrics, cooldown, evals
    servers  supervisor, process groups, provisioning, runtimes/ adapters
    sensors  memory/, thermal/, power/, cpu, conditions, facts (Linux and macOS readers side by side)
    floor    schemas/, config, errors, store, probe_result

`benchd.service` (launchd/systemd) stands apart; the tiny test models live in `benchctl.tinymodels`.
"""

__version__ = "0.1.0"
