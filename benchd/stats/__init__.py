"""The statistics floor: the axis table, the one comparison, rank tests, cell statistics and the stop
verdict; pure arithmetic (docs/measuring.md#the-one-comparison)."""
