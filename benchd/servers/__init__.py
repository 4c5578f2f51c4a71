"""The servers stage: inference servers' lifecycle and everything runtime-specific (docs/architecture.md).
A new runtime is one module in `runtimes/` registered in `runtimes.ADAPTERS`."""
