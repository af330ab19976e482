"""The generation protocol used by the rollout controller and by evals.

Log-probabilities: every engine returns, for each generated token t_i, the log-probability of the
distribution the token was drawn from:

    p_i = softmax(z_i / T)                       (T = temperature; T = 0 means greedy and uses T = 1)
    K_i = the tokens top-k and top-p keep: the k most likely, and the most likely ones until their
          mass reaches top_p (a token is kept while the mass before it is <= top_p; the first always)
    logprob_i = log p_i[t_i] - log sum_{s in K_i} p_i[s]       (= log p_i[t_i] without truncation)

where z_i are the model's logits for that position. This is the behaviour policy pi_behav of decoupled
PPO: the trainer recomputes the same quantity with its own weights (`truncated_logprobs`), so the two agree
exactly when the weights agree. Recording the untruncated log p instead would make every importance weight
wrong by the kept mass (the token was sampled from the renormalised distribution). SGLang returns log p
unless asked for the sampling support (`return_sampling_mask`, which the SGLang client sends when top-p or
top-k truncates); greedy requests get log softmax(z_i)[t_i].

Versions: `output_versions[i]` is the policy (weight) version that produced token i. When generation is
interrupted by a weight update, earlier tokens keep their old version and later ones carry the new one.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, Protocol, runtime_checkable

import torch

from areal_core.errors import ArealError

if TYPE_CHECKING:
    from areal_core.engine.weight_sync import Bucket

FinishReason = Literal["stop", "length", "abort"]
PauseMode = Literal["abort", "retract", "in_place"]


class EngineError(ArealError):
    """A generation request was invalid, or no server could serve it."""


class ContextLengthError(EngineError):
    """A prompt that leaves no room under the engine's length limit (a multi-turn episode ends there)."""


@dataclass(frozen=True)
class SamplingParams:
    """SGLang's names and meanings. top_k = -1 means no top-k; stop_token_ids extend the model's EOS."""

    max_new_tokens: int = 128
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = -1
    stop_token_ids: tuple[int, ...] = ()
    stop: tuple[str, ...] = ()
    ignore_eos: bool = False
    seed: int | None = None

    def validate(self) -> None:
        if self.max_new_tokens <= 0:
            raise EngineError(f"max_new_tokens must be > 0, got {self.max_new_tokens}")
        if self.temperature < 0:
            raise EngineError(f"temperature must be >= 0, got {self.temperature}")
        if not 0 < self.top_p <= 1:
            raise EngineError(f"top_p must be in (0, 1], got {self.top_p}")
        if self.top_k == 0 or self.top_k < -1:
            raise EngineError(f"top_k must be -1 (off) or >= 1, got {self.top_k}")
        bad = [s for s in self.stop if not isinstance(s, str) or not s]
        if bad:
            raise EngineError(f"stop strings must be non-empty strings, got {bad[0]!r}")

    def to_sglang(self) -> dict[str, Any]:
        """The `sampling_params` object of SGLang's /generate."""
        out: dict[str, Any] = {"max_new_tokens": self.max_new_tokens, "temperature": self.temperature,
                               "top_p": self.top_p, "top_k": self.top_k, "ignore_eos": self.ignore_eos}
        if self.stop_token_ids:
            out["stop_token_ids"] = list(self.stop_token_ids)
        if self.stop:
            out["stop"] = list(self.stop)
        if self.seed is not None:
            out["sampling_seed"] = self.seed
        return out

    @classmethod
    def from_sglang(cls, data: dict[str, Any] | None) -> "SamplingParams":
        data = dict(data or {})
        stop = data.get("stop") or ()
        params = cls(
            max_new_tokens=int(data.get("max_new_tokens", 128)),
            temperature=float(data.get("temperature", 1.0)),
            top_p=float(data.get("top_p", 1.0)),
            top_k=int(data.get("top_k", -1)),
            stop_token_ids=tuple(int(t) for t in (data.get("stop_token_ids") or ())),
            stop=(stop,) if isinstance(stop, str) else tuple(stop),
            ignore_eos=bool(data.get("ignore_eos", False)),
            seed=data.get("sampling_seed", data.get("seed")),
        )
        params.validate()
        return params


