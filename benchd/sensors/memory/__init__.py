"""Memory of a server's process tree: the sampler (`sampler`) over per-OS readers side by side (`linux`
for /proc, `darwin` for proc_pid_rusage / region walk / vm_statistics64, `readers` for the interface and
the psutil fallback), chosen in `sources`. Imports the floor only."""
