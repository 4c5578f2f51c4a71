"""Prompts that put a target number of tokens in front of generation, unique per probe.
Reasons: docs/measuring.md#prompt-sizing.
"""

from __future__ import annotations

import bisect
import hashlib
import json
import secrets
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Literal, TypedDict

from benchd.engine.corpus import Corpus, load_corpus

# The request template: bump TEMPLATE_VERSION whenever any of these strings change.
TEMPLATE_VERSION = 1
HEADER_FORMAT = "{nonce} # probe {tag}\n"
INSTRUCTION = "Continue this Python code:\n\n"
NONCE_DIGITS = 12  # fixed-width decimal: tokenizes to a near-constant number of tokens

# Calibration constants.
FIRST_GUESS_CHARS_PER_TOKEN = 1.0  # undershoots for any real tokenizer: never overflows the context
SIZING_TOLERANCE = 0.005  # an observation this close to the target makes the estimate reliable
MAX_TOKENIZER_CALLS = 24

CountTokens = Callable[[str], Awaitable[int]]
Method = Literal["tokenizer", "calibrated", "first-guess"]


def template_sha256() -> str:
    """Hash of everything that wraps the corpus in a request (header, instruction, message layout)."""
    doc = {
        "version": TEMPLATE_VERSION,
        "header": HEADER_FORMAT,
        "instruction": INSTRUCTION,
        "nonce_digits": NONCE_DIGITS,
        "messages": [{"role": "user", "content": "{header}{instruction}{corpus}"}],
    }
    return hashlib.sha256(json.dumps(doc, sort_keys=True).encode()).hexdigest()


class PromptProvenance(TypedDict):
    """The prompts' record in an event payload (`prompts`): the corpus and the hashes."""

    corpus: dict[str, object]
    corpus_sha256: str
    template_sha256: str


def prompt_provenance(corpus: Corpus | None = None) -> PromptProvenance:
    """What the runbook records so two runs can show they used the same prompts."""
    c = corpus or load_corpus()
    return PromptProvenance(corpus=c.describe(), corpus_sha256=c.sha256, template_sha256=template_sha256())


def messages(prompt_text: str) -> list[dict[str, str]]:
    """The chat messages a probe sends. No system message: the unique line must come first."""
    return [{"role": "user", "content": prompt_text}]


@dataclass(frozen=True)
class Prompt:
    """One probe's prompt (`text`: the user message). `estimated_tokens`: the server-reported count
    expected, template included; `counted_tokens`: the tokenizer's count of `text` (tokenizer mode)."""

    text: str
    target_tokens: int
    estimated_tokens: int
    tag: str
    nonce: str
    key: str
    method: Method
    body_chars: int
    counted_tokens: int | None = None
    tokenizer_calls: int = 0
    corpus_cycles: int = 1

    def messages(self) -> list[dict[str, str]]:
        return messages(self.text)


@dataclass
class _KeyState:
    points: list[tuple[int, int]] = field(default_factory=list)  # (len(text), reported), sorted
    overheads: list[int] = field(default_factory=list)  # reported - counted (tokenizer mode)
    tokenizer_cpt: float | None = None  # chars per counted token, for the search's first guess


