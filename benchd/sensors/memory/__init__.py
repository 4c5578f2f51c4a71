"""Memory of a server's process tree: the sampler (`sampler`) over per-OS readers (`readers` for Linux
and psutil, `darwin` for macOS's proc_pid_rusage footprint). Imports the floor only."""
