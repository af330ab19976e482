"""An `InferenceEngine` over HTTP: one or many SGLang servers (or `areal serve`, which speaks the same API).

Checked against SGLang 0.5.23's own source (sglang/srt/entrypoints/http_server.py, managers/io_struct.py,
utils/weight_versions.py), not memory:

  POST /generate {input_ids, sampling_params, return_logprob, rid}
       -> 200 {text, output_ids, meta_info: {finish_reason: {type: stop|length|abort, ...},
               output_token_logprobs: [[logprob, token_id, text|null], ...], weight_version,
               weight_versions: [{version, start, end}, ...], num_retractions, ...}}
       -> 400 {error: {message}} for a request SGLang rejects.
  POST /pause_generation {mode: abort|retract|in_place};  POST /continue_generation {}
  POST /update_weights_from_disk {model_path, weight_version} -> {success, message, num_paused_requests}
  GET /health, /model_info;  POST /abort_request {rid}
  POST /init_weights_update_group {master_address, master_port, rank_offset, world_size, group_name, backend}
  POST /begin_weight_update;  POST /end_weight_update   (around the buckets of one update)
  POST /update_weights_from_distributed {names, dtypes, shapes, group_name, flush_cache, weight_version, load_format}
  POST /destroy_weights_update_group {group_name};  GET /get_server_info {tp_size, dp_size, ...}

Behaviour:

- Load balancing: a request goes to the usable server with the fewest requests in flight. Request ids are
  sticky: a request that is resubmitted (after an abort), and a later call with the same `rid` (a next turn,
  a sample of the same prompt), goes back to the server that served that rid while it is usable, so it
  finds its prefix in that server's cache.
- Failures: a connection error, a timeout (`request_timeout`) or a 5xx / malformed answer marks the server
  down for `down_seconds` and the request is resubmitted to another server after an exponential back-off
  (`backoff` * 2**k, at most `max_backoff`), up to `max_retries` times. The tokens a dead server was
  producing are lost; tokens already received are kept and the request continues from them.
  A 400 (or 422) is the caller's mistake: EngineError at once, with the server's message.
- Interruptions: a request that comes back with finish_reason "abort" (e.g. `pause(mode="abort")` before a
  weight update) is resubmitted as prompt + tokens so far with the remaining token budget, so from the
  caller's side it simply completes; each token keeps the weight version the server reported for it.
  `num_interruptions` counts aborts plus the server's retractions (`num_retractions`).
- Control calls (pause, continue, update weights) are broadcast to every server not already lost. They are
  idempotent, so a connection-level failure (refused, reset, closed without an answer) is retried
  `control_retries` times after the same back-off; a server still unreachable after that is marked lost (it
  may now hold other weights than the rest, or stay paused) and gets no more requests. A timeout is not
  retried. The call fails only when no server succeeded, or when a server rejected the call itself (HTTP
  4xx, success=false: e.g. a bad checkpoint path), which raises EngineError.
- Connections this client closed itself: httpcore's pool (1.0.9) can close a connection it has just handed to a
  request, under that request (encode/httpcore#1110; it closes surplus idle connections by counting all of them).
  Such a request is sent again at once to the same server, which is not marked down and has no failure counted:
  the server did nothing wrong. Idle connections are not capped, which avoids the surplus pass altogether.
- Keep-alive: idle connections are closed by the client after 2 s, long before the server's own keep-alive
  timeout can close one under a request being sent on it (that race resets the request). Servers areal
  launches keep idle connections 65 s (`areal serve`; SGLANG_TIMEOUT_KEEP_ALIVE for SGLang); SGLang's own
  default, 5 s, leaves a margin that a client stalled for 3 s on a loaded machine loses: set
  SGLANG_TIMEOUT_KEEP_ALIVE=65 on servers you start yourself.
- Versions: SGLang reports per-span versions (`weight_versions`) as strings; they are parsed as integers.
  "default" (SGLang's version of the weights it was launched with when no --weight-version is given)
  counts as 0. `areal serve` also sends every token's version (`output_token_weight_versions`).
- Log-probabilities: those of the distribution each token was drawn from (engine/protocol.py): the server's
  `output_token_logprobs` (log softmax(logits / T); T = 1 for greedy) without truncation; with top-p / top-k,
  the request asks for the sampling support (`return_sampling_mask`) and takes SGLang's
  `output_token_sampling_logprobs`, the log-probs renormalised over the kept tokens.
- A server started with SGLANG_RETURN_ORIGINAL_LOGPROB=1 returns log softmax(logits), before the temperature:
  with T != 1 every importance weight would be wrong. The sglang backend tells the client when its servers have
  it (it is set in this environment, which the servers inherit), and the client then refuses such requests; a
  server started elsewhere with it cannot be detected.
- `text` is the concatenation of the servers' texts for each segment; decode `output_ids` with the
  tokenizer where exact text across an interruption matters.

Real SGLang 0.5.23 does not check token ids against the vocabulary: an out-of-range id crashes the server
process. Give the client `vocab_size` to reject such prompts before they are sent (areal serve answers 400).
"""
from __future__ import annotations

