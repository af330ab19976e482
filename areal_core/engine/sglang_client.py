"""An `InferenceEngine` over HTTP: one or many SGLang servers (or `areal serve`, which speaks the same API).

- Load balancing: each request goes to the healthy server with the fewest requests in flight; a request
  that is resubmitted goes back to the server it used before when that one is still healthy (sticky rid).
- Failures: a connection error, timeout or 5xx marks the server down for a back-off period and the request
  is resubmitted elsewhere; a 400 is the caller's mistake and is raised at once with the server's message.
- Interruptions: a request that comes back with finish_reason "abort" (e.g. `pause_generation(mode=abort)`
  before a weight update) is resubmitted as prompt + tokens so far with the remaining token budget, so
  from the caller's side it simply completes; its tokens keep their per-token weight versions.
- Weight updates, pause and continue are broadcast to every server.
"""
from __future__ import annotations

import asyncio
import logging
import os
import subprocess
import sys
import time
import uuid
from dataclasses import dataclass
from typing import Any, Sequence

import httpx

from areal_core.engine.protocol import EngineError, GenerateOutput, GenerateRequest, PauseMode

log = logging.getLogger(__name__)


@dataclass
class _Server:
    url: str
    in_flight: int = 0
    down_until: float = 0.0
    failures: int = 0

    def healthy(self, now: float) -> bool:
        return now >= self.down_until


def versions_from_meta(meta: dict[str, Any], n_tokens: int) -> list[int]:
    """Per-token weight versions from a /generate response (areal's per-token list, else SGLang's spans)."""
    if isinstance(meta.get("output_token_weight_versions"), list):
        return [int(v) for v in meta["output_token_weight_versions"]][:n_tokens]
    versions: list[int] = []
    for span in meta.get("weight_versions") or []:
        versions += [int(span["version"])] * (int(span["end"]) - int(span["start"]))
    if len(versions) < n_tokens:
        fill = int(meta.get("weight_version") or 0)
        versions += [fill] * (n_tokens - len(versions))
    return versions[:n_tokens]


class SGLangEngine:
    """Client for SGLang-compatible servers. `urls` like ["http://127.0.0.1:30000", ...]."""

    def __init__(self, urls: Sequence[str], *, request_timeout: float = 3600.0, connect_timeout: float = 5.0,
                 max_retries: int = 5, backoff: float = 0.5, down_seconds: float = 10.0,
                 pause_mode: PauseMode = "retract", max_aborts: int = 1000) -> None:
        if not urls:
            raise EngineError("SGLangEngine needs at least one server URL")
        self.servers = [_Server(url.rstrip("/")) for url in urls]
        self.max_retries = max_retries
        self.backoff = backoff
        self.down_seconds = down_seconds
        self.pause_mode = pause_mode
        self.max_aborts = max_aborts
        self._sticky: dict[str, _Server] = {}
        self._client = httpx.AsyncClient(timeout=httpx.Timeout(request_timeout, connect=connect_timeout),
                                         limits=httpx.Limits(max_connections=None, max_keepalive_connections=64))

    async def __aenter__(self) -> "SGLangEngine":
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.close()

    async def close(self) -> None:
        await self._client.aclose()

    # -- routing -------------------------------------------------------------------------------
    def _pick(self, rid: str) -> _Server:
        now = time.monotonic()
        sticky = self._sticky.get(rid)
        if sticky is not None and sticky.healthy(now):
            return sticky
        healthy = [s for s in self.servers if s.healthy(now)] or sorted(self.servers, key=lambda s: s.down_until)[:1]
        return min(healthy, key=lambda s: s.in_flight)

    def _mark_down(self, server: _Server, why: str) -> None:
        server.failures += 1
        server.down_until = time.monotonic() + self.down_seconds
        log.warning("generation server %s marked down for %.0fs: %s", server.url, self.down_seconds, why)

    # -- generation ----------------------------------------------------------------------------
    async def generate(self, request: GenerateRequest) -> GenerateOutput:
        rid = request.rid or uuid.uuid4().hex
        params = request.sampling_params
        params.validate()
        ids: list[int] = []
        logprobs: list[float] = []
        versions: list[int] = []
        interruptions = attempts = 0
        try:
            while True:
                remaining = params.max_new_tokens - len(ids)
                sampling = params.to_sglang()
                sampling["max_new_tokens"] = remaining
                payload = {"input_ids": request.input_ids + ids, "sampling_params": sampling,
                           "return_logprob": True, "rid": f"{rid}.{interruptions}.{attempts}"}
                server = self._pick(rid)
                self._sticky[rid] = server
                server.in_flight += 1
                try:
                    response = await self._client.post(f"{server.url}/generate", json=payload)
                except httpx.HTTPError as exc:
                    response = None
                    failure = f"{type(exc).__name__}: {exc}"
                finally:
                    server.in_flight -= 1
                if response is not None and response.status_code == 400:
                    raise EngineError(f"{server.url} rejected the request: {_error_message(response)}")
                if response is None or response.status_code >= 500 or response.status_code != 200:
                    if response is not None:
                        failure = f"HTTP {response.status_code}: {_error_message(response)}"
                    self._mark_down(server, failure)
                    self._sticky.pop(rid, None)
                    attempts += 1
                    if attempts > self.max_retries:
                        raise EngineError(f"request {rid} failed on {attempts} attempts; last: {server.url}: {failure}")
                    await asyncio.sleep(self.backoff * 2 ** (attempts - 1))
                    continue
                server.failures = 0
                data = response.json()
                meta = data.get("meta_info") or {}
                new_ids = list(data.get("output_ids") or [])
                new_logprobs = [float(entry[0]) for entry in meta.get("output_token_logprobs") or []]
                if len(new_logprobs) != len(new_ids):
                    raise EngineError(f"{server.url} returned {len(new_ids)} tokens but {len(new_logprobs)} log-probs")
                ids += new_ids
                logprobs += new_logprobs
                versions += versions_from_meta(meta, len(new_ids))
                interruptions += int(meta.get("num_retractions") or 0)
                reason = (meta.get("finish_reason") or {}).get("type", "stop")
                if reason == "abort" and len(ids) < params.max_new_tokens:
                    interruptions += 1
                    if interruptions > self.max_aborts:
                        raise EngineError(f"request {rid} was aborted {interruptions} times")
                    continue
                if reason == "abort":
                    reason = "length"
                return GenerateOutput(rid=rid, output_ids=ids, output_logprobs=logprobs, output_versions=versions,
                                      finish_reason=reason, prompt_tokens=len(request.input_ids),
                                      text=data.get("text", "") if not interruptions else "",
                                      num_interruptions=interruptions)
        finally:
            self._sticky.pop(rid, None)

    # -- control (broadcast) -------------------------------------------------------------------
    async def _broadcast(self, method: str, path: str, payload: dict[str, Any] | None = None) -> list[httpx.Response]:
        async def one(server: _Server) -> httpx.Response:
            try:
                response = await self._client.request(method, f"{server.url}{path}", json=payload)
            except httpx.HTTPError as exc:
                raise EngineError(f"{server.url}{path} failed: {type(exc).__name__}: {exc}") from None
            if response.status_code != 200:
                raise EngineError(f"{server.url}{path} answered HTTP {response.status_code}: {_error_message(response)}")
            return response

        return list(await asyncio.gather(*(one(s) for s in self.servers)))

    async def pause(self, mode: PauseMode | None = None) -> None:
        await self._broadcast("POST", "/pause_generation", {"mode": mode or self.pause_mode})

    async def resume(self) -> None:
        await self._broadcast("POST", "/continue_generation", {})

    async def update_weights(self, path: str, version: int) -> None:
        responses = await self._broadcast("POST", "/update_weights_from_disk",
                                          {"model_path": str(path), "weight_version": str(version)})
        for server, response in zip(self.servers, responses):
            if not response.json().get("success", False):
                raise EngineError(f"{server.url} failed to load {path}: {response.json().get('message')}")

    async def health(self) -> bool:
        try:
            await self._broadcast("GET", "/health")
        except EngineError:
            return False
        return True

    async def model_info(self) -> dict[str, Any]:
        [response, *_] = await self._broadcast("GET", "/model_info")
        return response.json()


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
    return str(data)[:500]


