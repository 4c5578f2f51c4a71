"""The engine stage: runs one sweep (the same context grid for every candidate) and records its rows.

`scheduler.run_job` walks the visits of the sweep's order (`plan`, `designs`) over a server `pool`;
`cells` / `runner` measure each probe (`sizing`, `prompts`, `cooldown`, `energy`, `probe`, `rows`),
`stoprule` and `racing` decide when a cell or candidate is done, `recorder` writes rows and events.
May import servers, sensors and the floor; never the daemon or results.
"""
