"""The daemon stage: owns the queue and answers on a Unix socket (docs/architecture.md)."""