def truncates(top_p: float, top_k: int) -> bool:
    """Whether top-p / top-k (SGLang's meanings: top_k -1 is off) remove any tokens."""
    return top_p < 1.0 or top_k > 0


def kept_tokens(logprobs: torch.Tensor, top_p: float | torch.Tensor, top_k: int | torch.Tensor) -> torch.Tensor:
    """The bool mask [..., V] of the tokens top-k and top-p keep from log-probabilities [..., V] (see the module
    docstring; SGLang's rule). top_p / top_k: numbers, or tensors of the leading shape [...] (per row)."""
    vocab = logprobs.shape[-1]
    sorted_lp, order = torch.sort(logprobs, dim=-1, descending=True)
    sorted_p = sorted_lp.exp()
    top_k = torch.as_tensor(top_k, device=logprobs.device)
    top_k = torch.where((top_k > 0) & (top_k < vocab), top_k, torch.full_like(top_k, vocab))
    top_p = torch.as_tensor(top_p, dtype=sorted_p.dtype, device=logprobs.device)
    rank = torch.arange(vocab, device=logprobs.device)
    keep_sorted = (rank < top_k[..., None]) & ((torch.cumsum(sorted_p, -1) - sorted_p) <= top_p[..., None])
    keep_sorted[..., 0] = True
    return torch.zeros_like(keep_sorted).scatter_(-1, order, keep_sorted)


# A token outside the kept set has probability 0 under the truncated distribution; a finite floor (e^-10000 is 0
# in any float) keeps differences of two such log-probs at 0 rather than NaN.
EXCLUDED_LOGPROB = -1.0e4

# How long a generation server keeps an idle HTTP connection open. Clients close theirs after 2 s, so the
# server never closes a connection the client may reuse: where the server closes first, a request sent as it
# does is reset. uvicorn's default, 5 s, leaves 3 s of margin, which a client stalled on a loaded machine can
# lose. `areal serve` uses it; SGLang servers
# launched by areal get it as SGLANG_TIMEOUT_KEEP_ALIVE.
SERVER_KEEP_ALIVE_SECONDS = 65


def truncated_logprobs(logprobs: torch.Tensor, top_p: float | torch.Tensor, top_k: int | torch.Tensor
                       ) -> torch.Tensor:
    """log of the renormalised top-p / top-k distribution [..., V] from untruncated log-probabilities [..., V]:
    log p - log (kept mass) on the kept tokens, EXCLUDED_LOGPROB elsewhere. Differentiable through the kept
    mass (the kept set itself is chosen without a gradient)."""
    keep = kept_tokens(logprobs.detach(), top_p, top_k)
    kept_mass = torch.logsumexp(logprobs.masked_fill(~keep, float("-inf")), dim=-1, keepdim=True)
    return torch.where(keep, logprobs - kept_mass, torch.full_like(logprobs, EXCLUDED_LOGPROB))


@dataclass(frozen=True)
class GenerateRequest:
    """Prompt token ids + sampling params. `rid` identifies the request across retries and servers."""

    input_ids: list[int]
    sampling_params: SamplingParams = field(default_factory=SamplingParams)
    rid: str = ""


