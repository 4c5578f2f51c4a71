"""The statistics floor: the axis table, the one comparison, rank tests, cell statistics and the stop verdict.

Pure arithmetic over values and rows (no I/O, no clock). Every stage that compares, summarizes or stops
asks this package, so the engine's stop rule and the results stage's views ask the same question.

May import: the floor (schemas). Never a stage (daemon, lock, results, engine, servers, sensors).
Reasons and facts: docs/measuring.md#the-one-comparison.
"""
