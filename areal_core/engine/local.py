"""The embedded local engine: continuous batching over a slotted KV cache, interruptible by weight updates.

All model work happens on one background thread, named "areal-engine", that owns the model and the
cache; the async methods only hand requests and commands to it. At every step boundary the thread
(1) applies control commands (pause / continue / update weights / flush), (2) admits waiting requests
into free cache slots and prefills them, (3) decodes one token for every running request. New requests
therefore join the running batch as soon as a slot frees up, without waiting for the longest sequence.

A weight update drops every request's KV cache (it was computed with the old weights) but keeps its
tokens; the next step recomputes the cache from prompt + tokens so far with the new weights and
generation continues. Each token records the version of the weights that produced it.

New weights arrive from a checkpoint directory (`update_weights`), as tensors in this process
(`update_weights_from_tensors`), or broadcast over a process group shared with the trainer
(`init_weight_group` + `update_weights_from_distributed`, engine/weight_sync.py); the last two may come in
buckets, and only the last bucket (version given) drops the caches and moves the version.

A finished request's keys/values stay in its slot while no other request needs it (least recently
finished given up first; `prefix_cache_slots` adds slots beyond the running ones for that): a request whose
tokens extend them (the next turn of a multi-turn episode: the same prompt and output, then a tool result)
takes the slot over and prefills only what is new, as SGLang's radix cache does for a shared prefix.
"""
from __future__ import annotations

import asyncio
import concurrent.futures
import itertools
import logging
import queue
import threading
import time
import uuid
from collections import OrderedDict, deque
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import torch

from areal_core.engine.decoder import SlottedDecoder
from areal_core.engine.model import (
    ModelError,
    eos_token_ids,
    load_engine_model,
    load_tokenizer,
    round_engine_weights,
)
from areal_core.engine.weight_sync import Bucket, WEIGHT_GROUP, init_custom_process_group, receive_bucket
from areal_core.engine.protocol import (
    EngineError,
    GenerateOutput,
    GenerateRequest,
    PauseMode,
    EXCLUDED_LOGPROB,
    SamplingParams,
    truncated_logprobs,
    truncates,
    validate_request,
)

log = logging.getLogger(__name__)


@dataclass(eq=False)  # identity: the engine looks requests up in its lists at every finish
class _Running:
    request: GenerateRequest
    on_done: Callable[[GenerateOutput], None]
    seed: int
    output_ids: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)
    versions: list[int] = field(default_factory=list)
    slot: int | None = None
    cached: int = 0                  # tokens whose keys/values are in the slot
    interruptions: int = 0

    @property
    def tokens(self) -> list[int]:
        return self.request.input_ids + self.output_ids