def validate_request(request: GenerateRequest, vocab_size: int | None = None, max_seq_len: int | None = None) -> None:
    """Raise EngineError for a request no engine can serve: an empty prompt, a token id outside
    [0, vocab_size) (when the vocabulary is known), bad sampling params, or a prompt that leaves no room
    under `max_seq_len`. Every engine checks requests with this one function before it queues or sends them."""
    if not request.input_ids:
        raise EngineError("input_ids is empty: a prompt needs at least one token")
    bad = [t for t in request.input_ids if not isinstance(t, int) or isinstance(t, bool) or t < 0
           or (vocab_size is not None and t >= vocab_size)]
    if bad:
        limit = f"[0, {vocab_size})" if vocab_size is not None else "non-negative integers"
        raise EngineError(f"token id {bad[0]!r} in input_ids is out of the vocabulary: expected {limit}")
    request.sampling_params.validate()
    if max_seq_len is not None and len(request.input_ids) >= max_seq_len:
        raise ContextLengthError(f"prompt of {len(request.input_ids)} tokens leaves no room under the engine's "
                          f"max length {max_seq_len}")


@dataclass(frozen=True)
class EngineTarget:
    """What an engine backend serves: `model`, a model directory to start engines on, or `urls`, servers
    already running (then `model`, when given, is the directory they were started from)."""

    model: Path | None = None
    urls: tuple[str, ...] = ()


@dataclass(frozen=True)
class GenerateOutput:
    rid: str
    output_ids: list[int]
    output_logprobs: list[float]
    output_versions: list[int]
    finish_reason: FinishReason
    prompt_tokens: int
    text: str = ""
    num_interruptions: int = 0

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


@runtime_checkable
class InferenceEngine(Protocol):
    """What the rollout controller and evals need from a generation backend."""

    async def generate(self, request: GenerateRequest) -> GenerateOutput:
        """Generate until a stop condition; survives interruptions (pause/update/continue)."""

    async def pause(self, mode: PauseMode = "retract") -> None:
        """Stop scheduling. retract: in-flight requests drop their KV cache and wait; abort: they end
        with finish_reason "abort"; in_place: they keep their cache."""

    async def resume(self) -> None:
        """Continue generation; retracted requests recompute their cache from prompt + tokens so far."""

    async def update_weights(self, path: str, version: int) -> None:
        """Load weights from a checkpoint directory (safetensors) and tag later tokens with `version`."""

    async def health(self) -> bool:
        """True when the engine can serve requests."""

    async def model_info(self) -> dict[str, Any]:
        """At least: model_path, weight_version."""

    def server_stats(self) -> list[dict[str, Any]]:
        """Per generation server: url, requests in flight, segments served, failures, state (up / down /
        lost); [] for an engine without servers (in-process)."""

    async def close(self) -> None:
        """Release resources."""


@runtime_checkable
class TensorWeightEngine(Protocol):
    """An engine in the trainer's process: new weights are copied from the trainer's tensors in memory."""

    async def update_weights_from_tensors(self, named_tensors: list[tuple[str, torch.Tensor]], version: int | None,
                                          flush_cache: bool = True) -> None:
        """Copy the tensors into the weights of those names; `version` (the last part of an update) drops every
        cache and tags later tokens with it."""


@runtime_checkable
class WeightGroupEngine(Protocol):
    """An engine that receives weights broadcast by the trainer over a process group (SGLang's protocol,
    engine/weight_sync.py): the trainer is rank 0; the engine's ranks follow."""

    async def weight_group_ranks(self) -> int:
        """How many ranks of the group the engine takes (one per tensor-parallel rank of each server)."""

    async def init_weight_group(self, master_address: str, master_port: int, rank_offset: int, world_size: int,
                                group_name: str, backend: str, timeout: float) -> None:
        """Join the group from rank `rank_offset` on; returns once every rank (the trainer's too) has joined."""

    async def begin_weight_update(self) -> None:
        """Open an update: its buckets follow, then `end_weight_update` (SGLang's weight-update session)."""

    async def update_weights_from_distributed(self, bucket: "Bucket", version: int | None, group_name: str,
                                              flush_cache: bool = True) -> None:
        """Receive one bucket the trainer broadcasts now and load it; `version` with the last bucket."""

    async def end_weight_update(self) -> None:
        """Close the update `begin_weight_update` opened."""

    async def destroy_weight_group(self, group_name: str) -> None:
        """Leave the group."""

