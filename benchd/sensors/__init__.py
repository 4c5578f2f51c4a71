"""The sensors stage: facts read from the OS, each with its source, never guessed (docs/architecture.md)."""