class LocalEngine:
    """In-process engine implementing `InferenceEngine`. Start with `start()` (or `async with`)."""

    def __init__(self, model_path: str | Path, *, max_running_requests: int = 64, max_seq_len: int | None = None,
                 device: str = "cpu", dtype: str = "float32", weight_version: int = 0, seed: int = 0,
                 max_prefill_tokens: int = 8192, torch_threads: int | None = None,
                 prefix_cache_slots: int = 0) -> None:
        self.model_path = str(model_path)
        if torch_threads:
            torch.set_num_threads(torch_threads)
        from transformers.utils import logging as hf_logging

        hf_logging.disable_progress_bar()
        self.dtype = dtype
        self.model = load_engine_model(model_path, dtype=dtype, device=device)
        self.tokenizer = load_tokenizer(model_path)
        self.device = torch.device(device)
        self.vocab_size = int(self.model.config.vocab_size)
        limit = int(getattr(self.model.config, "max_position_embeddings", 4096))
        self.max_seq_len = min(max_seq_len or limit, limit)
        self.max_running_requests = max_running_requests
        kept = prefix_cache_slots  # slots beyond the running ones, only ever holding finished requests' caches
        if kept < 0:
            raise ValueError(f"prefix_cache_slots must be >= 0, got {prefix_cache_slots}")
        self.decoder = SlottedDecoder(self.model, max_running_requests + kept, self.max_seq_len)
        self.eos_ids = eos_token_ids(model_path, self.tokenizer)
        self._token_texts: dict[int, str] = {}   # a token's own text, for the stop-string check
        # a tokenizer that cleans up spaces on decode (" 's" -> "'s") can complete a stop string with a later token
        self._stop_check_always = bool(getattr(self.tokenizer, "clean_up_tokenization_spaces", False))
        self.version = weight_version
        self.max_prefill_tokens = max_prefill_tokens
        self._seeds = itertools.count(seed * 1_000_003)
        self._free_slots = list(range(max_running_requests + kept))[::-1]
        self._kept: OrderedDict[int, list[int]] = OrderedDict()  # slot -> the tokens it holds, oldest first
        self._waiting: deque[_Running] = deque()
        self._running: list[_Running] = []
        self._inbox: queue.SimpleQueue[tuple[str, Any, concurrent.futures.Future | None]] = queue.SimpleQueue()
        self._wake = threading.Event()
        self._paused = False
        self._stopped = False
        self._thread = threading.Thread(target=self._loop, name="areal-engine", daemon=True)
        self.stats = {"steps": 0, "decode_tokens": 0, "prefill_tokens": 0, "prefill_tokens_reused": 0, "interruptions": 0}
        self.last_weight_load_seconds = 0.0
        self._weight_groups: dict[str, Any] = {}   # name -> process group shared with a trainer
        self._weight_session = False               # between begin_weight_update and end_weight_update

    # -- lifecycle -----------------------------------------------------------------------------
    def start(self) -> "LocalEngine":
        if not self._thread.is_alive():
            self._thread.start()
        return self

    async def __aenter__(self) -> "LocalEngine":
        return self.start()

    async def __aexit__(self, *exc: Any) -> None:
        await self.close()

    async def close(self) -> None:
        if self._thread.is_alive():
            await self._command("stop")
            await asyncio.to_thread(self._thread.join, 10)

    # -- public async API (InferenceEngine) ----------------------------------------------------
    def validate(self, request: GenerateRequest) -> None:
        """Raise EngineError for a request the engine cannot serve (the server turns it into HTTP 400)."""
        validate_request(request, self.vocab_size, self.max_seq_len)

    def submit(self, request: GenerateRequest, on_done: Callable[[GenerateOutput], None]) -> None:
        """Thread-safe: queue a request; `on_done` is called on the engine thread with the output."""
        self.validate(request)
        if not request.rid:
            request = GenerateRequest(request.input_ids, request.sampling_params, uuid.uuid4().hex)
        self._inbox.put(("generate", (request, on_done), None))
        self._wake.set()

    async def generate(self, request: GenerateRequest) -> GenerateOutput:
        loop = asyncio.get_running_loop()
        future: asyncio.Future[GenerateOutput] = loop.create_future()

        def done(output: GenerateOutput) -> None:
            loop.call_soon_threadsafe(lambda: future.done() or future.set_result(output))

        if not request.rid:
            request = GenerateRequest(request.input_ids, request.sampling_params, uuid.uuid4().hex)
        self.submit(request, done)
        try:
            return await future
        except asyncio.CancelledError:
            self.abort(request.rid)
            raise

    def abort(self, rid: str) -> None:
        self._inbox.put(("abort", rid, None))
        self._wake.set()

    async def pause(self, mode: PauseMode = "retract") -> None:
        await self._command("pause", mode)

    async def resume(self) -> None:
        await self._command("continue")

    async def update_weights(self, path: str | Path, version: int) -> None:
        await self._command("update_weights", (str(path), int(version)))

    async def update_weights_from_tensors(self, named_tensors: list[tuple[str, torch.Tensor]], version: int | None,
                                          flush_cache: bool = True) -> None:
        """Copy these tensors into the weights of the same names. With `version` (the last bucket of an update),
        round them as the engine's dtype holds them, drop every cache and tag later tokens with it."""
        await self._command("load_tensors", (named_tensors, version, flush_cache))

    # -- weights over a process group (SGLang's protocol; engine/weight_sync.py) ---------------------------
    async def weight_group_ranks(self) -> int:
        """Ranks this engine takes in a weight-update group: one (no tensor parallelism)."""
        return 1

    async def init_weight_group(self, master_address: str, master_port: int, rank_offset: int, world_size: int,
                                group_name: str = WEIGHT_GROUP, backend: str = "gloo", timeout: float = 300.0) -> None:
        """Join the trainer's group as rank `rank_offset`; returns once every rank has joined."""
        if group_name in self._weight_groups:
            raise EngineError(f"weight update group {group_name!r} already exists on this engine")
        group = await asyncio.to_thread(init_custom_process_group, backend, f"tcp://{master_address}:{master_port}",
                                        world_size, rank_offset, group_name, timeout)
        self._weight_groups[group_name] = group

    async def begin_weight_update(self) -> None:
        """Open an update of several buckets (SGLang's weight-update session; it refuses buckets outside one)."""
        if self._weight_session:
            raise EngineError("a weight-update session is already open; call end_weight_update() first")
        self._weight_session = True

    async def end_weight_update(self) -> None:
        if not self._weight_session:
            raise EngineError("no weight-update session is open; call begin_weight_update() first")
        self._weight_session = False

    async def update_weights_from_distributed(self, bucket: Bucket, version: int | None, group_name: str = WEIGHT_GROUP,
                                              flush_cache: bool = True) -> None:
        """Receive one bucket broadcast by the trainer (rank 0 of the group) and load it."""
        if not self._weight_session:
            raise EngineError("update_weights_from_distributed must run between begin_weight_update() and "
                              "end_weight_update()")
        group = self._weight_groups.get(group_name)
        if group is None:
            raise EngineError(f"no weight update group {group_name!r} on this engine (call init_weight_group first)")
        self._check_tensors(list(zip(bucket.names, bucket.shapes)))  # before the broadcast, which cannot be refused
        started = time.perf_counter()
        named = await asyncio.to_thread(receive_bucket, group, bucket, self.device)
        await self.update_weights_from_tensors(named, version, flush_cache)
        self.last_weight_load_seconds = time.perf_counter() - started

    async def destroy_weight_group(self, group_name: str = WEIGHT_GROUP) -> None:
        group = self._weight_groups.pop(group_name, None)
        if group is None:
            raise EngineError(f"no weight update group {group_name!r} on this engine")
        torch.distributed.destroy_process_group(group)

    async def flush_cache(self) -> None:
        await self._command("flush_cache")

    async def health(self) -> bool:
        return self._thread.is_alive() and not self._stopped

    def server_stats(self) -> list[dict[str, Any]]:
        return []  # in-process: no servers

    @property
    def requests(self) -> int:
        """Requests running or waiting."""
        return len(self._running) + len(self._waiting)

    def abort_all(self) -> None:
        self._inbox.put(("abort", None, None))
        self._wake.set()

    async def model_info(self) -> dict[str, Any]:
        return {"model_path": self.model_path, "tokenizer_path": self.model_path, "is_generation": True,
                "weight_version": str(self.version), "max_running_requests": self.max_running_requests,
                "max_seq_len": self.max_seq_len, "vocab_size": self.vocab_size,
                "running": len(self._running), "waiting": len(self._waiting), "paused": self._paused}

    async def _command(self, name: str, arg: Any = None) -> Any:
        future: concurrent.futures.Future = concurrent.futures.Future()
        self._inbox.put((name, arg, future))
        self._wake.set()
        if not self._thread.is_alive() and name != "stop":
            raise EngineError("the engine is not running (call start())")
        return await asyncio.wrap_future(future)

    # -- engine thread -------------------------------------------------------------------------
    def _loop(self) -> None:
        while not self._stopped:
            self._drain_inbox()
            if self._stopped:
                break
            if self._paused or not (self._waiting or self._running):
                self._wake.wait(0.5)
                self._wake.clear()
                continue
            try:
                self._step()
            except Exception as exc:  # a bug must not leave callers waiting forever
                log.exception("engine step failed")
                for req in list(self._running) + list(self._waiting):
                    self._finish(req, "abort", message=f"engine error: {exc}")
        for req in list(self._running) + list(self._waiting):
            self._finish(req, "abort", message="engine stopped")

    def _drain_inbox(self) -> None:
        while True:
            try:
                name, arg, future = self._inbox.get_nowait()
            except queue.Empty:
                return
            try:
                result = self._apply(name, arg)
            except Exception as exc:
                if future is not None:
                    future.set_exception(exc)
                else:
                    log.exception("engine command %s failed", name)
            else:
                if future is not None:
                    future.set_result(result)

    def _apply(self, name: str, arg: Any) -> Any:
        if name == "generate":
            request, on_done = arg
            params = request.sampling_params
            seed = params.seed if params.seed is not None else next(self._seeds)
            self._waiting.append(_Running(request=request, on_done=on_done, seed=int(seed)))
        elif name == "abort":  # arg: a request id, or None for every request
            for req in [r for r in list(self._running) + list(self._waiting) if arg is None or r.request.rid == arg]:
                self._finish(req, "abort", message="aborted by client")
        elif name == "pause":
            self._paused = True
            if arg == "abort":
                for req in list(self._running) + list(self._waiting):
                    self._finish(req, "abort", message="aborted by pause_generation")
            elif arg == "retract":
                self._retract_all()
        elif name == "continue":
            self._paused = False
        elif name == "update_weights":
            path, version = arg
            started = time.perf_counter()
            self._load_weights(path)
            self._drop_caches()  # every cache was computed with the old weights; the tokens stay
            self.version = version
            self.model_path = path
            self.last_weight_load_seconds = time.perf_counter() - started
        elif name == "load_tensors":
            named, version, flush = arg
            self._copy_tensors(named)
            if version is not None:
                round_engine_weights(self.model, self.dtype)
                self.version = version
            if flush or version is not None:
                self._drop_caches()
        elif name == "flush_cache":
            self._drop_caches()
        elif name == "stop":
            self._stopped = True
        else:
            raise EngineError(f"unknown engine command {name!r}")
        return None

    def _drop_caches(self) -> None:
        for req in self._running:
            self._drop_cache(req)
        self._forget_kept()

    def _check_tensors(self, shapes: list[tuple[str, list[int]]]) -> None:
        """ModelError unless every name is a weight of the served model with that shape."""
        own = self.model.state_dict()
        unknown = [name for name, _ in shapes if name not in own]
        if unknown:
            raise ModelError(f"not weights of the served model: {', '.join(unknown[:3])}")
        for name, shape in shapes:
            if list(own[name].shape) != list(shape):
                raise ModelError(f"{name} has shape {tuple(shape)}, the served model's is {tuple(own[name].shape)}")

    def _copy_tensors(self, named: list[tuple[str, torch.Tensor]]) -> None:
        self._check_tensors([(name, list(tensor.shape)) for name, tensor in named])
        own = self.model.state_dict()
        with torch.no_grad():
            for name, tensor in named:
                own[name].copy_(tensor)

    def _retract_all(self) -> None:
        for req in reversed(self._running):
            self._release(req)
            self._drop_cache(req)
            self._waiting.appendleft(req)
        self._running.clear()

    def _drop_cache(self, req: _Running) -> None:
        """Forget a request's keys/values; the next step recomputes them from its tokens."""
        if req.cached and req.output_ids:
            req.interruptions += 1
            self.stats["interruptions"] += 1
        req.cached = 0

    def _release(self, req: _Running, keep: bool = False) -> None:
        """Give the request's slot back; with `keep`, its keys/values stay for a request that extends them."""
        if req.slot is None:
            return
        if keep and req.cached:
            self._kept[req.slot] = req.tokens[:req.cached]
        else:
            self._free_slots.append(req.slot)
        req.slot = None

    def _forget_kept(self) -> None:
        self._free_slots.extend(self._kept)
        self._kept.clear()

    def _take_slot(self, req: _Running) -> int | None:
        """A slot for a waiting request: the kept one holding the longest prefix of its tokens (its cache then
        starts there), else a free one, else the least recently kept one; None when every slot runs."""
        tokens, best, best_len = req.tokens, None, 0
        for slot, held in self._kept.items():
            if best_len < len(held) < len(tokens) and tokens[:len(held)] == held:
                best, best_len = slot, len(held)
        if best is not None:
            del self._kept[best]
            req.cached = best_len
            self.stats["prefill_tokens_reused"] += best_len
            return best
        if self._free_slots:
            return self._free_slots.pop()
        if self._kept:
            return self._kept.popitem(last=False)[0]
        return None

    def _load_weights(self, path: str) -> None:
        from safetensors.torch import load_file

        files = sorted(Path(path).glob("*.safetensors"))
        if not files:
            raise ModelError(f"{path}: no *.safetensors files to load weights from")
        state: dict[str, torch.Tensor] = {}
        for file in files:
            state.update(load_file(str(file)))
        own = self.model.state_dict()
        unexpected = sorted(set(state) - set(own))
        tied = {"lm_head.weight"} if getattr(self.model.config, "tie_word_embeddings", False) else set()
        missing = sorted(set(own) - set(state) - tied)
        if unexpected or missing:
            raise ModelError(f"{path}: weights do not fit the served model (missing {missing[:3]}, "
                             f"unexpected {unexpected[:3]})")
        try:
            self._copy_tensors(list(state.items()))
        except ModelError as exc:
            raise ModelError(f"{path}: {exc}") from None
        round_engine_weights(self.model, self.dtype)  # (a float8 / float4 / intN engine rounds what it loads)

    def _finish(self, req: _Running, reason: str, message: str | None = None) -> None:
        self._release(req, keep=reason != "abort")
        if req in self._running:
            self._running.remove(req)
        if req in self._waiting:
            self._waiting.remove(req)
        text = self.tokenizer.decode(req.output_ids, skip_special_tokens=True) if req.output_ids else ""
        output = GenerateOutput(rid=req.request.rid, output_ids=list(req.output_ids), output_logprobs=list(req.logprobs),
                                output_versions=list(req.versions), finish_reason=reason,  # type: ignore[arg-type]
                                prompt_tokens=len(req.request.input_ids), text=text,
                                num_interruptions=req.interruptions)
        try:
            req.on_done(output)
        except Exception:
            log.exception("generate callback failed for %s", req.request.rid)

    def _step(self) -> None:
        # Admit waiting requests into free slots, oldest first.
        while self._waiting and len(self._running) < self.max_running_requests:
            slot = self._take_slot(self._waiting[0])
            if slot is None:
                break
            req = self._waiting.popleft()
            req.slot = slot
            self._running.append(req)
        need_prefill = [r for r in self._running if len(r.tokens) - r.cached > 1]
        decoding = [r for r in self._running if len(r.tokens) - r.cached == 1]
        batch, budget = [], self.max_prefill_tokens
        for req in need_prefill:
            n = len(req.tokens) - req.cached
            if batch and n > budget:
                break
            batch.append(req)
            budget -= n
        # The step's prefills (up to the token budget) and a token for every decoding request. A forward pads its
        # rows to its widest: prefills and decodes in one would make every decoding row as wide as the longest
        # prefill (a multi-turn episode's next turn joining 255 decoding requests cost 256 x 100 tokens, not
        # 100 + 255), so prefills get a forward of their own when that padding would outweigh a forward's own cost.
        self.stats["prefill_tokens"] += sum(len(r.tokens) for r in batch)
        self.stats["decode_tokens"] += len(decoding)
        width = max((len(r.tokens) - r.cached for r in batch), default=1)
        if batch and len(decoding) * (width - 1) >= SPLIT_PADDING_TOKENS:
            self._forward_and_sample(batch)
            self._forward_and_sample(decoding)
        elif batch or decoding:
            self._forward_and_sample(batch + decoding)
        if batch or decoding:
            self.stats["steps"] += 1

    def _forward_and_sample(self, batch: list[_Running]) -> None:
        # Requests that start from an empty cache with the same tokens (the n samples of one prompt) are
        # computed once; the others get a copy of its keys/values and its logits (their own seeds still
        # draw their own tokens).
        computed: list[_Running] = []
        source: list[int] = []            # for each request of the batch, its row among `computed`
        first_with: dict[tuple[int, ...], int] = {}
        for req in batch:
            key = tuple(req.tokens) if req.cached == 0 else None
            row = first_with.get(key) if key is not None else None
            if row is None:
                row = len(computed)
                computed.append(req)
                if key is not None:
                    first_with[key] = row
            source.append(row)
        news = [req.tokens[req.cached:] for req in computed]
        width = max(len(n) for n in news)
        tokens = torch.tensor([new + [0] * (width - len(new)) for new in news], dtype=torch.long)
        logits = self.decoder.forward(
            tokens.to(self.device),
            torch.tensor([r.slot for r in computed], device=self.device),
            torch.tensor([r.cached for r in computed], device=self.device),
            torch.tensor([len(n) for n in news], device=self.device),
        )   # sampled where they are: a [batch, vocab] copy per step to the host costs more than the draw on a GPU
        if len(computed) < len(batch):
            copies = [(computed[row], req) for req, row in zip(batch, source) if computed[row] is not req]
            self.decoder.copy_slots([src.slot for src, _ in copies], [dst.slot for _, dst in copies], width)
            self.stats["prefill_tokens_reused"] += sum(len(dst.tokens) for _, dst in copies)
            logits = logits[torch.tensor(source, device=logits.device)]
        for req in batch:
            req.cached = len(req.tokens)
        # Sampling in float32 whatever the model's dtype, as SGLang does: a bfloat16 engine differs from a float32
        # trainer by its forward pass, not by a bfloat16 softmax.
        token_ids, logprobs = sample(logits.float(), [r.request.sampling_params for r in batch], [r.seed for r in batch],
                                     [len(r.output_ids) for r in batch])
        for req, token, logprob in zip(batch, token_ids, logprobs):
            req.output_ids.append(token)
            req.logprobs.append(logprob)
            req.versions.append(self.version)
            reason = self._finish_reason(req, token)
            if reason:
                self._finish(req, reason)

    def _finish_reason(self, req: _Running, token: int) -> str | None:
        params = req.request.sampling_params
        if token in params.stop_token_ids or (not params.ignore_eos and token in self.eos_ids):
            return "stop"
        if params.stop and self._may_end_a_stop_string(token, params.stop):
            tail = self.tokenizer.decode(req.output_ids[-32:], skip_special_tokens=True)
            if any(s in tail for s in params.stop):
                return "stop"
        if len(req.output_ids) >= params.max_new_tokens or len(req.tokens) >= self.max_seq_len:
            return "length"
        return None

    def _may_end_a_stop_string(self, token: int, stops: tuple[str, ...]) -> bool:
        """Whether `token` may be the one that completes one of `stops` (token_may_end_a_stop_string); decoding the
        tail of every request at every step cost as much as the step itself for tool turns."""
        if self._stop_check_always:
            return True
        text = self._token_texts.get(token)
        if text is None:
            text = self._token_texts[token] = self.tokenizer.decode([token], skip_special_tokens=False)
        return token_may_end_a_stop_string(text, stops)


