"""The daemon stage: the long-running process that owns the queue and answers on a Unix socket
(docs/architecture.md). Entry point: `lifecycle.run_daemon`."""
