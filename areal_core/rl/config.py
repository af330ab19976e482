"""The configuration of `areal train`: one typed dataclass per part, each validating its own keys; the
defaults are the CPU demo's. `areal train --print-config` prints every key; `key.sub=value` overrides."""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from areal_core.engine.launch import EngineConfig
from areal_core.errors import ConfigError
from areal_core.plugins import check_backend
from areal_core.rewards.config import RewardServiceConfig
from areal_core.rl.algorithms import AdvantageEstimator, OffPolicyCorrection, check_correction

# `areal train --sync`: the synchronous baseline every speed-up is measured against.
SYNC_OVERRIDES = ["rollout.max_staleness=0", "rollout.weight_update=wait"]


@dataclass
class ModelConfig:
    path: str = "embedded"            # a Hugging Face model directory, or "embedded" (built by areal, cached)
    # Embedded model only. 3 layers, not 2: on the CPU demo the deeper model learns the carry the 2-layer one
    # kept missing (held-out greedy after RL 89-98% over nine runs of 450-500 steps, against 80-92% over
    # six), at ~1.3x the trainer's step time (bench/RESULTS.md).
    num_hidden_layers: int = 3
    hidden_size: int = 96             # embedded model only
    seed: int = 0                     # embedded model only

    @property
    def short_name(self) -> str:
        """How run names refer to the model: "embedded", or the model directory's name."""
        return "embedded" if self.path == "embedded" else Path(self.path).name


@dataclass
class WarmupConfig:
    """Supervised warm-up before RL (see warmup.py); cached by content, so a second run reuses it."""

    enabled: bool = True
    steps: int = 2000                 # at most this many steps
    batch_size: int = 64
    lr: float = 3e-3
    lr_warmup_steps: int = 50
    stop_at_accuracy: float | None = 0.2  # stop once this share of recent training batches is answered exactly
    stop_window: int = 10             # "recent": the last this many training batches
    target_field: str = "reference"   # the sample field that is the ideal response (text, or a list of turns)
    task: str | None = None           # warm up on another task (e.g. a tool's call format on other problems)
    seed: int = 0

    def validate(self) -> None:
        if self.stop_window < 1:
            raise ValueError(f"stop_window must be >= 1, got {self.stop_window}")


@dataclass
class RolloutConfig:
    # 64 prompts x 8 responses: per step, more distinct prompts with a correct sample (what GRPO learns
    # from) than 32 x 16 for the same generation cost; on the CPU demo it learned faster per second.
    batch_size: int = 64            # prompts per training step (B)
    group_size: int = 8             # responses per prompt (n)
    max_staleness: int = 1          # eta; 0 with weight_update=wait is the synchronous baseline
    # interrupt: pause, load, continue; wait: let in-flight requests finish first
    weight_update: Literal["interrupt", "wait"] = "interrupt"
    temperature: float = 1.0
    # top-p / top-k truncation (SGLang's meanings; top_k -1: off): the engines record, and the trainer recomputes,
    # the log-probs of the renormalised truncated distribution the tokens were drawn from (engine/protocol.py).
    top_p: float = 1.0
    top_k: int = -1
    max_new_tokens: int = 16
    max_concurrent_prompts: int = 256
    # Skip groups whose responses all got the same reward: their group-normalised advantages are zero,
    # so they add no policy gradient, only trainer time (DAPO's dynamic-sampling observation).
    skip_uniform_groups: bool = True
    # DAPO's dynamic sampling (Yu et al. 2025): a batch is the next batch_size groups *with* a signal, in admission
    # order; uniform groups are dropped and more prompts generated in their place, within the staleness bound
    # (their slots are freed at once). dynamic_sampling_max_prompts bounds the prompts one batch may use up
    # (None: 4 x batch_size); past it the batch is topped up with uniform groups (no gradient, no optimizer step
    # if all are) rather than wait forever on a task the policy cannot yet solve at all.
    dynamic_sampling: bool = False
    dynamic_sampling_max_prompts: int | None = None
    seed: int = 0
    # How an episode runs: None takes the task spec's workflow (default single_turn); a name (tool_calls, ...)
    # overrides it. workflow_options are merged over the task's (tools, call_format, max_turns, ...).
    workflow: str | None = None
    workflow_options: dict[str, Any] = field(default_factory=dict)

    def validate(self) -> None:
        if self.batch_size < 1 or self.group_size < 1:
            raise ValueError("batch_size and group_size must be >= 1")
        if self.max_staleness < 0:
            raise ValueError(f"max_staleness must be >= 0, got {self.max_staleness}")
        if self.dynamic_sampling_max_prompts is not None and self.dynamic_sampling_max_prompts < self.batch_size:
            raise ValueError(f"dynamic_sampling_max_prompts must be >= batch_size ({self.batch_size}), got "
                             f"{self.dynamic_sampling_max_prompts}")
        if not 0.0 < self.top_p <= 1.0:
            raise ValueError(f"top_p must be in (0, 1], got {self.top_p}")
        if self.top_k == 0 or self.top_k < -1:
            raise ValueError(f"top_k must be -1 (off) or >= 1, got {self.top_k}")