import asyncio
import collections
import logging
import os
import time
import uuid
from dataclasses import dataclass
from typing import Any, Mapping, Sequence

import anyio
import httpx

from areal_core.engine.weight_sync import WEIGHT_GROUP, Bucket
from areal_core.engine.protocol import (
    EngineError,
    GenerateOutput,
    GenerateRequest,
    PauseMode,
    truncates,
    validate_request,
)

log = logging.getLogger(__name__)

_CALLER_ERRORS = (400, 422)   # the request itself is wrong: no other server would accept it either
_KEEPALIVE_EXPIRY = 2.0       # seconds; below the servers' keep-alive timeout (see the module docstring)
_CONNECTION_ERRORS = (httpx.NetworkError, httpx.RemoteProtocolError)  # no answer came back; not a timeout


@dataclass(frozen=True)
class _NoAnswer:
    """Why a /generate call brought no usable answer; `server_at_fault` is False when this client closed the
    connection itself (the server is fine: send the request again at once)."""
    why: str
    server_at_fault: bool = True


def closed_by_this_client(exc: BaseException) -> bool:
    """True when the connection under `exc` was closed by this process, not by the server or the network:
    anyio's ClosedResourceError (our own socket closed) under httpcore's and httpx's errors. A reset or a close
    by the server is a BrokenResourceError or an end of stream instead."""
    seen: set[int] = set()
    error: BaseException | None = exc
    while error is not None and id(error) not in seen:
        if isinstance(error, anyio.ClosedResourceError):
            return True
        seen.add(id(error))
        error = error.__cause__ or error.__context__
    return False


@dataclass
class _Server:
    url: str
    in_flight: int = 0
    down_until: float = 0.0     # temporarily avoided after a failure, until this monotonic time
    lost: bool = False          # missed a control call: never used again by this client
    failures: int = 0
    segments: int = 0           # /generate answers received (a resubmitted request counts each segment)

    def usable(self, now: float) -> bool:
        return not self.lost and now >= self.down_until


def _parse_version(value: Any) -> int:
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    text = str(value).strip()
    if text == "default":
        return 0
    try:
        return int(text)
    except ValueError:
        raise EngineError(f"weight version {value!r} from the server is not an integer "
                          "(launch SGLang with --weight-version N and update with integer versions)") from None


def truncated_logprobs_from_meta(meta: dict[str, Any], n_tokens: int, url: str) -> list[float]:
    """The sampled tokens' log-probs under the truncated distribution (`return_sampling_mask`'s
    `output_token_sampling_logprobs`, cumulative over the request like the other per-token lists: the last
    `n_tokens` are this answer's)."""
    values = meta.get("output_token_sampling_logprobs")
    if not isinstance(values, list) or len(values) < n_tokens:
        raise EngineError(f"{url} returned no sampling-support log-probs for a top-p/top-k request (needs SGLang "
                          f">= 0.5.23, which answers return_sampling_mask); got {type(values).__name__}")
    return [float(v) for v in values[len(values) - n_tokens:]] if n_tokens else []


