"""benchctl: the thin client of benchd (submit, tail, report, compare, lock) and its offline tools."""
