"""llama.cpp `llama-server`: the only module that knows its flags, endpoints and timings shape.
Reasons and facts: docs/runtimes.md#llama-server."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import os
import re
import signal
import subprocess
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import ClassVar

import aiohttp
import msgspec

from benchd.config import HOST
from benchd.errors import BenchdError
from benchd.lifeline import die_with_daemon
from benchd.probe_result import ProbeResult, counter_diff
from benchd.schemas import Candidate
from benchd.schemas.json import JSONObject
from benchd.servers import locate
from benchd.servers.runtimes import base, environment, flags
from benchd.servers.runtimes.vision import VisionFacts, mmproj_facts

#: benchd spec kind -> `--spec-type` value of the pinned build.
SPEC_TYPES: dict[str, str] = {"draft": "draft-simple", "eagle3": "draft-eagle3", "mtp": "draft-mtp"}

_MODEL = "benchd sets it from the candidate's `model`"
#: `common/common.h` `cache_ram_mib` in the pinned build: the host-RAM prompt cache's size (MiB) by default.
CACHE_RAM_DEFAULT_MIB = 8192
_CACHE_RAM = (f"benchd sets it: cold probes run with 0 (no host-RAM prompt cache), sessions with the build's "
              f"default {CACHE_RAM_DEFAULT_MIB} (docs/runtimes.md#llama-server)")
_RESERVED: dict[str, str] = {
    "-m": f"use `model` ({_MODEL})",
    "--model": f"use `model` ({_MODEL})",
    "-hf": "use `model` with a local path (benchd never downloads)",
    "-hfr": "use `model` with a local path (benchd never downloads)",
    "--hf-repo": "use `model` with a local path (benchd never downloads)",
    "-mu": "use `model` with a local path (benchd never downloads)",
    "--model-url": "use `model` with a local path (benchd never downloads)",
    "--host": "benchd always binds 127.0.0.1",
    "--port": "benchd allocates a free port",
    "-c": "use `ctx_size`",
    "--ctx-size": "use `ctx_size`",
    "-md": "use `spec.draft_model`",
    "--model-draft": "use `spec.draft_model`",
    "--spec-draft-model": "use `spec.draft_model`",
    "--spec-type": "use `spec.kind`",
    "--spec-draft-n-max": "use `spec.draft_max`",
    "--api-key": "benchd talks to the server without a key",
    "--api-key-file": "benchd talks to the server without a key",
    "--api-prefix": "benchd needs the default endpoints",
    "-mm": "use `mmproj`",
    "--mmproj": "use `mmproj`",
    "-mmu": "use `mmproj` with a local path (benchd never downloads)",
    "--mmproj-url": "use `mmproj` with a local path (benchd never downloads)",
    "-cram": _CACHE_RAM,
    "--cache-ram": _CACHE_RAM,
}
_RESERVED_ENV: dict[str, str] = {
    "LLAMA_ARG_HOST": "benchd always binds 127.0.0.1",
    "LLAMA_ARG_PORT": "benchd allocates a free port",
    "LLAMA_ARG_MODEL": "use `model`",
    "LLAMA_ARG_CTX_SIZE": "use `ctx_size`",
    "LLAMA_ARG_SPEC_DRAFT_MODEL": "use `spec.draft_model`",
    "LLAMA_ARG_SPEC_TYPE": "use `spec.kind`",
    "LLAMA_ARG_SPEC_DRAFT_N_MAX": "use `spec.draft_max`",
    "LLAMA_ARG_MMPROJ": "use `mmproj`",
    "LLAMA_ARG_CACHE_RAM": _CACHE_RAM,
}


#: KV cache types of the pinned build (common/arg.cpp `kv_cache_types`, what -ctk/-ctv accept).
KV_CACHE_TYPES = ("f32", "f16", "bf16", "q8_0", "q4_0", "q4_1", "iq4_nl", "q5_0", "q5_1")
#: The unquantized ones (src/llama-context.cpp: every other V cache type needs flash attention).
KV_FLOAT_TYPES = ("f32", "f16", "bf16")
#: -fa's values (common/arg.cpp: is_truthy / is_falsey / is_autoy); the default is auto.
FLASH_ATTN_OFF = ("off", "disabled", "false", "0")
_ARG_CPP = "the pinned llama.cpp common/arg.cpp"
FLAG_VALUES: dict[str, flags.FlagValues] = {
    **flags.aliases(("-fa", "--flash-attn"), flags.FlagValues(
        ("on", "off", "auto", "enabled", "disabled", "true", "false", "1", "0", "-1"), f"{_ARG_CPP} --flash-attn")),
    **flags.aliases(("-ctk", "--cache-type-k", "-ctv", "--cache-type-v", "-ctkd", "--cache-type-k-draft",
                     "--spec-draft-type-k", "-ctvd", "--cache-type-v-draft", "--spec-draft-type-v"),
                    flags.FlagValues(KV_CACHE_TYPES, f"{_ARG_CPP} kv_cache_types")),
    **flags.aliases(("-t", "--threads", "-tb", "--threads-batch"), flags.FlagValues(None, f"{_ARG_CPP} --threads")),
    **flags.aliases(("-b", "--batch-size", "-ub", "--ubatch-size"), flags.FlagValues(None, f"{_ARG_CPP}", 1)),
    **flags.aliases(("-np", "--parallel"), flags.FlagValues(None, f"{_ARG_CPP} --parallel", 1)),
    **flags.aliases(("-ncmoe", "--n-cpu-moe"), flags.FlagValues(None, f"{_ARG_CPP} --n-cpu-moe", 0)),
}


#: Inherited variables removed before a start (found with getenv in the pinned sources; `environment`).
ENV_SCRUB = ("LLAMA_", "GGML_", "SPACEMIT_", "OMP_WAIT_POLICY", "ONEAPI_DEVICE_SELECTOR")
_FIT_FLAGS = ("-fit", "--fit")
_CACHE_RAM_FLAGS = ("-cram", "--cache-ram")
_OFFLOADED = re.compile(r"offloaded (\d+)/(\d+) layers to GPU")


#: A fact query (`--help`, `--list-devices`) answers in milliseconds; a binary that hangs must not stall a start.
FACT_TIMEOUT_S = 2.0


def _ask_binary(binary: str, *args: str, timeout_s: float = FACT_TIMEOUT_S, stderr: bool = False) -> str | None:
    """The stdout of `binary args`, or None when it did not answer in time. Runs in its own process group
    with the scrubbed environment; the group is killed afterwards either way, so nothing the query
    started (a wrapper script's background child) outlives it. `stderr=True` merges stderr into the answer
    (`--version` prints there)."""
    env = environment.build(ENV_SCRUB, {}, {}).env  # as the servers run: no inherited LLAMA_ARG_*
    try:
        proc = subprocess.Popen([binary, *args], stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                stderr=subprocess.STDOUT if stderr else subprocess.DEVNULL, text=True, env=env,
                                start_new_session=True, preexec_fn=die_with_daemon())
    except OSError:
        return None
    out: str | None = None
    try:
        out, _ = proc.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        pass
    finally:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, signal.SIGKILL)
        if out is None:
            proc.communicate()
    return out


def _arg_value(args: list[str], names: tuple[str, ...]) -> str | None:
    """The value of the last of `names` in `args`, or None."""
    found = flags.flag_values(args, names)
    return found[-1][1] if found else None


def _mtime(binary: str) -> int:
    try:
        return Path(binary).stat().st_mtime_ns
    except OSError:
        return 0


@functools.lru_cache(maxsize=16)
def _supports_fit(binary: str, mtime_ns: int) -> bool:
    """True when `--help` lists `--fit`, or did not answer: then benchd still passes `--fit off` (every
    build since `--fit` appeared has it, and an older one fails loudly naming the flag, never fits)."""
    text = _ask_binary(binary, "--help")
    return text is None or bool(re.search(r"(^|\s)--fit\b", text))


@functools.lru_cache(maxsize=16)
def _gpu_devices(binary: str, mtime_ns: int) -> tuple[str, ...] | None:
    listing = _ask_binary(binary, "--list-devices")
    if listing is None or "Available devices:" not in listing:
        return None
    return tuple(ln.strip() for ln in listing.split("Available devices:", 1)[1].splitlines()
                 if ln.startswith((" ", "\t")) and ln.strip() and ln.strip() != "(none)")


def supports_fit(binary: str) -> bool:
    """Whether this build's `--help` lists `--fit` (cached per binary and mtime; blocks: call off the loop)."""
    return _supports_fit(binary, _mtime(binary))


def gpu_devices(binary: str) -> tuple[str, ...] | None:
    """The GPU devices `--list-devices` names (empty: a CPU-only build; None: it did not answer)."""
    return _gpu_devices(binary, _mtime(binary))


def _encode_messages(body: Mapping[str, object]) -> bytes:
    """The token-count request's JSON: the chat request's messages alone."""
    return msgspec.json.encode({"messages": body.get("messages")})


class LlamaChecks(base.Checks):
    """llama-server's candidate checks: the KV-cache / flash-attention combination, reserved `LLAMA_ARG_*`
    variables, the `mmproj` file, and its tune matrix."""

    def tune_matrix(self, model: str, binary: str | None, cores: int
                    ) -> tuple[dict[str, Sequence[str | bool]], list[str]]:
        """Threads (half the cores and all of them), flash attention on / off, the K/V cache types f16 and
        q8_0 when this build's `--help` lists them, `-ub` 256 / 512, and `--n-cpu-moe` only for a MoE model
        (its GGUF `<arch>.expert_count`): none, and half of its blocks."""
        from benchd.servers.runtimes.vision import gguf_metadata

        threads = sorted({max(1, cores // 2), max(1, cores)})
        types = [t for t in ("f16", "q8_0") if t in self.build_kv_types(binary)]
        why = [f"-t {' / '.join(map(str, threads))}: half and all of the {cores} usable cores",
               "-fa on / off: flash attention (a quantized V cache needs it: those combinations are left out)",
               f"-ctk, -ctv {' / '.join(types)}: the KV cache types of this build that matter most",
               "-ub 256 / 512: the physical batch (prompt processing speed against its compute buffer)"]
        matrix: dict[str, Sequence[str | bool]] = {"-t": [str(t) for t in threads], "-fa": ["on", "off"], "-ctk": types,
                                        "-ctv": types, "-ub": ["256", "512"]}
        try:
            meta = gguf_metadata(model)
        except (OSError, ValueError):
            meta = {}
        arch = meta.get("general.architecture")
        experts, blocks = meta.get(f"{arch}.expert_count"), meta.get(f"{arch}.block_count")
        if isinstance(experts, int) and experts > 0 and isinstance(blocks, int) and blocks > 1:
            matrix["--n-cpu-moe"] = [False, str(blocks // 2)]
            why.append(f"--n-cpu-moe none / {blocks // 2}: a MoE model ({experts} experts, {blocks} blocks; GGUF "
                       f"{arch}.expert_count): the first N blocks' experts kept on the CPU")
        return matrix, why

    def build_kv_types(self, binary: str | None) -> tuple[str, ...]:
        """The KV cache types the build's `--help` lists (`allowed values:` of -ctk), else the pinned ones."""
        text = _ask_binary(binary, "--help") if binary else None
        found = re.search(r"-ctk,.*?allowed values: ([^\n]+)", text or "", re.S)
        return tuple(t.strip() for t in found.group(1).split(",")) if found else KV_CACHE_TYPES

    def combination_problems(self, candidate: Candidate) -> list[BenchdError]:
        """A quantized V cache with flash attention off: the pinned build refuses to create the context
        (src/llama-context.cpp: "quantized V cache requires flash_attn to be enabled"; -fa auto turns it
        on). A quantized K cache alone runs without flash attention in this build."""
        if not self.pinned_build(candidate):
            return []
        v_type = _arg_value(candidate.args, ("-ctv", "--cache-type-v")) or candidate.env.get("LLAMA_ARG_CACHE_TYPE_V")
        fa = _arg_value(candidate.args, ("-fa", "--flash-attn")) or candidate.env.get("LLAMA_ARG_FLASH_ATTN", "auto")
        if v_type is None or v_type in KV_FLOAT_TYPES or v_type not in KV_CACHE_TYPES or fa not in FLASH_ATTN_OFF:
            return []
        return [BenchdError("refused_combination", f"candidate {candidate.id!r}: a quantized V cache (-ctv {v_type}) "
                            f"needs flash attention, which -fa {fa} turns off (the pinned llama.cpp "
                            "src/llama-context.cpp refuses to start)", f"$.candidates[{candidate.id}].args")]

    def validate(self, candidate: Candidate) -> list[BenchdError]:
        errors = super().validate(candidate)
        if candidate.mmproj is not None and not os.path.isfile(candidate.mmproj):
            errors.insert(0, BenchdError("missing_mmproj", f"candidate {candidate.id!r}: mmproj {candidate.mmproj} "
                                         "does not exist", f"$.candidates[{candidate.id}].mmproj"))
        for key in candidate.env:
            if key in _RESERVED_ENV:
                errors.append(
                    BenchdError(
                        "reserved_env",
                        f"candidate {candidate.id!r}: env {key} is set by benchd; {_RESERVED_ENV[key]}",
                        f"$.candidates[{candidate.id}].env.{key}",
                    )
                )
        return errors


class LlamaLauncher(base.Launcher):
    """llama-server's start: `-m`, `--host`, `--port`, `--metrics`, `-c` per cell, `-np 1`, `--cache-ram 0`,
    `--fit off`, the spec flags; its version from `/props` or `--version`."""

    def command(self, candidate: Candidate, cache_dir: Path) -> tuple[list[str], str]:
        path, how = locate.resolve_llama_binary(candidate.binary, cache_dir)
        supports_fit(str(path))  # --help, here off the event loop (argv reads the cache)
        return [str(path)], how

    def argv(self, candidate: Candidate, *, command: list[str], port: int, ctx_size: int | None) -> list[str]:
        argv = ["-m", candidate.model, "--host", HOST, "--port", str(port), "--metrics"]
        if candidate.mmproj is not None:
            argv += ["--mmproj", candidate.mmproj]
        if ctx_size is not None:
            argv += ["-c", str(ctx_size)]
        if not any(a.split("=", 1)[0] in ("-np", "--parallel") for a in candidate.args):
            argv += ["-np", "1"]
        if _arg_value(candidate.args, _CACHE_RAM_FLAGS) is None:
            argv += ["--cache-ram", "0"]  # finished slots' states would pile up in RSS probe after probe
        asked = any(a.split("=", 1)[0] in _FIT_FLAGS for a in candidate.args) or "LLAMA_ARG_FIT" in candidate.env
        if not asked and supports_fit(command[0]):
            argv += ["--fit", "off"]  # builds without --fit do not fit either
        spec = candidate.spec
        if spec is not None:
            if spec.draft_model is not None:
                argv += ["-md", spec.draft_model]
            assert spec.kind is not None  # resolved when the sweep is decoded (Spec.__post_init__)
            argv += ["--spec-type", SPEC_TYPES[spec.kind]]
            if spec.draft_max is not None:
                argv += ["--spec-draft-n-max", str(spec.draft_max)]
        return [*command, *candidate.args, *argv]  # benchd's own flags last: the parser's last one wins

    def restarts_per_context(self, candidate: Candidate) -> bool:
        """The server's `-c` follows the cell's context unless the candidate pins `ctx_size`."""
        return candidate.ctx_size is None

    def server_ctx_size(self, candidate: Candidate, context: int, gen_tokens: int) -> int | None:
        """`-c` = context + gen_tokens + a margin (memory measured at that context), or the pinned size."""
        if candidate.ctx_size is not None:
            return candidate.ctx_size
        return context + gen_tokens + base.CTX_MARGIN_TOKENS

    def fit_state(self, candidate: Candidate) -> tuple[str | None, str]:
        """`--fit` as started: the candidate's args or env when it asks, else benchd's `off`."""
        for i, arg in enumerate(candidate.args):
            flag, eq, value = arg.partition("=")
            if flag in _FIT_FLAGS:
                given = value if eq else (candidate.args[i + 1] if i + 1 < len(candidate.args) else "")
                return given or "on", f"candidate args ({arg if eq else f'{arg} {given}'})"
        if "LLAMA_ARG_FIT" in candidate.env:
            return candidate.env["LLAMA_ARG_FIT"], "candidate env LLAMA_ARG_FIT"
        return "off", "benchd default (--fit off: the split is what the args say)"

    def layer_split(self, candidate: Candidate, command: list[str], load_log: str) -> tuple[str | None, str]:
        """The server's own "offloaded N/M layers to GPU" line, else why there is none."""
        found = _OFFLOADED.findall(load_log)
        if found:
            n, m = found[-1]
            return f"{n}/{m} layers on GPU", "server:log (load_tensors: offloaded N/M layers to GPU)"
        devices = gpu_devices(command[0])
        if devices == ():
            return None, "CPU-only build (`llama-server --list-devices` lists no GPU): every layer runs on the CPU"
        if devices is None:
            return None, "`llama-server --list-devices` did not answer, and the load log names no split"
        return None, ("this build logs its split ('offloaded N/M layers to GPU') only at log verbosity 4, which "
                      "also logs every request; benchd keeps the default (add `-lv 4` to the args to record it)")

    def server_threads(self, candidate: Candidate) -> tuple[int | None, str]:
        """The largest of `-t`, `-tb`, `-td`, `-tbd` (or `LLAMA_ARG_THREADS`) the candidate sets; unknown
        when none is set (this build's default, -1, lets llama.cpp pick from the machine) or when the
        args place threads themselves (`-C`/`-Cr`/`--cpu-*`: benchd would fight them)."""
        flags = {"-t", "--threads", "-tb", "--threads-batch", "-td", "--threads-draft", "--spec-draft-threads",
                 "-tbd", "--threads-batch-draft", "--spec-draft-threads-batch"}
        placing = ("-C", "-Cr", "-Cb", "-Crb", "--cpu-mask", "--cpu-range", "--cpu-mask-batch", "--cpu-range-batch")
        args = candidate.args
        found: list[int] = []
        for i, arg in enumerate(args):
            key, eq, inline = arg.partition("=")
            if key in placing:
                return None, f"the candidate's args place threads themselves ({key})"
            value = inline if eq else (args[i + 1] if i + 1 < len(args) else "")
            if key in flags and value.lstrip("-").isdigit():
                found.append(int(value))
        if not found and candidate.env.get("LLAMA_ARG_THREADS", "").isdigit():
            return int(candidate.env["LLAMA_ARG_THREADS"]), "env LLAMA_ARG_THREADS"
        if not found:
            return None, "no -t N in the candidate's args (llama.cpp then picks a count from the machine)"
        if min(found) < 1:
            return None, "a thread count below 1 lets llama.cpp pick from the machine"
        return max(found), "the candidate's -t/-tb/-td args"

    def memory_note(self, candidate: Candidate) -> str | None:
        """This build's load mode: `-lm` / `--load-mode` (none|mmap|mlock|mmap+mlock|dio), else the
        candidate's `LLAMA_ARG_LOAD_MODE`, else the default `auto` (mmap unless a device cannot). With mmap
        the weights are file-backed pages: Linux counts them in RSS (RssFile, inside VmHWM); macOS leaves
        them out of phys_footprint, so the memory axis adds the mapped model files' resident bytes there.
        Also the host-RAM prompt cache's size (`--cache-ram`, set by benchd), which would hold finished slots."""
        env = {**os.environ, **candidate.env}  # what the server's environment will carry (`environment`)
        mode, how = env.get("LLAMA_ARG_LOAD_MODE", "auto"), "env LLAMA_ARG_LOAD_MODE"
        if "LLAMA_ARG_LOAD_MODE" not in env:
            how = "default: mmap unless a device cannot"
        for i, arg in enumerate(candidate.args):
            for flag in ("--load-mode", "-lm"):
                if arg.startswith(flag + "="):
                    mode, how = arg.split("=", 1)[1], flag
                elif arg == flag and i + 1 < len(candidate.args):
                    mode, how = candidate.args[i + 1], flag
        ram = _arg_value(candidate.args, _CACHE_RAM_FLAGS) or "0"
        return (f"load mode {mode} ({how}); host-RAM prompt cache --cache-ram {ram} MiB (benchd; 0 = off, so "
                "finished probes' states are not kept)")

    async def check_ready(self, base_url: str) -> base.Readiness:
        return await base.json_health(base_url, self.runtime.health_path, ("ok",))

    async def version(self, base_url: str, command: list[str]) -> str | None:
        try:
            status, raw = await base.http_get(base_url, "/props", timeout_s=5.0)
            doc = msgspec.json.decode(raw) if status == 200 else None
        except (aiohttp.ClientError, TimeoutError, msgspec.DecodeError):
            return None
        info = doc.get("build_info") if isinstance(doc, dict) else None
        return f"llama.cpp {info}" if isinstance(info, str) and info else None

    def installed_version(self, command: list[str]) -> str | None:
        """`--version` (`version: 0.5.0-dev (build 1, commit 0c1e570)`) in `/props`' format: `llama.cpp b1-0c1e570`."""
        from benchd.servers.locate import parse_llama_version

        # Through the fact query (own process group, killed after): a binary that ignores --version and
        # serves (a wrapper, a fake) must neither stall the runbook nor outlive the question.
        answer = _ask_binary(command[0], "--version", timeout_s=5.0, stderr=True)
        build = parse_llama_version(answer) if answer else None
        return f"llama.cpp {build}" if build else None


class LlamaRequests(base.Requests):
    """llama-server's requests: `cache_prompt` false, `ignore_eos` on probes that run to length; `/tokenize`,
    `/apply-template` and `/v1/chat/completions/input_tokens` for token counts."""

    def runtime_fields(self) -> JSONObject:
        return {"cache_prompt": False}  # or a cached prefix fakes the prompt throughput

    def length_fields(self, candidate: Candidate, run_to_length: bool) -> JSONObject:
        return {"ignore_eos": run_to_length}

    async def count_tokens(self, base_url: str, text: str) -> int | None:
        """Exact token count of `text` with the loaded model's tokenizer (`POST /tokenize`)."""
        try:
            status, raw = await base.http_post_json(base_url, "/tokenize", {"content": text}, timeout_s=60.0)
            doc = msgspec.json.decode(raw) if status == 200 else None
        except (aiohttp.ClientError, TimeoutError, msgspec.DecodeError):
            return None
        tokens = doc.get("tokens") if isinstance(doc, dict) else None
        return len(tokens) if isinstance(tokens, list) else None

    async def count_request_tokens(self, base_url: str, body: Mapping[str, object]) -> int | None:
        """The prompt tokens of a chat request, images included, as the server would process it
        (`POST /v1/chat/completions/input_tokens`, tools/server/server.cpp): no generation runs. The body
        (megabytes of base64 images) is encoded off the event loop."""
        data = await asyncio.to_thread(_encode_messages, body)
        try:
            status, raw = await base.http_post_json(base_url, "/v1/chat/completions/input_tokens", data, timeout_s=60.0)
            doc = msgspec.json.decode(raw) if status == 200 else None
        except (aiohttp.ClientError, TimeoutError, msgspec.DecodeError):
            return None
        got = doc.get("input_tokens") if isinstance(doc, dict) else None
        return got if isinstance(got, int) and not isinstance(got, bool) else None

    async def rendered_tokens(self, base_url: str, candidate: Candidate, command: list[str],
                              items: list[base.RenderItem], thinking: str) -> list[list[int]]:
        """`POST /apply-template` (the template as chat requests render it), then `POST /tokenize` of the
        rendering plus the appended text with special tokens added and parsed, as chat prompts are."""
        out: list[list[int]] = []
        for msgs, suffix in items:
            body: dict[str, object] = {"messages": msgs}
            if thinking != "default":
                body["chat_template_kwargs"] = {"enable_thinking": thinking == "on"}
            status, raw = await base.http_post_json(base_url, "/apply-template", body, timeout_s=60.0)
            doc = msgspec.json.decode(raw) if status == 200 else None
            prompt = doc.get("prompt") if isinstance(doc, dict) else None
            if not isinstance(prompt, str):
                raise RuntimeError(f"llama-server /apply-template answered HTTP {status}: {raw[:200]!r}")
            status, raw = await base.http_post_json(base_url, "/tokenize", {
                "content": prompt + suffix, "add_special": True, "parse_special": True}, timeout_s=60.0)
            doc = msgspec.json.decode(raw) if status == 200 else None
            tokens = doc.get("tokens") if isinstance(doc, dict) else None
            if not isinstance(tokens, list):
                raise RuntimeError(f"llama-server /tokenize answered HTTP {status}: {raw[:200]!r}")
            out.append([int(t) for t in tokens])
        return out


class LlamaReader(base.Reader):
    """llama-server's answers: rates from `timings`; draft acceptance cross-checked against `/metrics`."""

    def normalize(self, result: ProbeResult, *, spec_configured: bool) -> base.Normalized:
        """llama-server: prompt/gen rates from `timings`; the client window is recorded beside them."""
        return self.normalize_timings(result, spec_configured=spec_configured)

    def eos_gap(self, candidate: Candidate) -> str:
        return "llama-server ended before max_tokens although ignore_eos was sent (context full?)"

    def acceptance_check(self, before: Mapping[str, float], after: Mapping[str, float] | None) -> dict[str, str]:
        """Draft acceptance from the `/metrics` spec_decode counters diffed over the probe."""
        if after is None:
            return {"draft_acceptance_check": "unavailable: /metrics did not answer after the probe"}
        acceptance = acceptance_from_metrics(counter_diff(before, after))
        if acceptance is None:
            return {"draft_acceptance_check": "unavailable: no spec_decode counters moved in /metrics"}
        return {"draft_acceptance_check": f"{acceptance:.4f} (server:/metrics counter diff)"}


class LlamaSessions(base.Sessions):
    """llama-server's sessions: a start with the host-RAM prompt cache, `cache_prompt` per turn."""

    def session_start(self, candidate: Candidate) -> base.SessionStart:
        """A start of its own with the host-RAM prompt cache at the build's default (cold probes run with
        `--cache-ram 0`); the cache itself is a per-request switch (`cache_prompt`)."""
        started = msgspec.structs.replace(candidate, args=[*candidate.args, "--cache-ram", str(CACHE_RAM_DEFAULT_MIB)])
        return base.SessionStart(started, True, f"llama-server cache_prompt: true per request; --cache-ram "
                                                f"{CACHE_RAM_DEFAULT_MIB} MiB (the build's default, common/common.h "
                                                "cache_ram_mib) keeps idle slots' prompts, a server start of its own: "
                                                "cold probes run with --cache-ram 0")

    def session_fields(self) -> JSONObject:
        return {"cache_prompt": True}


class LlamaParallel(base.Parallel):
    """llama-server's parallel requests: `-np N` slots, `-c` = N x one request's context."""

    slots_flags = ("-np", "--parallel")

    def parallel_start(self, candidate: Candidate, level: int, ctx_size: int | None) -> base.ParallelStart:
        """`-np N` (unless the candidate sets the slots) and `-c` = N x one request's context."""
        slots, given = self.parallel_slots(candidate)
        args = candidate.args if slots is not None else [*candidate.args, "-np", str(level)]
        started = msgspec.structs.replace(candidate, args=args)
        total = ctx_size * level if ctx_size is not None else None
        how = given or f"-np {level}"
        notes = f"llama-server {how}, -c {total} (= {level} x {ctx_size} per slot)" if total else f"llama-server {how}"
        return base.ParallelStart(started, total, notes)

    async def slot_facts(self, base_url: str) -> dict[str, str]:
        """`/props`: the per-slot context and the slot count as the server runs them."""
        try:
            status, raw = await base.http_get(base_url, "/props", timeout_s=5.0)
            doc = msgspec.json.decode(raw) if status == 200 else None
        except (aiohttp.ClientError, TimeoutError, msgspec.DecodeError):
            return {}
        if not isinstance(doc, dict):
            return {}
        out: dict[str, str] = {}
        n_ctx = (doc.get("default_generation_settings") or {}).get("n_ctx")
        if isinstance(n_ctx, int):
            out["slot_n_ctx"] = f"{n_ctx} (server:/props default_generation_settings.n_ctx, per slot)"
        if isinstance(doc.get("total_slots"), int):
            out["slots"] = f"{doc['total_slots']} (server:/props total_slots)"
        return out


class LlamaImages(base.Images):
    """llama-server's images: through the candidate's `mmproj` projector."""

    def vision_facts(self, candidate: Candidate) -> VisionFacts:
        """Images need a projector: the candidate's `mmproj` GGUF, read for its vision encoder."""
        if candidate.mmproj is None:
            return VisionFacts(False, "llama-server needs `mmproj` (the model's projector GGUF) for images")
        return mmproj_facts(candidate.mmproj)


class LlamaTools(base.Tools):
    """llama-server's tool calls: the chat format `/slots` reports."""

    async def tool_parser(self, base_url: str, candidate: Candidate, command: list[str]) -> str | None:
        """The chat format of the last request, from `GET /slots` `params.chat_format` (the format is
        chosen per request from the template and the tools; `/props` does not show it). The slot that
        served most recently (highest `id_task`) is read."""
        try:
            status, raw = await base.http_get(base_url, "/slots", timeout_s=5.0)
            doc = msgspec.json.decode(raw) if status == 200 else None
        except (aiohttp.ClientError, TimeoutError, msgspec.DecodeError):
            return None
        slots = [s for s in doc if isinstance(s, dict) and isinstance(s.get("params"), dict)] if isinstance(doc, list) else []
        slots.sort(key=lambda s: int(s["id_task"]) if isinstance(s.get("id_task"), int) else -1)
        fmt = slots[-1]["params"].get("chat_format") if slots else None
        return f"llama-server chat format {fmt}" if isinstance(fmt, str) and fmt else None


class LlamaServerAdapter(base.RuntimeAdapter):
    """llama-server's facts and parts."""

    name: ClassVar[str] = "llama-server"
    spec_kinds: ClassVar[tuple[str, ...]] = tuple(SPEC_TYPES)
    spec_kinds_without_draft: ClassVar[tuple[str, ...]] = ("mtp",)
    reserved_args: ClassVar[dict[str, str]] = _RESERVED
    version_source: ClassVar[str] = "server:/props build_info"
    reads_counters: ClassVar[bool] = True  # started with --metrics
    env_scrub: ClassVar[tuple[str, ...]] = ENV_SCRUB
    #: tools/server/server.cpp logs `srv load_model: model loaded` once the weights are in (before /health's 200).
    load_marker: ClassVar[str | None] = "model loaded"
    #: server.cpp's signal_handler: the first SIGTERM waits for a streaming request to end, a second exits at once.
    term_again_s: ClassVar[float | None] = 0.2

    takes_mmproj: ClassVar[bool] = True
    request_count_source: ClassVar[str] = "server:POST /v1/chat/completions/input_tokens"
    flag_values: ClassVar[dict[str, flags.FlagValues]] = FLAG_VALUES

    checks_part = LlamaChecks
    launcher_part = LlamaLauncher
    requests_part = LlamaRequests
    reader_part = LlamaReader
    sessions_part = LlamaSessions
    parallel_part = LlamaParallel
    images_part = LlamaImages
    tools_part = LlamaTools


#: Counter names in llama-server's `/metrics` for the acceptance cross-check.
METRIC_DRAFT_TOKENS = "llamacpp:spec_decode_num_draft_tokens_total"
METRIC_DRAFT_ACCEPTED = "llamacpp:spec_decode_num_accepted_tokens_total"


def acceptance_from_metrics(diff: Mapping[str, float]) -> float | None:
    """Acceptance over one probe from the `/metrics` counter difference (None without spec counters)."""
    drafted = diff.get(METRIC_DRAFT_TOKENS)
    accepted = diff.get(METRIC_DRAFT_ACCEPTED)
    if drafted is None or accepted is None or drafted <= 0:
        return None
    return accepted / drafted