def returns_original_logprobs(environ: Mapping[str, str]) -> bool:
    """Whether SGLang servers started with this environment return log-probs before the temperature
    (SGLANG_RETURN_ORIGINAL_LOGPROB, read as SGLang reads a boolean)."""
    return environ.get("SGLANG_RETURN_ORIGINAL_LOGPROB", "").strip().lower() in ("1", "true", "yes", "on")


def versions_from_meta(meta: dict[str, Any], n_tokens: int) -> list[int]:
    """Per-token weight versions from a /generate `meta_info`.

    areal serve's `output_token_weight_versions` (one per token) when present, else SGLang's spans
    `weight_versions: [{version, start, end}]`; tokens no span covers take `weight_version` (the version at
    the end of the request), as do all tokens of a server that reports no spans.
    """
    per_token = meta.get("output_token_weight_versions")
    if isinstance(per_token, list) and len(per_token) >= n_tokens:
        return [_parse_version(v) for v in per_token[:n_tokens]]
    fill = _parse_version(meta["weight_version"]) if meta.get("weight_version") is not None else 0
    versions = [fill] * n_tokens
    for span in meta.get("weight_versions") or []:
        version = _parse_version(span["version"])
        for i in range(max(0, int(span["start"])), min(n_tokens, int(span["end"]))):
            versions[i] = version
    return versions