@dataclass
class LoraSettings:
    """LoRA (Hu et al. 2021, with peft): rank-`rank` adapters B A on each `target_modules` linear layer; only they
    train (and only they are in the optimizer); the engines serve W + (alpha / rank) B A (rl/lora.py)."""

    rank: int = 8
    alpha: float = 16.0
    target_modules: list[str] = field(default_factory=lambda: ["q_proj", "k_proj", "v_proj", "o_proj"])
    dropout: float = 0.0

    @property
    def scale(self) -> float:
        return self.alpha / self.rank

    def validate(self) -> None:
        if self.rank < 1:
            raise ValueError(f"lora.rank must be >= 1, got {self.rank}")
        if not self.alpha > 0:
            raise ValueError(f"lora.alpha must be > 0, got {self.alpha}")
        if not self.target_modules:
            raise ValueError("lora.target_modules must name at least one module (e.g. [q_proj, v_proj])")
        if not 0.0 <= self.dropout < 1.0:
            raise ValueError(f"lora.dropout must be in [0, 1), got {self.dropout}")


@dataclass
class TrainerConfig:
    """Optimisation and loss settings (the defaults suit the CPU demo)."""

    backend: str = "local"             # a registered trainer backend: local, fsdp, or a plugin's
    lr: float = 3e-4                    # the CPU demo collapses above ~3e-4
    lr_schedule: Literal["constant", "cosine", "linear"] = "constant"
    warmup_steps: int = 0
    weight_decay: float = 0.0
    betas: list[float] = field(default_factory=lambda: [0.9, 0.999])
    grad_clip: float = 1.0
    advantage: AdvantageEstimator = "grpo"
    decoupled: bool = True              # False: plain PPO, pi_prox = pi_behav
    eps_clip: float = 0.2
    eps_clip_high: float | None = None  # None: same as eps_clip
    # How the behaviour weight w = pi_prox / pi_behav corrects for what the engine sampled (staleness, and the
    # engine/trainer mismatch: precision, kernels): mask (tokens with w > 5 masked; AReaL), tis (w truncated to
    # [0, 2]), icepop (tokens with w outside [0.5, 5] masked), sequence_mask (sequences whose geometric-mean w is
    # outside [0.8, 1.25] masked), none. Equations and sources: algorithms.OFF_POLICY_CORRECTIONS; which to use:
    # docs/off-policy.md.
    correction: OffPolicyCorrection = "mask"
    correction_bounds: list[float] | None = None  # [lo, hi] of the correction (None: its defaults, above)
    # pi_prox: recompute (exact: one no-grad forward pass over the batch before the update; the first minibatch's
    # comes free) or loglinear (AReaL 2.0's log-linear interpolation in the policy version between pi_behav and the
    # weights of each update forward, no pass of its own; trainer.loglinear_prox; metric prox_approx_error).
    proximal: Literal["recompute", "loglinear"] = "recompute"
    # A warning in the log when the engine/trainer mismatch KL (metric mismatch_kl) passes this (None: never).
    mismatch_warn_kl: float | None = 0.01
    # The mismatch is measured on tokens the engine sampled with the weights the trainer holds, against pi_prox
    # (free). An async run's tokens are mostly one version old: with this, the trainer keeps the weights before
    # its last update (one more copy of the parameters, sharded like them) and measures those too, on one
    # micro-batch per step and rank (one more forward pass of it). false: no copy, no extra pass.
    measure_stale_mismatch: bool = True
    dual_clip: float | None = None      # c > 1: the objective of a negative advantage is at least c x A (None: off)
    # token: the minibatch's token mean; sequence: each sequence's token mean, then their mean; constant: Dr.
    # GRPO's sum / (sequences x aggregation_tokens) (Liu et al. 2025: no length bias; with advantage=dr_grpo).
    # The PPO term, the KL penalty and the entropy bonus all follow it; a token the cap masks still counts.
    aggregation: Literal["token", "sequence", "constant"] = "token"
    aggregation_tokens: int | None = None  # L_max of constant: the longest response, e.g. rollout.max_new_tokens
    kl_coef: float = 0.0                # KL(pi_theta || pi_ref) penalty (k3 estimator); 0: no reference model
    entropy_coef: float = 0.0           # entropy bonus: loss -= entropy_coef x mean token entropy (against collapse)
    ppo_minibatches: int = 2            # optimizer steps per batch (each on a random share of the batch; on
                                        # the CPU demo 2 learned faster than 8, whose small minibatches are noisy)
    microbatching: Literal["packed", "fixed"] = "packed"
    # Responses to one prompt in one micro-batch are packed into one row behind a single copy of the prompt
    # (a 4-D attention mask keeps them apart): the CPU demo's 12-token prompts were ~70% of the trained
    # tokens. Needs an attention implementation that takes a 4-D mask (sdpa, eager); others ignore it.
    share_prompts: bool = True
    micro_batch_tokens: int = 4096      # packed: budget of padded tokens per micro-batch
    micro_batch_size: int = 16          # fixed: sequences per micro-batch
    # Each decoder layer's activations recomputed in the backward pass instead of kept (Hugging Face gradient
    # checkpointing, non-reentrant): a micro-batch holds about one layer's activations, not every layer's, for about
    # one more forward pass of compute (bench/RESULTS.md, "Real-size rehearsal").
    gradient_checkpointing: bool = False
    dtype: str = "float32"
    device: str = "cpu"                 # fsdp: "cuda" gives each rank its local GPU (NCCL); "cpu" uses gloo
    fsdp_processes: int = 2             # fsdp: ranks torchrun starts on this machine (--nproc-per-node)
    # fsdp: extra torchrun arguments; empty: --standalone. Across nodes, this machine is node 0 of a static
    # rendezvous: [--nnodes, 2, --node-rank, 0, --master-addr, HOST, --master-port, 29500] (docs/deployment.md).
    # Numbers may be given unquoted: they are turned into strings.
    torchrun_args: list[str | int | float] = field(default_factory=list)
    fsdp_threads_per_process: int = 1   # fsdp: torch / OpenMP threads of each rank
    fsdp_timeout_s: float = 1800.0      # fsdp: longest wait for the ranks to start, or to finish one request
    # LoRA adapters instead of full fine-tuning, e.g. {rank: 8, alpha: 16, target_modules: [q_proj, v_proj]}
    # (LoraSettings); null: every weight trains.
    lora: LoraSettings | None = None
    options: dict[str, Any] = field(default_factory=dict)  # settings of a plugin backend (built-ins take none)

    def __post_init__(self) -> None:
        # YAML reads `--nnodes, 2` as a string and an int; torchrun wants words.
        words = []
        for i, word in enumerate(self.torchrun_args):
            if isinstance(word, bool) or not isinstance(word, (str, int, float)):
                raise ConfigError(f"trainer.torchrun_args[{i}]: expected a string or a number, got "
                                  f"{type(word).__name__} {word!r}")
            words.append(str(word))
        self.torchrun_args = words
        if isinstance(self.lora, dict):   # as the FSDP ranks receive it (dataclasses.asdict)
            self.lora = LoraSettings(**self.lora)

    @staticmethod
    def upgrade_keys(data: dict[str, Any]) -> dict[str, Any]:
        """behav_cap / behav_cap_mode (before trainer.correction) as today's keys: mode mask is correction mask,
        mode cap is tis, both with bounds [0, behav_cap]; behav_cap null is correction none."""
        if "behav_cap" not in data and "behav_cap_mode" not in data:
            return data
        cap, mode = data.pop("behav_cap", 5.0), data.pop("behav_cap_mode", "mask")
        if cap is None:
            data.setdefault("correction", "none")
        else:
            data.setdefault("correction", "tis" if mode == "cap" else "mask")
            data.setdefault("correction_bounds", [0.0, cap])
        return data

    def validate(self) -> None:
        check_backend("trainer", self.backend)
        check_correction(self.correction, self.correction_bounds)
        if self.aggregation == "constant" and (self.aggregation_tokens is None or self.aggregation_tokens < 1):
            raise ValueError("aggregation=constant needs aggregation_tokens >= 1 (Dr. GRPO's constant length L_max, "
                             f"e.g. rollout.max_new_tokens), got {self.aggregation_tokens}")
        if self.dual_clip is not None and not self.dual_clip > 1.0:
            raise ValueError(f"dual_clip must be > 1 (it bounds a negative advantage's objective at c x A), "
                             f"got {self.dual_clip}")


