"""The sensors stage: facts read from the OS, each with its source, never guessed.

What it does: memory of a server's process tree with exact kernel peaks (`memory/`), thermal state
(`thermal/`), power source and sleep prevention (`power/`), CPU load (`cpu`), the queue's run conditions
(`conditions`), and machine/model facts for provenance (`facts`). Each OS-specific reader sits beside
its twin: `memory/linux.py`-style readers in `readers.py` and `darwin.py` in the same folder.

May import: the floor only.

Public names: `MemorySampler` (memory.sampler), `open_sensor` (thermal.sensor), `power_status`,
`keep_awake` (power.status), `CpuLoad` (cpu), `unmet` (conditions), `collect_machine`, `hash_model` (facts).
"""
