"""The servers stage: inference servers' lifecycle and everything runtime-specific.

What it does: finds or provisions the runtimes (`locate`, `provision`), starts each server in its own
process group bound to 127.0.0.1 and waits for readiness (`supervisor`, `server`, `procgroup`), records
every spawned server for orphan reaping (`records`), and holds one adapter per runtime
(`runtimes/`: argv, health, request body, the mapping of its answer to a row's figures).

May import: sensors and the floor. Never the engine, results or the daemon.

Public names: `Supervisor`, `Server`, `ServerStartError` (supervisor/server), `get_adapter` (runtimes).
A new runtime is one module in `runtimes/` registered in `runtimes.ADAPTERS`.
"""