@dataclass
class EvalConfig:
    every: int = 0                    # evaluate every N steps (0: only before and after)
    limit: int = 500                  # held-out samples
    greedy: bool = True
    sampled: bool = True              # temperature = rollout temperature
    max_new_tokens: int | None = None  # default: rollout.max_new_tokens
    stop_at_accuracy: float | None = None  # stop when sampled held-out accuracy reaches this
    db: str | None = "default"        # results store for `areal leaderboard`: "default" is the one `areal eval`
                                      # uses ($AREAL_EVAL_DB or the user data dir); a path or SQLAlchemy URL; null: none


@dataclass
class TrainConfig:
    name: str | None = None           # runs/<name>-<time>/; default: <task>-<model> (e.g. arithmetic-embedded)
    output_dir: str = "runs"
    task: str = "arithmetic"
    eval_task: str | None = "arithmetic-test"
    steps: int = 450                  # the CPU demo: ~4.5 minutes on two cores with the 3-layer embedded model
    seed: int = 0
    data_dir: str | None = None
    reward_options: dict[str, Any] = field(default_factory=dict)  # merged over the task's reward options
    tensorboard: bool = True
    keep_policy_every: int = 0        # keep the published weights of every N-th step in RUN_DIR/policies/ (0: none)
    checkpoint_every: int = 20        # write a resumable checkpoint every N steps (0: never)
    keep_checkpoints: int = 2         # the newest N checkpoints are kept (an older one is the fallback)
    model: ModelConfig = field(default_factory=ModelConfig)
    warmup: WarmupConfig = field(default_factory=WarmupConfig)
    rollout: RolloutConfig = field(default_factory=RolloutConfig)
    trainer: TrainerConfig = field(default_factory=TrainerConfig)
    engine: EngineConfig = field(default_factory=EngineConfig)
    reward: RewardServiceConfig = field(default_factory=lambda: RewardServiceConfig(workers=1))
    eval: EvalConfig = field(default_factory=EvalConfig)

    def validate(self) -> None:
        if self.steps < 1:
            raise ValueError(f"steps must be >= 1, got {self.steps}")

    @property
    def run_name(self) -> str:
        """The name of the run's directory (before its time stamp): `name`, else the task and the model."""
        return self.name or f"{self.task}-{self.model.short_name}"


