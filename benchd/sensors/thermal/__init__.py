"""Thermal readings behind one interface (`sensor.open_sensor`): Linux zones and psutil there, macOS
pressure levels in `darwin`. Imports the floor only."""