class Calibrator:
    """Learns, per key (candidate), how prompt characters map to the tokens the server reports."""

    def __init__(self) -> None:
        self._keys: dict[str, _KeyState] = {}

    def _state(self, key: str) -> _KeyState:
        return self._keys.setdefault(key, _KeyState())

    def observe(self, key: str, text_chars: int, reported: int, counted: int | None = None) -> None:
        st = self._state(key)
        if counted is not None:
            st.overheads.append(reported - counted)
        # Same length seen again: keep the mean (only the nonce's tokenization differs).
        i = bisect.bisect_left(st.points, (text_chars, -(2**62)))
        if i < len(st.points) and st.points[i][0] == text_chars:
            st.points[i] = (text_chars, round((st.points[i][1] + reported) / 2))
        else:
            st.points.insert(i, (text_chars, reported))

    def overhead(self, key: str) -> int | None:
        """Template tokens the server adds to the tokenizer's count (median of observations)."""
        ov = sorted(self._state(key).overheads)
        return ov[len(ov) // 2] if ov else None

    def chars_for(self, key: str, target: int) -> tuple[int, bool]:
        """Characters of prompt text expected to give `target` reported tokens; (chars, learned)."""
        pts = self._state(key).points
        if not pts:
            return max(1, round(target * FIRST_GUESS_CHARS_PER_TOKEN)), False
        # piecewise-linear through (0, 0) and the observations; beyond them the secant of the two largest
        prev_c, prev_t = 0, 0
        for c, t in pts:
            if t >= target and t > prev_t:
                frac = (target - prev_t) / (t - prev_t)
                return max(1, round(prev_c + frac * (c - prev_c))), True
            if t > prev_t:
                prev_c, prev_t = c, t
        c, t = prev_c, prev_t
        if len(pts) >= 2:
            c0, t0 = pts[-2]
            if c - c0 >= 0.02 * c and t > t0:
                return max(1, round(c + (target - t) * (c - c0) / (t - t0))), True
        return max(1, round(c * target / t)) if t > 0 else max(1, target), True

    def estimate_tokens(self, key: str, text_chars: int) -> int:
        """Forward estimate (reported tokens for a text of `text_chars`), for the Prompt record."""
        pts = self._state(key).points
        if not pts:
            return round(text_chars / FIRST_GUESS_CHARS_PER_TOKEN)
        prev_c, prev_t = 0, 0
        for c, t in pts:
            if c >= text_chars and c > prev_c:
                return round(prev_t + (text_chars - prev_c) * (t - prev_t) / (c - prev_c))
            prev_c, prev_t = c, t
        return round(prev_t * text_chars / prev_c) if prev_c else text_chars

    def needs_sizing(self, key: str, target: int, tokenizer: bool = False) -> bool:
        """True until an observation backs `target`'s estimate (with a tokenizer: any one)."""
        st = self._state(key)
        if tokenizer:
            return not st.overheads
        return not any(abs(t - target) <= SIZING_TOLERANCE * target for _, t in st.points)


def _tag_key(tag: str) -> str:
    parts = tag.split("/")
    return parts[1] if len(parts) >= 4 and parts[1] else "default"


async def _search(goal: int, count: Callable[[int], Awaitable[int]], cpt: float, counted: dict[int, int]) -> int:
    """The largest body size whose count is <= goal, by interpolation search then bisection."""
    lo, lo_t = 0, await count(0)  # header-only text: tokens(lo) <= goal unless target is tiny
    hi: int | None = None
    prev = (0, lo_t)
    guess = max(1, round((goal - lo_t) * cpt))
    while lo_t < goal and len(counted) < MAX_TOKENIZER_CALLS:
        t = await count(guess)
        if t == goal:
            return guess
        if t < goal:
            lo, lo_t = guess, t
        else:
            hi = guess
        if hi is not None and hi - lo <= 1:
            break
        guess, prev = _next_guess(guess, t, prev, goal, (lo, hi), cpt, counted), (guess, t)
    return lo


def _next_guess(guess: int, t: int, prev: tuple[int, int], goal: int, bracket: tuple[int, int | None], cpt: float,
                counted: dict[int, int]) -> int:
    """The secant's next body size, one character past its estimate, inside the bracket."""
    lo, hi = bracket
    px, pt = prev
    rate = (t - pt) / (guess - px) if guess != px and t != pt else 1 / cpt
    step = (goal - t) / rate
    nxt = guess + round(step) + (1 if step > 0 else -1)
    upper = hi - 1 if hi is not None else nxt
    nxt = min(max(nxt, lo + 1), upper)
    if nxt in counted:
        nxt = (lo + hi) // 2 if hi is not None else lo + max(1, guess - lo)
    return nxt


class PromptBuilder:
    """Builds unique prompts of a target size; one builder serves a whole sweep (keys = candidates)."""

    def __init__(self, corpus: Corpus | None = None, calibrator: Calibrator | None = None) -> None:
        self.corpus = corpus or load_corpus()
        self.calibrator = calibrator or Calibrator()

    @property
    def corpus_hash(self) -> str:
        return self.corpus.sha256

    def provenance(self) -> PromptProvenance:
        return prompt_provenance(self.corpus)

    def _compose(self, tag: str, nonce: str, body_chars: int) -> tuple[str, int]:
        header = HEADER_FORMAT.format(tag=tag.replace("\n", " "), nonce=nonce) + INSTRUCTION
        body, cycles = self.corpus.take(max(0, body_chars))
        return header + body, cycles

    def _header_len(self, tag: str, nonce: str) -> int:
        return len(HEADER_FORMAT.format(tag=tag.replace("\n", " "), nonce=nonce) + INSTRUCTION)

    def needs_sizing(self, target_tokens: int, key: str, tokenizer: bool = False) -> bool:
        return self.calibrator.needs_sizing(key, target_tokens, tokenizer)

    async def build(
        self,
        target_tokens: int,
        tag: str,
        count_tokens: CountTokens | None = None,
        *,
        key: str | None = None,
        nonce: str | None = None,
    ) -> Prompt:
        """A prompt expected to make the server report `target_tokens` prompt tokens. `tag`:
        `<job>/<candidate>/<context>/<probe>`, whose candidate is the default `key`; `count_tokens`: the
        server's tokenizer on a text, without the chat template."""
        if target_tokens < 1:
            raise ValueError("target_tokens must be >= 1")
        key = key or _tag_key(tag)
        nonce = nonce or str(secrets.randbelow(10**NONCE_DIGITS)).zfill(NONCE_DIGITS)
        hlen = self._header_len(tag, nonce)
        if count_tokens is not None:
            return await self._build_counted(target_tokens, tag, nonce, key, hlen, count_tokens)
        chars, learned = self.calibrator.chars_for(key, target_tokens)
        text, cycles = self._compose(tag, nonce, chars - hlen)
        return Prompt(
            text=text, target_tokens=target_tokens,
            estimated_tokens=self.calibrator.estimate_tokens(key, len(text)), tag=tag, nonce=nonce,
            key=key, method="calibrated" if learned else "first-guess", body_chars=max(0, chars - hlen),
            corpus_cycles=cycles,
        )

    async def _build_counted(
        self, target: int, tag: str, nonce: str, key: str, hlen: int, count_tokens: CountTokens
    ) -> Prompt:
        """The largest body whose counted tokens + template overhead <= target (usually == target)."""
        overhead = self.calibrator.overhead(key) or 0
        st = self.calibrator._state(key)
        cache: dict[int, int] = {}

        async def count(body_chars: int) -> int:
            if body_chars not in cache:
                cache[body_chars] = await count_tokens(self._compose(tag, nonce, body_chars)[0])
            return cache[body_chars]

        best = await _search(max(1, target - overhead), count, st.tokenizer_cpt or 3.0, cache)
        counted = cache[best]
        if best > 0 and counted > 0:
            st.tokenizer_cpt = best / max(1, counted - cache[0])
        text, cycles = self._compose(tag, nonce, best)
        return Prompt(
            text=text, target_tokens=target, estimated_tokens=counted + overhead, tag=tag, nonce=nonce,
            key=key, method="tokenizer", body_chars=best, counted_tokens=counted, tokenizer_calls=len(cache),
            corpus_cycles=cycles,
        )

    def observe(self, prompt: Prompt, reported_prompt_tokens: int) -> float:
        """Feed back the server's `usage.prompt_tokens`; returns the relative error vs the target."""
        self.calibrator.observe(prompt.key, len(prompt.text), reported_prompt_tokens, prompt.counted_tokens)
        return (reported_prompt_tokens - prompt.target_tokens) / prompt.target_tokens
