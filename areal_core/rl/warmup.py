"""Supervised warm-up: a few steps of next-token training on (prompt -> reference) before RL.

RL needs a policy that is sometimes right (a group whose responses all fail teaches nothing). For the
tiny embedded model the warm-up brings held-out accuracy from ~0 to a modest level; RL does the rest.
The result is cached by content (model + settings), so a second `areal train` reuses it.
"""
from __future__ import annotations

import json
import random
import time
from pathlib import Path
from typing import Any, Callable

import torch

from areal_core.config import to_plain
from areal_core.errors import DatasetError
from areal_core.rl.config import WarmupConfig
from areal_core.tasks import Task


def warmed_up(model_dir: Path, task: Task, config: WarmupConfig, device: str, echo: Callable[[str], None]) -> Path:
    """The model after the warm-up of `config` on `task`: from the cache when it holds one for the same
    model, task and settings, else trained now and put in the cache (whole, even with runs started together)."""
    from areal_core.rl.model_cache import COMPLETE_MARKER, build_cache_entry, cache_dir, digest, file_digest

    key = digest(file_digest(model_dir), to_plain(config), task.name, task.spec.content())
    warm_dir = cache_dir() / "warmup" / key
    if (warm_dir / COMPLETE_MARKER).exists():
        echo(f"warm-up: reusing {warm_dir}")
        return warm_dir
    started = time.perf_counter()
    build_cache_entry(warm_dir, lambda directory: supervised_warmup(model_dir, task, config, directory, device))
    done = json.loads((warm_dir / "warmup.json").read_text())
    echo(f"warm-up: {done['steps']} supervised steps in {time.perf_counter() - started:.1f}s "
         f"(training-batch exact match {done['final_batch_accuracy']:.0%}) -> {warm_dir}")
    return warm_dir


def warmup_target(value: Any, tokenizer: Any, field: str) -> tuple[list[int], list[int]]:
    """The target's tokens and which are trained on: a text is all trained on; a transcript (a list of
    {role, text} turns, e.g. a tool-call episode) only in its assistant turns, never in a tool's output."""
    if not isinstance(value, list):
        ids = tokenizer(str(value), add_special_tokens=False)["input_ids"]
        return ids, [1] * len(ids)
    tokens, mask = [], []
    for turn in value:
        if not isinstance(turn, dict) or not isinstance(turn.get("text"), str):
            raise DatasetError(f"warm-up target {field!r}: a transcript is a list of {{role, text}} turns, got {turn!r}")
        ids = tokenizer(turn["text"], add_special_tokens=False)["input_ids"]
        tokens += ids
        mask += [1 if turn.get("role", "assistant") == "assistant" else 0] * len(ids)
    return tokens, mask


def supervised_warmup(model_path: str | Path, task: Task, config: WarmupConfig, output_dir: str | Path,
                      device: str = "cpu", progress: Any = None) -> Path:
    """Train on prompt + target + EOS (loss on the target and EOS only; a transcript target on its assistant
    turns only); save to `output_dir`.

    Stops early when the exact-match accuracy of the teacher-forced training batches (every target token
    the argmax: what greedy decoding would produce), averaged over the last `stop_window` steps, reaches
    `stop_at_accuracy`, so RL starts from a policy that is sometimes, not always, right."""
    from areal_core.engine.model import load_model, load_tokenizer

    model = load_model(model_path, device=device).train()
    tokenizer = load_tokenizer(model_path)
    eos = tokenizer.eos_token_id
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0
    samples = task.samples()
    rng = random.Random(config.seed)
    torch.manual_seed(config.seed)
    optimizer = torch.optim.AdamW(model.parameters(), lr=config.lr)
    schedule = torch.optim.lr_scheduler.LambdaLR(
        optimizer, lambda step: min(1.0, (step + 1) / max(1, config.lr_warmup_steps)))
    recent: list[float] = []
    steps_done = 0
    for step in range(config.steps):
        batch = [samples[rng.randrange(len(samples))] for _ in range(config.batch_size)]
        seqs, trained = [], []
        for sample in batch:
            prompt = task.prompt_token_ids(sample, tokenizer)
            target, mask = warmup_target(sample[config.target_field], tokenizer, config.target_field)
            seqs.append(prompt + target + [eos])
            trained.append([0] * len(prompt) + mask + [1])
        width = max(map(len, seqs))
        tokens = torch.full((len(seqs), width), pad, dtype=torch.long)
        labels = torch.full((len(seqs), width), -100, dtype=torch.long)
        attention = torch.zeros((len(seqs), width), dtype=torch.long)
        for row, (seq, mask) in enumerate(zip(seqs, trained)):
            tokens[row, : len(seq)] = torch.tensor(seq)
            labels[row, : len(seq)] = torch.where(torch.tensor(mask) == 1, torch.tensor(seq), -100)
            attention[row, : len(seq)] = 1
        out = model(input_ids=tokens.to(device), attention_mask=attention.to(device), labels=labels.to(device))
        loss = out.loss
        with torch.no_grad():
            predicted = out.logits[:, :-1].argmax(-1)
            target, scored = labels[:, 1:].to(device), labels[:, 1:].to(device) != -100
            exact = ((predicted == target) | ~scored).all(dim=1).float().mean().item()
        recent.append(exact)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        schedule.step()
        steps_done = step + 1
        if progress is not None:
            progress(step + 1, loss.item())
        window = recent[-config.stop_window:]
        if config.stop_at_accuracy is not None and len(window) == config.stop_window and \
                sum(window) / len(window) >= config.stop_at_accuracy:
            break
    output_dir = Path(output_dir)
    output_dir.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(output_dir, safe_serialization=True)
    tokenizer.save_pretrained(output_dir)
    window = recent[-config.stop_window:]
    (output_dir / "warmup.json").write_text(json.dumps({
        "steps": steps_done, "final_batch_accuracy": sum(window) / max(1, len(window)),
        "batch_accuracy": [round(value, 4) for value in recent]}))  # per step: the warm-up's curve
    return output_dir
