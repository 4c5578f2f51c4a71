"""The engine stage: runs one sweep — the same context grid for every candidate — and records rows.

What it does: `scheduler.run_job` executes the plan of visits of the sweep's measuring order (`plan`,
`designs`: interleaved rounds, balanced blocks, or sequential); per probe it sizes a unique prompt
(`prompts`, `corpus`, `sizing`), warms up, runs the probe series with the streaming client (`probe`)
under the cooldown policy (`cooldown`), turns each probe into a normalized row (`rows`) and computes
stream windows and cell statistics (`metrics`); evals run last (`evals`, `evalrun`).

May import: servers (to start the runtimes), sensors (memory, thermal, cpu), the floor. Never the daemon
or results.

Public names: `run_job` (scheduler), `cell_stats`/`median_ci` (metrics), `run_probe` (probe),
`PromptBuilder` (prompts).
"""
