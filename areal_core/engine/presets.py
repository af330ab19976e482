"""Real-size models built offline: the architecture and size of a hub model, random weights, and a real byte-level
BPE tokenizer trained here on the eval data's text, with Qwen's special tokens and chat template.

`areal init-model DIR --preset qwen2.5-0.5b` writes what a hub checkout holds (config.json, safetensors weights,
tokenizer.json, tokenizer_config.json with its chat template, generation_config.json), so every path a real
model takes (loading, tokenising, templating, sharding, syncing, checkpointing) runs at its real size. The
weights are random: this rehearses the system, not the learning (the embedded model's demo shows that).
"""
from __future__ import annotations

import gzip
import json
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from areal_core.engine.model import ModelError, quiet_transformers
from areal_core.files import resolve_data_dir


@dataclass(frozen=True)
class Preset:
    architecture: str            # the transformers class, as config.json's "architectures" names it
    config: dict[str, Any]       # its config (vocab_size the hub model's: the embedding is the real size)
    source: str                  # where the shapes come from
    special_tokens: tuple[str, ...] = field(default=())


# Qwen2.5's added tokens, in its order (ids after the BPE vocabulary, as on the hub).
QWEN_SPECIAL_TOKENS = (
    "<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|object_ref_start|>", "<|object_ref_end|>", "<|box_start|>",
    "<|box_end|>", "<|quad_start|>", "<|quad_end|>", "<|vision_start|>", "<|vision_end|>", "<|vision_pad|>",
    "<|image_pad|>", "<|video_pad|>", "<tool_call>", "</tool_call>", "<|fim_prefix|>", "<|fim_middle|>",
    "<|fim_suffix|>", "<|fim_pad|>", "<|repo_name|>", "<|file_sep|>")
_QWEN_NOT_SPECIAL = {"<tool_call>", "</tool_call>", "<|fim_prefix|>", "<|fim_middle|>", "<|fim_suffix|>",
                     "<|fim_pad|>", "<|repo_name|>", "<|file_sep|>"}  # added tokens, but kept when decoding

_QWEN2 = {"hidden_act": "silu", "rms_norm_eps": 1e-6, "rope_theta": 1_000_000.0, "attention_dropout": 0.0,
          "tie_word_embeddings": True, "use_sliding_window": False, "max_window_layers": 21, "vocab_size": 151936}
PRESETS: dict[str, Preset] = {
    "qwen2.5-0.5b": Preset("Qwen2ForCausalLM", {
        **_QWEN2, "hidden_size": 896, "intermediate_size": 4864, "num_hidden_layers": 24, "num_attention_heads": 14,
        "num_key_value_heads": 2, "max_position_embeddings": 32768}, "Qwen/Qwen2.5-0.5B-Instruct config.json",
        QWEN_SPECIAL_TOKENS),
    "qwen2.5-1.5b": Preset("Qwen2ForCausalLM", {
        **_QWEN2, "hidden_size": 1536, "intermediate_size": 8960, "num_hidden_layers": 28, "num_attention_heads": 12,
        "num_key_value_heads": 2, "max_window_layers": 28, "max_position_embeddings": 32768},
        "Qwen/Qwen2.5-1.5B-Instruct config.json", QWEN_SPECIAL_TOKENS),
    "llama-1b": Preset("LlamaForCausalLM", {
        "hidden_size": 2048, "intermediate_size": 8192, "num_hidden_layers": 16, "num_attention_heads": 32,
        "num_key_value_heads": 8, "head_dim": 64, "hidden_act": "silu", "rms_norm_eps": 1e-5,
        "rope_theta": 500_000.0, "tie_word_embeddings": True, "vocab_size": 128256, "max_position_embeddings": 131072,
        "rope_scaling": {"rope_type": "llama3", "factor": 32.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                         "original_max_position_embeddings": 8192}},
        "meta-llama/Llama-3.2-1B config.json (its tokenizer here: the same BPE, Qwen's special tokens and template)",
        QWEN_SPECIAL_TOKENS),
}

# Qwen2's pre-tokenizer split: contractions, words with one leading non-letter, single digits (numbers split
# digit by digit), punctuation runs with their newlines, newline runs, and whitespace.
QWEN_SPLIT = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|"
              r"\s+(?!\S)|\s+")