def token_may_end_a_stop_string(text: str, stops: tuple[str, ...]) -> bool:
    """False when a token whose own text is `text` cannot complete any of `stops`: it lacks every stop string's last
    character. Only an ASCII last character other than a space is trusted: a token may hold part of a multi-byte
    character's bytes, and a tokenizer may drop a token's leading space when it is decoded alone."""
    return any(not stop[-1].isascii() or stop[-1].isspace() or stop[-1] in text for stop in stops)


# Padding (decoding rows x (prefill width - 1)) past which prefills get a forward of their own: on the 2-core CPU a
# forward's fixed cost is about 40 token-rows of the embedded model (the profile's step_s / sequence_s), and 64 leaves
# a margin. A GPU's forward costs far more token-rows of launch overhead; the local engine on a GPU is the GPU
# check's (bench/gpu_check.sh), which has not run on one yet.
SPLIT_PADDING_TOKENS = 64


def _signed(value: int) -> int:
    return value - (1 << 64) if value >= 1 << 63 else value


_GOLDEN, _MIX1, _MIX2 = _signed(0x9E3779B97F4A7C15), _signed(0xBF58476D1CE4E5B9), _signed(0x94D049BB133111EB)


def _shift_right(x: torch.Tensor, bits: int) -> torch.Tensor:
    """Logical right shift of int64 (torch's >> is arithmetic)."""
    return (x >> bits) & ((1 << (64 - bits)) - 1)


