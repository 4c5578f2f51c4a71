"""Exit codes of every benchctl command (the shared contract)."""

OK = 0  # ok / job succeeded
FAILED = 1  # the job failed, or `doctor` found a problem
BAD_INPUT = 2  # bad file, field or id; also a refused lock
UNREACHABLE = 3  # daemon unreachable
CANCELLED = 4  # the job was cancelled