# Qwen2.5-Instruct's chat template (tools rendered into the system turn, tool results as user turns).
QWEN_CHAT_TEMPLATE = """{%- if tools %}
    {{- '<|im_start|>system\\n' }}
    {%- if messages[0]['role'] == 'system' %}
        {{- messages[0]['content'] }}
    {%- else %}
        {{- 'You are Qwen, created by Alibaba Cloud. You are a helpful assistant.' }}
    {%- endif %}
    {{- "\\n\\n# Tools\\n\\nYou may call one or more functions to assist with the user query.\\n\\nYou are provided with function signatures within <tools></tools> XML tags:\\n<tools>" }}
    {%- for tool in tools %}
        {{- "\\n" }}
        {{- tool | tojson }}
    {%- endfor %}
    {{- "\\n</tools>\\n\\nFor each function call, return a json object with function name and arguments within <tool_call></tool_call> XML tags:\\n<tool_call>\\n{\\"name\\": <function-name>, \\"arguments\\": <args-json-object>}\\n</tool_call><|im_end|>\\n" }}
{%- else %}
    {%- if messages[0]['role'] == 'system' %}
        {{- '<|im_start|>system\\n' + messages[0]['content'] + '<|im_end|>\\n' }}
    {%- else %}
        {{- '<|im_start|>system\\nYou are Qwen, created by Alibaba Cloud. You are a helpful assistant.<|im_end|>\\n' }}
    {%- endif %}
{%- endif %}
{%- for message in messages %}
    {%- if (message.role == "user") or (message.role == "system" and not loop.first) or (message.role == "assistant" and not message.tool_calls) %}
        {{- '<|im_start|>' + message.role + '\\n' + message.content + '<|im_end|>' + '\\n' }}
    {%- elif message.role == "assistant" %}
        {{- '<|im_start|>' + message.role }}
        {%- if message.content %}
            {{- '\\n' + message.content }}
        {%- endif %}
        {%- for tool_call in message.tool_calls %}
            {%- if tool_call.function is defined %}
                {%- set tool_call = tool_call.function %}
            {%- endif %}
            {{- '\\n<tool_call>\\n{"name": "' }}
            {{- tool_call.name }}
            {{- '", "arguments": ' }}
            {{- tool_call.arguments | tojson }}
            {{- '}\\n</tool_call>' }}
        {%- endfor %}
        {{- '<|im_end|>\\n' }}
    {%- elif message.role == "tool" %}
        {%- if (loop.index0 == 0) or (messages[loop.index0 - 1].role != "tool") %}
            {{- '<|im_start|>user' }}
        {%- endif %}
        {{- '\\n<tool_response>\\n' }}
        {{- message.content }}
        {{- '\\n</tool_response>' }}
        {%- if loop.last or (messages[loop.index0 + 1].role != "tool") %}
            {{- '<|im_end|>\\n' }}
        {%- endif %}
    {%- endif %}
{%- endfor %}
{%- if add_generation_prompt %}
    {{- '<|im_start|>assistant\\n' }}
{%- endif %}
"""

DEFAULT_VOCAB = 32768  # BPE vocabulary asked of the trainer (what the corpus yields may be less; >= 16k here)
MIN_VOCAB = 16384


def corpus_texts(data_dir: Path) -> Iterator[str]:
    """Every string in every row of the data sets under `data_dir` (json, jsonl, jsonl.gz, parquet), files in
    sorted order, so the same files give the same tokenizer."""
    files = sorted(p for p in data_dir.rglob("*") if p.is_file() and p.name.endswith(
        (".json", ".jsonl", ".jsonl.gz", ".parquet")))
    if not files:
        raise ModelError(f"no data files (json, jsonl, jsonl.gz, parquet) under {data_dir} to train a tokenizer on; "
                         "give the eval data with `areal --data-dir DIR init-model ...` or $AREAL_DATA_DIR")
    for path in files:
        for row in _rows(path):
            yield from _strings(row)


def _rows(path: Path) -> Iterator[Any]:
    if path.suffix == ".parquet":
        import pyarrow.parquet as pq

        yield from pq.read_table(path).to_pylist()
        return
    opener = gzip.open if path.name.endswith(".gz") else open
    with opener(path, "rt", encoding="utf-8") as f:
        if path.name.endswith((".jsonl", ".jsonl.gz")):
            for line in f:
                if line.strip():
                    yield json.loads(line)
        else:
            data = json.load(f)
            yield from data if isinstance(data, list) else [data]


def _strings(value: Any) -> Iterator[str]:
    if isinstance(value, str):
        if value.strip():
            yield value
    elif isinstance(value, dict):
        for item in value.values():
            yield from _strings(item)
    elif isinstance(value, (list, tuple)):
        for item in value:
            yield from _strings(item)