def counter_uniforms(seeds: torch.Tensor, positions: torch.Tensor, vocab: int) -> torch.Tensor:
    """U(0, 1) noise [B, vocab] that depends only on (seed, token position, token id): splitmix64 over a
    counter. A request's draws are therefore the same whatever it is batched with, and a request that
    is interrupted and resumed draws exactly what it would have drawn without the interruption."""
    ids = torch.arange(vocab, dtype=torch.int64, device=seeds.device)
    x = seeds[:, None] * _GOLDEN + positions[:, None] * _MIX2 + (ids[None, :] + 1) * _MIX1
    x = (x ^ _shift_right(x, 30)) * _MIX1
    x = (x ^ _shift_right(x, 27)) * _MIX2
    x = x ^ _shift_right(x, 31)
    return (_shift_right(x, 11).double() + 0.5) / float(1 << 53)


def sample(logits: torch.Tensor, params: list[SamplingParams], seeds: list[int],
           positions: list[int]) -> tuple[list[int], list[float]]:
    """Draw one token per row; return (tokens, log-probs). Vectorised over the batch.

    Sampling: the Gumbel-max trick (argmax of log p + Gumbel noise) over the tokens that survive top-k and
    top-p, which draws exactly from the truncated, renormalised distribution. Greedy rows (T = 0) take
    the argmax. The returned log-prob is that of the distribution drawn from: log softmax(logits / T)[token]
    renormalised over the kept tokens (T = 1 and no truncation for greedy; see engine/protocol.py).
    """
    rows, vocab = logits.shape
    device = logits.device   # the engine's: on a GPU the draw stays there, only the chosen tokens come back
    temperature = torch.tensor([p.temperature if p.temperature > 0 else 1.0 for p in params], dtype=logits.dtype,
                               device=device)
    logprobs = torch.log_softmax(logits / temperature[:, None], dim=-1)
    greedy = torch.tensor([p.temperature == 0 for p in params], device=device)
    scores = logprobs
    if any(truncates(p.top_p, p.top_k) and p.temperature > 0 for p in params):
        top_k = torch.tensor([p.top_k if p.temperature > 0 else -1 for p in params], device=device)
        top_p = torch.tensor([p.top_p if p.temperature > 0 else 1.0 for p in params], dtype=logits.dtype,
                             device=device)
        logprobs = truncated_logprobs(logprobs, top_p, top_k)
        scores = logprobs.masked_fill(logprobs <= EXCLUDED_LOGPROB, float("-inf"))
    noise = counter_uniforms(torch.tensor(seeds, dtype=torch.int64, device=device),
                             torch.tensor(positions, dtype=torch.int64, device=device), vocab)
    gumbel = -torch.log(-torch.log(noise)).to(logits.dtype)
    chosen = torch.where(greedy, logits.argmax(-1), (scores + gumbel).argmax(-1))
    picked = logprobs.gather(1, chosen[:, None])[:, 0]
    return chosen.tolist(), picked.tolist()