class SGLangEngine:
    """Client for SGLang-compatible servers, e.g. `SGLangEngine(["http://127.0.0.1:30000", ...])`.

    request_timeout: seconds for one /generate answer (a server slower than this counts as failed);
    connect_timeout: seconds to open a connection; control_timeout: seconds for pause/continue/update/health;
    control_retries: extra attempts of a control call whose connection failed before the server is dropped;
    vocab_size: when given, prompts with token ids outside [0, vocab_size) are rejected before sending.
    """

    def __init__(self, urls: Sequence[str], *, request_timeout: float = 3600.0, connect_timeout: float = 5.0,
                 control_timeout: float = 600.0, max_retries: int = 5, backoff: float = 0.5,
                 max_backoff: float = 8.0, down_seconds: float = 10.0, control_retries: int = 2,
                 max_aborts: int = 1000, vocab_size: int | None = None, sticky_capacity: int = 100_000,
                 original_logprobs: bool = False) -> None:
        if not urls:
            raise EngineError("SGLangEngine needs at least one server URL, got none")
        bad = [u for u in urls if not str(u).startswith(("http://", "https://"))]
        if bad:
            raise EngineError(f"server URL {bad[0]!r} must start with http:// or https://")
        self.servers = [_Server(str(url).rstrip("/")) for url in urls]
        self.max_retries = max_retries
        self.backoff = backoff
        self.max_backoff = max_backoff
        self.down_seconds = down_seconds
        self.control_retries = control_retries
        self.max_aborts = max_aborts
        self.vocab_size = vocab_size
        self.original_logprobs = original_logprobs  # the servers return log-probs before the temperature
        self.request_timeout = request_timeout
        self.connect_timeout = connect_timeout
        self.control_timeout = control_timeout
        self._sticky: collections.OrderedDict[str, _Server] = collections.OrderedDict()
        self._sticky_capacity = sticky_capacity
        self._background: set[asyncio.Task] = set()
        self._client = httpx.AsyncClient(timeout=httpx.Timeout(request_timeout, connect=connect_timeout),
                                         limits=httpx.Limits(max_connections=None, max_keepalive_connections=None,
                                                             keepalive_expiry=_KEEPALIVE_EXPIRY))

    async def __aenter__(self) -> "SGLangEngine":
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.close()

    async def close(self) -> None:
        for task in list(self._background):
            task.cancel()
        await asyncio.gather(*self._background, return_exceptions=True)
        await self._client.aclose()

    def server_stats(self) -> list[dict[str, Any]]:
        """Per server: url, in_flight, segments served, failures, and state (up / down / lost)."""
        now = time.monotonic()
        return [{"url": s.url, "in_flight": s.in_flight, "segments": s.segments, "failures": s.failures,
                 "state": "lost" if s.lost else ("up" if s.usable(now) else "down")} for s in self.servers]

    # -- routing -------------------------------------------------------------------------------
    def _pick(self, rid: str) -> _Server:
        now = time.monotonic()
        sticky = self._sticky.get(rid)
        if sticky is not None and sticky.usable(now):
            return sticky
        usable = [s for s in self.servers if s.usable(now)]
        if not usable:
            alive = [s for s in self.servers if not s.lost]
            if not alive:
                raise EngineError("no generation server left: every server missed a control call "
                                  f"({', '.join(s.url for s in self.servers)})")
            usable = [min(alive, key=lambda s: s.down_until)]  # all down: try the one that recovers first
        return min(usable, key=lambda s: s.in_flight)

    def _remember(self, rid: str, server: _Server) -> None:
        self._sticky[rid] = server
        self._sticky.move_to_end(rid)
        while len(self._sticky) > self._sticky_capacity:
            self._sticky.popitem(last=False)

    def _mark_down(self, server: _Server, why: str) -> None:
        server.failures += 1
        server.down_until = time.monotonic() + self.down_seconds
        log.warning("generation server %s marked down for %.0fs: %s", server.url, self.down_seconds, why)

    def _mark_lost(self, server: _Server, why: str) -> None:
        server.lost = True
        server.failures += 1
        log.error("generation server %s dropped (it missed a control call and may be out of step): %s",
                  server.url, why)

    # -- generation ----------------------------------------------------------------------------
    async def generate(self, request: GenerateRequest) -> GenerateOutput:
        validate_request(request, self.vocab_size)
        temperature = request.sampling_params.temperature
        if self.original_logprobs and temperature not in (0.0, 1.0):
            raise EngineError(f"these SGLang servers run with SGLANG_RETURN_ORIGINAL_LOGPROB set: they return log-probs "
                              f"before the temperature, and this request samples at T={temperature}, so the trainer's "
                              "importance weights would all be wrong. Unset it (or sample at T=1)")
        rid = request.rid or uuid.uuid4().hex
        call = uuid.uuid4().hex[:8]       # keeps wire rids unique even if a caller reuses `rid` concurrently
        params = request.sampling_params
        ids: list[int] = []
        logprobs: list[float] = []
        versions: list[int] = []
        texts: list[str] = []
        interruptions = aborts = attempts = segment = 0
        truncated = params.temperature > 0 and truncates(params.top_p, params.top_k)
        while True:
            sampling = params.to_sglang()
            sampling["max_new_tokens"] = params.max_new_tokens - len(ids)
            wire_rid = f"{rid}.{call}.{segment}"
            segment += 1
            payload = {"input_ids": request.input_ids + ids, "sampling_params": sampling,
                       "return_logprob": True, "rid": wire_rid}
            if truncated:
                payload["return_sampling_mask"] = True
            server = self._pick(rid)
            self._remember(rid, server)
            answer = await self._post_generate(server, payload)
            if isinstance(answer, dict):
                finish = (answer.get("meta_info") or {}).get("finish_reason") or {}
                status = finish.get("status_code") if isinstance(finish, dict) else None
                if isinstance(status, int) and 400 <= status < 500:
                    raise EngineError(f"{server.url} rejected request {rid}: {finish.get('message')}")
                if isinstance(status, int) and status >= 500:  # the server aborted it for an internal error
                    answer = _NoAnswer(f"aborted with status {status}: {finish.get('message')}")
            if isinstance(answer, _NoAnswer):
                attempts += 1
                if attempts > self.max_retries:
                    if answer.server_at_fault:
                        self._mark_down(server, answer.why)
                    raise EngineError(f"request {rid} failed {attempts} times (no server completed it); "
                                      f"last: {server.url}: {answer.why}")
                if not answer.server_at_fault:
                    log.info("request %s: this client closed its own connection to %s under it (%s); sending it "
                             "again", rid, server.url, answer.why)
                    continue
                self._mark_down(server, answer.why)
                await asyncio.sleep(min(self.max_backoff, self.backoff * 2 ** (attempts - 1)))
                continue
            server.segments += 1
            meta = answer.get("meta_info") or {}
            new_ids = [int(t) for t in answer.get("output_ids") or []]
            entries = meta.get("output_token_logprobs") or []
            if len(entries) != len(new_ids) or any(int(e[1]) != t for e, t in zip(entries, new_ids)):
                raise EngineError(f"{server.url} returned {len(new_ids)} tokens but {len(entries)} log-probs "
                                  "that do not match them")
            ids += new_ids
            logprobs += truncated_logprobs_from_meta(meta, len(new_ids), server.url) if truncated \
                else [float(e[0]) for e in entries]
            versions += versions_from_meta(meta, len(new_ids))
            texts.append(str(answer.get("text") or ""))
            interruptions += int(meta.get("num_retractions") or 0)
            finish = meta.get("finish_reason") or {}
            reason = finish.get("type", "stop") if isinstance(finish, dict) else str(finish)
            if reason == "abort" and len(ids) < params.max_new_tokens:
                # Interrupted (pause with mode abort, /abort_request): continue from the tokens so far.
                aborts += 1
                interruptions += 1
                if aborts > self.max_aborts:
                    raise EngineError(f"request {rid} was aborted {aborts} times; giving up")
                continue
            if reason not in ("stop", "length"):
                reason = "length" if len(ids) >= params.max_new_tokens else "stop"
            return GenerateOutput(rid=rid, output_ids=ids, output_logprobs=logprobs, output_versions=versions,
                                  finish_reason=reason, prompt_tokens=len(request.input_ids), text="".join(texts),
                                  num_interruptions=interruptions)

    async def _post_generate(self, server: _Server, payload: dict[str, Any]) -> dict[str, Any] | _NoAnswer:
        """The JSON answer, or why none came. Raises EngineError for a 400."""
        server.in_flight += 1
        try:
            response = await self._client.post(f"{server.url}/generate", json=payload)
        except httpx.TimeoutException as exc:
            # A slow or hung server may still be generating: ask it to stop, without waiting for it.
            self._abort_in_background(server, payload["rid"])
            limit = self.connect_timeout if isinstance(exc, httpx.ConnectTimeout) else self.request_timeout
            return _NoAnswer(f"{type(exc).__name__} after {limit:g}s")
        except httpx.HTTPError as exc:
            if closed_by_this_client(exc):
                self._abort_in_background(server, payload["rid"])  # it may have reached the server
                return _NoAnswer(f"{_describe(exc)}, connection closed by this client", server_at_fault=False)
            return _NoAnswer(_describe(exc))
        except asyncio.CancelledError:
            await asyncio.shield(self._abort_remote(server, payload["rid"]))
            raise
        finally:
            server.in_flight -= 1
        if response.status_code in _CALLER_ERRORS:
            raise EngineError(f"{server.url} rejected the request: {_error_message(response)}")
        if response.status_code != 200:
            return _NoAnswer(f"HTTP {response.status_code}: {_error_message(response)}")
        try:
            data = response.json()
        except ValueError:
            return _NoAnswer(f"answer is not JSON: {response.text[:200]!r}")
        if not isinstance(data, dict):
            return _NoAnswer(f"answer is not a JSON object: {str(data)[:200]}")
        return data

    def _abort_in_background(self, server: _Server, wire_rid: str) -> None:
        task = asyncio.create_task(self._abort_remote(server, wire_rid))
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    async def _abort_remote(self, server: _Server, wire_rid: str) -> None:
        """Best effort: a cancelled caller should not leave the server generating for nobody."""
        try:
            await self._client.post(f"{server.url}/abort_request", json={"rid": wire_rid}, timeout=2.0)
        except httpx.HTTPError:
            pass

    # -- control (broadcast) -------------------------------------------------------------------
    async def _broadcast(self, path: str, payload: dict[str, Any] | None = None, method: str = "POST",
                         check_success: bool = False) -> list[tuple[_Server, httpx.Response]]:
        targets = [s for s in self.servers if not s.lost]
        if not targets:
            raise EngineError(f"{path}: no generation server left (all were dropped after failures)")

        async def one(server: _Server) -> httpx.Response | str:
            attempt = 0
            while True:
                try:
                    return await self._client.request(method, f"{server.url}{path}", json=payload,
                                                       timeout=httpx.Timeout(self.control_timeout, connect=5.0))
                except _CONNECTION_ERRORS as exc:
                    if attempt == self.control_retries:
                        return _describe(exc)
                    if not closed_by_this_client(exc):
                        server.failures += 1
                    log.warning("%s%s failed (%s); retrying", server.url, path, _describe(exc))
                    await asyncio.sleep(min(self.max_backoff, self.backoff * 2 ** attempt))
                    attempt += 1
                except httpx.HTTPError as exc:
                    return _describe(exc)

        answers = await asyncio.gather(*(one(s) for s in targets))
        done: list[tuple[_Server, httpx.Response]] = []
        rejected: list[str] = []
        for server, answer in zip(targets, answers):
            if isinstance(answer, str) or answer.status_code >= 500:
                why = answer if isinstance(answer, str) else f"HTTP {answer.status_code}: {_error_message(answer)}"
                self._mark_lost(server, f"{path}: {why}")
            elif answer.status_code != 200 or (check_success and not _success(answer)):
                rejected.append(f"{server.url}{path} answered HTTP {answer.status_code}: {_error_message(answer)}")
            else:
                done.append((server, answer))
        if rejected:
            raise EngineError("; ".join(rejected))
        if not done:
            raise EngineError(f"{path}: no generation server answered "
                              f"({', '.join(s.url for s in targets)})")
        return done

    async def pause(self, mode: PauseMode = "retract") -> None:
        if mode not in ("abort", "retract", "in_place"):
            raise EngineError(f"pause mode must be abort, retract or in_place, got {mode!r}")
        await self._broadcast("/pause_generation", {"mode": mode})

    async def resume(self) -> None:
        await self._broadcast("/continue_generation", {})

    async def update_weights(self, path: str | os.PathLike[str], version: int) -> None:
        """Every server loads the checkpoint directory `path`; later tokens carry `version`.

        Pause first with mode retract (the default) or abort: SGLang refuses to drop its cache while requests
        paused in_place still hold it, and reports the update as failed."""
        if isinstance(version, bool) or not isinstance(version, int):
            raise EngineError(f"weight version must be an integer, got {version!r}")
        await self._broadcast("/update_weights_from_disk", {"model_path": str(path), "weight_version": str(version)},
                              check_success=True)

    # -- weights over a process group (engine/weight_sync.py) ---------------------------------------------
    async def _server_ranks(self) -> list[int]:
        """Ranks each server takes in a weight-update group: its tensor-parallel size."""
        ranks = []
        for server in [s for s in self.servers if not s.lost]:
            response = await self._client.get(f"{server.url}/get_server_info",
                                              timeout=httpx.Timeout(self.control_timeout, connect=5.0))
            if response.status_code != 200:
                raise EngineError(f"{server.url}/get_server_info answered HTTP {response.status_code}: "
                                  f"{_error_message(response)}")
            info = response.json()
            if int(info.get("dp_size") or 1) != 1:
                raise EngineError(f"{server.url} runs {info['dp_size']} data-parallel replicas; weights over a process "
                                  "group need one server per replica (dp_size 1)")
            ranks.append(int(info.get("tp_size") or 1))
        return ranks

    async def weight_group_ranks(self) -> int:
        """Ranks these servers take in a weight-update group (the trainer is rank 0)."""
        return sum(await self._server_ranks())

    async def init_weight_group(self, master_address: str, master_port: int, rank_offset: int, world_size: int,
                                group_name: str = WEIGHT_GROUP, backend: str = "nccl", timeout: float = 300.0) -> None:
        """Every server joins the trainer's group, from rank `rank_offset` on, in server order; returns once all
        ranks have joined (the trainer joins at the same time)."""
        targets = [s for s in self.servers if not s.lost]
        offsets, offset = [], rank_offset
        for ranks in await self._server_ranks():
            offsets.append(offset)
            offset += ranks
        if offset > world_size:
            raise EngineError(f"the servers take {offset - rank_offset} ranks from {rank_offset}: more than a group of "
                              f"{world_size}")

        async def one(server: _Server, offset: int) -> httpx.Response:
            return await self._client.post(f"{server.url}/init_weights_update_group", json={
                "master_address": master_address, "master_port": master_port, "rank_offset": offset,
                "world_size": world_size, "group_name": group_name, "backend": backend},
                timeout=httpx.Timeout(timeout + 30.0, connect=5.0))

        answers = await asyncio.gather(*(one(s, o) for s, o in zip(targets, offsets)), return_exceptions=True)
        self._check_all(targets, answers, "/init_weights_update_group")

    async def update_weights_from_distributed(self, bucket: Bucket, version: int | None,
                                              group_name: str = WEIGHT_GROUP, flush_cache: bool = True) -> None:
        """Every server receives one bucket the trainer broadcasts now; `version` with the last bucket."""
        payload: dict[str, Any] = {**bucket.to_json(), "group_name": group_name, "flush_cache": flush_cache}
        if version is not None:
            payload["weight_version"] = str(version)
        targets = [s for s in self.servers if not s.lost]
        answers = await asyncio.gather(*(self._client.post(f"{s.url}/update_weights_from_distributed", json=payload,
                                                           timeout=httpx.Timeout(self.control_timeout, connect=5.0))
                                         for s in targets), return_exceptions=True)
        self._check_all(targets, answers, "/update_weights_from_distributed")

    async def begin_weight_update(self) -> None:
        """Open SGLang's weight-update session on every server (its buckets are refused outside one)."""
        await self._broadcast("/begin_weight_update", {}, check_success=True)

    async def end_weight_update(self) -> None:
        await self._broadcast("/end_weight_update", {}, check_success=True)

    async def destroy_weight_group(self, group_name: str = WEIGHT_GROUP) -> None:
        await self._broadcast("/destroy_weights_update_group", {"group_name": group_name}, check_success=True)

    def _check_all(self, targets: list[_Server], answers: list[Any], path: str) -> None:
        """A collective call must succeed on every server (a server that missed it is out of the group)."""
        failures = []
        for server, answer in zip(targets, answers):
            if isinstance(answer, BaseException):
                self._mark_lost(server, f"{path}: {_describe(answer)}")
                failures.append(f"{server.url}{path}: {_describe(answer)}")
            elif answer.status_code != 200 or not _success(answer):
                failures.append(f"{server.url}{path} answered HTTP {answer.status_code}: {_error_message(answer)}")
        if failures:
            raise EngineError("; ".join(failures))

    async def health(self) -> bool:
        """True when at least one server answers /health; servers that do not are marked down."""
        targets = [s for s in self.servers if not s.lost]

        async def one(server: _Server) -> bool:
            try:
                response = await self._client.get(f"{server.url}/health", timeout=httpx.Timeout(10.0, connect=5.0))
            except httpx.HTTPError as exc:
                self._mark_down(server, f"/health: {type(exc).__name__}")
                return False
            if response.status_code != 200:
                self._mark_down(server, f"/health: HTTP {response.status_code}")
                return False
            server.down_until = 0.0
            return True

        return any(await asyncio.gather(*(one(s) for s in targets)))

    async def model_info(self) -> dict[str, Any]:
        """The first answering server's /model_info, with `weight_version` as an integer and `servers`."""
        for server in [s for s in self.servers if not s.lost]:
            try:
                response = await self._client.get(f"{server.url}/model_info",
                                                   timeout=httpx.Timeout(self.control_timeout, connect=5.0))
            except httpx.HTTPError:
                continue
            if response.status_code == 200:
                info = dict(response.json())
                if info.get("weight_version") is not None:
                    info["weight_version"] = _parse_version(info["weight_version"])
                info["servers"] = [s.url for s in self.servers if not s.lost]
                return info
        raise EngineError(f"/model_info: no generation server answered ({', '.join(s.url for s in self.servers)})")


def _describe(exc: Exception) -> str:
    return f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__


def _success(response: httpx.Response) -> bool:
    try:
        data = response.json()
    except ValueError:
        return False
    return bool(data.get("success", True)) if isinstance(data, dict) else False


def _error_message(response: httpx.Response) -> str:
    try:
        data = response.json()
    except ValueError:
        return response.text[:500]
    if isinstance(data, dict):
        error = data.get("error")
        if isinstance(error, dict):
            return str(error.get("message"))
        if error:
            return str(error)
        if "message" in data:
            return str(data["message"])
        if "detail" in data:
            return str(data["detail"])
    return str(data)[:500]
