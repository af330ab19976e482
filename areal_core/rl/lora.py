"""LoRA training (`trainer.lora`, peft): low-rank adapters on the target linear layers, the rest frozen.

A target layer's output is x W^T + scale x (x A^T) B^T, scale = alpha / rank (Hu et al. 2021); B starts at zero,
so the first policy is the base model. Only A and B require gradients, so only they are in the optimizer
(trainer.PPOLearner) and only their states are checkpointed beside them. The engines never see adapters: they
are sent W + scale x B A under the base model's names (`engine.weight_sync.merge_lora`), by the disk
(`merged_state`) or streamed, where `engine.weight_sync=delta` sends only the adapted weights.

Checkpoints hold the base weights as an HF model directory (model.safetensors, loadable as it is: a resumed
run's trainer and engines start from it) and the adapters in adapters.safetensors (rl/checkpoint.py).
"""
from __future__ import annotations

import torch

from areal_core.engine.weight_sync import LORA_A, LORA_B, adapted_module, is_adapter, merge_lora, served_name
from areal_core.rl.config import LoraSettings


ADAPTER_SEED = 0


def add_adapters(model: torch.nn.Module, settings: LoraSettings) -> torch.nn.Module:
    """The model with adapters injected in place (the HF class stays; the base weights are frozen)."""
    from peft import LoraConfig, inject_adapter_in_model

    # A's random initialisation must be the same on every FSDP rank (each shards its own copy) and in the local
    # trainer: drawn from a fixed seed, without touching the run's RNG.
    try:
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(ADAPTER_SEED)
            model = inject_adapter_in_model(LoraConfig(r=settings.rank, lora_alpha=settings.alpha,
                                                   target_modules=list(settings.target_modules),
                                                       lora_dropout=settings.dropout, bias="none"), model)
    except ValueError as exc:   # e.g. no module matches target_modules
        from areal_core.errors import ConfigError

        raise ConfigError(f"trainer.lora: {exc}") from None
    for name, param in model.named_parameters():
        param.requires_grad_(is_adapter(name))
    return model


def merged_state(state: dict[str, torch.Tensor], scale: float) -> dict[str, torch.Tensor]:
    """A full state dict with adapters, as the served model's weights: each adapted weight merged."""
    merged = {}
    for name, tensor in state.items():
        if is_adapter(name):
            continue
        module = adapted_module(name, state)
        if module is not None:
            tensor = merge_lora(tensor, state[module + LORA_A], state[module + LORA_B], scale)
        merged[served_name(name)] = tensor
    return merged
