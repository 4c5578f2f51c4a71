"""Energy counters behind one interface: the package's / SoC's joules between two samples
(`choose.open_reader()`; Linux RAPL and macOS IOReport side by side)."""
