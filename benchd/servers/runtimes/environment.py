"""A server's environment (the daemon's minus leaking runtime knobs, plus benchd's and the candidate's) and
the runbook's record of it. Reasons and facts: docs/runtimes.md#server-environment."""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

import msgspec

from benchd.errors import BenchdError
from benchd.schemas import Sweep

#: Names that look like secrets: never recorded, never inherited (`TOKENIZERS_*` are knobs, not tokens).
SECRET_NAME = re.compile(r"TOKEN(?!IZER)|SECRET|PASSW|KEY|CREDENTIAL|AUTH|COOKIE|SESSION", re.IGNORECASE)
REDACTED = "<redacted>"


@dataclass(frozen=True)
class ServerEnv:
    """The child's whole environment, what benchd passed on top, and the inherited names removed."""

    env: dict[str, str]
    passed: dict[str, str] = field(default_factory=dict)
    removed: list[str] = field(default_factory=list)

    def recorded(self) -> dict[str, str]:
        """`passed` with secret-looking values redacted: what rows, events and runbooks may carry."""
        return redact(self.passed)


def matches(name: str, scrub: Iterable[str]) -> bool:
    """An entry ending in `_` is a prefix, any other entry an exact name."""
    return any(name.startswith(s) if s.endswith("_") else name == s for s in scrub)


def build(
    scrub: Iterable[str],
    ours: Mapping[str, str],
    candidate_env: Mapping[str, str],
    inherited: Mapping[str, str] | None = None,
) -> ServerEnv:
    """Inherited environment without the scrubbed names and without every secret-looking one
    (`SECRET_NAME`: an API key in benchd's environment reaches no server), then benchd's settings, then
    the candidate's `env` (wins). `passed` is benchd's settings plus the candidate's `env`."""
    base = dict(os.environ if inherited is None else inherited)
    scrub = tuple(scrub)
    removed = sorted(k for k in base if (matches(k, scrub) or SECRET_NAME.search(k)) and k not in candidate_env)
    for k in removed:
        del base[k]
    passed = {**ours, **candidate_env}
    return ServerEnv(env={**base, **passed}, passed=passed, removed=removed)


def redact(env: Mapping[str, str]) -> dict[str, str]:
    return {k: (REDACTED if SECRET_NAME.search(k) else v) for k, v in sorted(env.items())}


def redact_sweep(sweep: Sweep) -> Sweep:
    """The sweep as results record it: each candidate's secret-looking `env` values `<redacted>` (the
    runbook, and so its pages, exports and the lock built from it, never carry them)."""
    cands = [msgspec.structs.replace(c, env=redact(c.env)) if any(SECRET_NAME.search(k) for k in c.env) else c
             for c in sweep.candidates]
    return msgspec.structs.replace(sweep, candidates=cands)


def supplied(env: Mapping[str, str], source: Mapping[str, str] | None = None, where: str = "env") -> dict[str, str]:
    """A recorded env with each `<redacted>` value supplied from `source` (benchd's environment): the
    name recorded is the variable to set at start; unset, a BenchdError naming it."""
    source = os.environ if source is None else source
    out = dict(env)
    for k, v in env.items():
        if v == REDACTED:
            if k not in source:
                raise BenchdError("secret_not_set", f"{where}.{k} is recorded as {REDACTED} (a secret is never "
                                  f"written down): set {k} in benchd's environment to start the server", f"{where}.{k}")
            out[k] = source[k]
    return out