# Keys that fix which prompts a checkpoint has trained on (batch k is prompts [kB, (k+1)B) of the task's
# order under rollout.seed): changed on resume, prompts would be skipped or trained twice.
# The sampling keys too: the groups a checkpoint holds were drawn under them (their log-probs are of that
# distribution), and dynamic sampling's slot accounting is in the checkpoint.
RESUME_FIXED_KEYS = ("task", "rollout.seed", "rollout.batch_size", "rollout.group_size", "rollout.temperature",
                     "rollout.top_p", "rollout.top_k", "rollout.dynamic_sampling")


def check_resume_config(config: TrainConfig, saved: TrainConfig, run_dir: Path) -> None:
    """ConfigError unless `config` keeps the RESUME_FIXED_KEYS of the run's saved config."""
    def get(obj: Any, key: str) -> Any:
        for part in key.split("."):
            obj = getattr(obj, part)
        return obj

    changed = [f"{key}={get(config, key)!r} (the run has {get(saved, key)!r})"
               for key in RESUME_FIXED_KEYS if get(config, key) != get(saved, key)]
    if changed:
        raise ConfigError(f"--resume {run_dir}: {', '.join(changed)}: these keys fix which prompts the checkpoint "
                          f"has trained on and cannot change on resume ({', '.join(RESUME_FIXED_KEYS)})")
