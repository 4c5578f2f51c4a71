"""Energy counters behind one interface: the whole package's / SoC's joules between two samples.

`choose.open_reader()` picks the source (`$BENCHD_POWERCAP_ROOT` test seam, macOS IOReport, Linux
powercap RAPL, else a null reader with the reason); `linux.py` and `darwin.py` sit side by side.
The engine samples at a probe's phase boundaries and turns deltas into per-probe figures
(`benchd.engine.energy`).
"""