def build_bpe_tokenizer(texts: Iterator[str], vocab_size: int = DEFAULT_VOCAB,
                        special_tokens: tuple[str, ...] = QWEN_SPECIAL_TOKENS):
    """A byte-level BPE tokenizer trained on `texts` the way Qwen2's is built (NFC, its split regex, byte-level
    alphabet so any text round-trips), special tokens appended after the vocabulary; a transformers tokenizer."""
    from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    core = Tokenizer(models.BPE(byte_fallback=False))
    core.normalizer = normalizers.NFC()
    core.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(QWEN_SPLIT), behavior="isolated"),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
    core.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, min_frequency=2, show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    core.train_from_iterator(texts, trainer=trainer)
    if core.get_vocab_size() < MIN_VOCAB:
        raise ModelError(f"the corpus yields a BPE vocabulary of {core.get_vocab_size()} tokens, fewer than "
                         f"{MIN_VOCAB}: train it on more text")
    core.add_special_tokens([AddedToken(token, special=token not in _QWEN_NOT_SPECIAL, normalized=False)
                             for token in special_tokens])
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=core, eos_token="<|im_end|>", pad_token="<|endoftext|>", unk_token=None,
        clean_up_tokenization_spaces=False, model_max_length=131072, split_special_tokens=False)
    tokenizer.chat_template = QWEN_CHAT_TEMPLATE
    return tokenizer


def init_preset_model(output_dir: str | Path, preset: str, seed: int = 0, data_dir: str | Path | None = None,
                      vocab_size: int = DEFAULT_VOCAB, tokenizer_from: str | Path | None = None,
                      **overrides: Any) -> Path:
    """Write `preset` (PRESETS) with random weights (bfloat16, as hub checkpoints ship) and a BPE tokenizer
    trained on the data under `data_dir` (the eval data root by default) to `output_dir`; or the tokenizer of
    the model directory `tokenizer_from` (one built before: a machine without the data). `overrides` change
    config keys (e.g. num_hidden_layers for a shorter model of the same shapes)."""
    import torch
    import transformers
    from transformers import GenerationConfig

    if preset not in PRESETS:
        raise ModelError(f"unknown preset {preset!r}; one of {', '.join(PRESETS)}")
    spec = PRESETS[preset]
    unknown = set(overrides) - set(spec.config)
    if unknown:
        raise ModelError(f"unknown config key(s) {sorted(unknown)} for preset {preset}; choose from "
                         f"{sorted(spec.config)}")
    if tokenizer_from is not None:
        tokenizer = transformers.AutoTokenizer.from_pretrained(str(tokenizer_from))
    else:
        tokenizer = preset_tokenizer(preset, data_dir, vocab_size)
    ids = {token: tokenizer.convert_tokens_to_ids(token) for token in ("<|endoftext|>", "<|im_end|>")}
    settings = {**spec.config, **overrides}
    if len(tokenizer) > settings["vocab_size"]:
        raise ModelError(f"the tokenizer has {len(tokenizer)} tokens, more than the model's vocab_size "
                         f"{settings['vocab_size']}")
    architecture = getattr(transformers, spec.architecture)
    config = architecture.config_class(**settings, bos_token_id=None, eos_token_id=ids["<|im_end|>"],
                                       pad_token_id=ids["<|endoftext|>"])
    quiet_transformers()
    torch.manual_seed(seed)
    model = architecture._from_config(config, dtype=torch.bfloat16)
    model.generation_config = GenerationConfig(eos_token_id=[ids["<|im_end|>"], ids["<|endoftext|>"]],
                                               pad_token_id=ids["<|endoftext|>"])
    output_dir = Path(output_dir)
    output_dir.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(output_dir, safe_serialization=True)
    save_tokenizer(tokenizer, output_dir)
    parameters = sum(p.numel() for p in model.parameters())
    (output_dir / "areal_model.json").write_text(json.dumps(
        {"kind": "areal-preset", "preset": preset, "seed": seed, "source": spec.source, "parameters": parameters,
         "tokenizer_vocab": len(tokenizer), "overrides": overrides}, indent=2))
    return output_dir


def preset_tokenizer(preset: str, data_dir: str | Path | None = None, vocab_size: int = DEFAULT_VOCAB) -> Any:
    """The BPE tokenizer `init_preset_model` trains for `preset` on the data under `data_dir`."""
    return build_bpe_tokenizer(corpus_texts(resolve_data_dir(data_dir)), vocab_size, PRESETS[preset].special_tokens)


def save_tokenizer(tokenizer: Any, output_dir: str | Path) -> Path:
    """Saved as a hub model's tokenizer files (tokenizer.json, tokenizer_config.json with the chat template)."""
    output_dir = Path(output_dir)
    tokenizer.save_pretrained(output_dir)
    _declare_tokenizer_class(output_dir / "tokenizer_config.json")
    return output_dir


def _declare_tokenizer_class(config_file: Path) -> None:
    """Name the tokenizer class the hub model's tokenizer_config.json names, so AutoTokenizer (transformers, SGLang)
    loads it the way it loads the real one (tests check it reads tokenizer.json to the same ids)."""
    config = json.loads(config_file.read_text())
    config.update({"tokenizer_class": "Qwen2Tokenizer", "bos_token": None, "add_prefix_space": False,
                   "errors": "replace"})
    config.pop("backend", None)
    config_file.write_text(json.dumps(config, indent=2, ensure_ascii=False) + "\n")
