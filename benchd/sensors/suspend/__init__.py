"""Suspension sensing: did the machine sleep, or was the server stopped, while a probe ran."""
