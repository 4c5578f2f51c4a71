"""Thermal readings behind one interface (`sensor.open_sensor`); macOS pressure levels in `darwin`."""