class ServerProcess:
    """A generation server in a child process (SGLang's launch_server, or `areal serve`), with readiness wait."""

    def __init__(self, command: list[str], url: str, env: dict[str, str] | None = None, log_path: str | None = None) -> None:
        self.command = command
        self.url = url
        self.env = {**os.environ, **(env or {})}
        self.log_path = log_path
        self.process: subprocess.Popen | None = None

    @classmethod
    def sglang(cls, model_path: str, port: int, host: str = "127.0.0.1", extra_args: Sequence[str] = (),
               python: str = sys.executable, env: dict[str, str] | None = None, log_path: str | None = None) -> "ServerProcess":
        command = [python, "-m", "sglang.launch_server", "--model-path", model_path, "--host", host,
                   "--port", str(port), *extra_args]
        return cls(command, f"http://{host}:{port}", env, log_path)

    @classmethod
    def areal(cls, model_path: str, port: int, host: str = "127.0.0.1", extra_args: Sequence[str] = (),
              env: dict[str, str] | None = None, log_path: str | None = None) -> "ServerProcess":
        command = [sys.executable, "-m", "areal_core.cli", "serve", model_path, "--host", host, "--port", str(port),
                   *extra_args]
        return cls(command, f"http://{host}:{port}", env, log_path)

    def start(self) -> "ServerProcess":
        out = open(self.log_path, "ab") if self.log_path else subprocess.DEVNULL
        self.process = subprocess.Popen(self.command, env=self.env, stdout=out, stderr=subprocess.STDOUT,
                                        start_new_session=True)
        return self

    def wait_ready(self, timeout: float = 300.0) -> "ServerProcess":
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process is not None and self.process.poll() is not None:
                raise EngineError(f"server {self.url} exited with code {self.process.returncode} while starting"
                                  + (f"; see {self.log_path}" if self.log_path else ""))
            try:
                if httpx.get(f"{self.url}/health", timeout=2.0).status_code == 200:
                    return self
            except httpx.HTTPError:
                pass
            time.sleep(0.5)
        raise EngineError(f"server {self.url} did not become healthy within {timeout:.0f}s")

    def stop(self, sig: int = 15) -> None:
        if self.process is not None and self.process.poll() is None:
            try:
                os.killpg(self.process.pid, sig)
            except ProcessLookupError:
                pass
            try:
                self.process.wait(10)
            except subprocess.TimeoutExpired:
                os.killpg(self.process.pid, 9)
                self.process.wait(10)
