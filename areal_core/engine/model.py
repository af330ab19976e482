"""The embedded default model: a tiny Qwen2-architecture causal LM with a character-level tokenizer.

Built by the project (`areal init-model`), saved with `save_pretrained`, and loaded back through the same
`transformers` calls as any real model, so the CPU demo and the tests exercise the real code path.
"""
from __future__ import annotations

import json
import string
import threading
from pathlib import Path
from typing import Any

from areal_core.errors import ArealError

SPECIAL_TOKENS = ["<pad>", "<|endoftext|>", "<|im_start|>", "<|im_end|>", "<unk>"]
# Every printable ASCII character: digits and operators for arithmetic, letters and punctuation for puzzles.
CHARACTERS = [c for c in string.printable if c not in "\x0b\x0c\r"]

CHAT_TEMPLATE = (
    "{% for message in messages %}<|im_start|>{{ message['role'] }}\n{{ message['content'] }}<|im_end|>\n"
    "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)

TINY_DEFAULTS: dict[str, Any] = {
    "hidden_size": 128,
    "intermediate_size": 384,
    "num_hidden_layers": 3,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "max_position_embeddings": 256,
}


class ModelError(ArealError):
    """A model directory is missing, incomplete or of an unsupported architecture."""


def build_char_tokenizer():
    """A character-level fast tokenizer (one token per character) with Qwen-style special tokens."""
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab = {token: i for i, token in enumerate(SPECIAL_TOKENS + CHARACTERS)}
    core = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<unk>"))
    core.pre_tokenizer = pre_tokenizers.Split(Regex(r"[\s\S]"), behavior="isolated")
    core.decoder = decoders.Fuse()
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=core, pad_token="<pad>", eos_token="<|endoftext|>", unk_token="<unk>",
        additional_special_tokens=["<|im_start|>", "<|im_end|>"], clean_up_tokenization_spaces=False,
    )
    tokenizer.chat_template = CHAT_TEMPLATE
    return tokenizer


def init_model(output_dir: str | Path, seed: int = 0, **overrides: Any) -> Path:
    """Create the tiny model (random weights, deterministic for a seed) in `output_dir`."""
    import torch
    from transformers import GenerationConfig, Qwen2Config, Qwen2ForCausalLM

    output_dir = Path(output_dir)
    tokenizer = build_char_tokenizer()
    unknown = set(overrides) - set(TINY_DEFAULTS)
    if unknown:
        raise ModelError(f"unknown model option(s) {sorted(unknown)}; choose from {sorted(TINY_DEFAULTS)}")
    settings = {**TINY_DEFAULTS, **overrides}
    config = Qwen2Config(
        vocab_size=len(tokenizer), tie_word_embeddings=True, rms_norm_eps=1e-6,
        bos_token_id=None, eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id,
        **settings,
    )
    quiet_transformers()
    torch.manual_seed(seed)
    model = Qwen2ForCausalLM(config)
    # Matrices drawn with std 1/sqrt(fan_in) rather than HF's fixed 0.02: at this width 0.02 leaves attention
    # nearly uniform, and the tiny model then sits for thousands of steps on a plateau before it learns
    # digit sums (measured: never within 1,500 steps, against ~250 steps with this init).
    with torch.no_grad():
        for param in model.parameters():
            if param.dim() == 2:
                param.normal_(0.0, param.shape[1] ** -0.5)
    model.generation_config = GenerationConfig(eos_token_id=[tokenizer.eos_token_id, tokenizer.convert_tokens_to_ids("<|im_end|>")],
                                               pad_token_id=tokenizer.pad_token_id)
    output_dir.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(output_dir, safe_serialization=True)
    tokenizer.save_pretrained(output_dir)
    (output_dir / "areal_model.json").write_text(json.dumps({"kind": "areal-tiny", "seed": seed, **settings}, indent=2))
    return output_dir


def check_model_dir(path: str | Path) -> Path:
    path = Path(path)
    if not (path / "config.json").is_file():
        raise ModelError(f"{path} is not a Hugging Face model directory (no config.json); "
                         "create the default one with `areal init-model DIR`")
    if not any(path.glob("*.safetensors")):
        raise ModelError(f"{path} has no *.safetensors weights")
    return path


def quiet_transformers() -> None:
    """No per-file progress bars from transformers (they flood logs on every weight publication)."""
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()
    hf_logging.set_verbosity_error()


# from_pretrained builds the model on the meta device under process-wide state: two threads loading at once can
# leave one model on meta ("Cannot copy out of meta tensor", seen when two benchmark runs ended together).
_LOAD_LOCK = threading.Lock()


def load_model(path: str | Path, dtype: str = "float32", device: str = "cpu"):
    """Load a causal LM from a local directory (no hub access); one load at a time in a process."""
    import torch
    from transformers import AutoModelForCausalLM

    quiet_transformers()
    path = check_model_dir(path)
    with _LOAD_LOCK:
        model = AutoModelForCausalLM.from_pretrained(path, dtype=getattr(torch, dtype), local_files_only=True)
    return model.to(device).eval()


# Engine dtypes beyond torch's, emulated where no such matmul runs (the CPU); arithmetic in bfloat16:
#   "float8": weights rounded to float8 e4m3, one scale per tensor (an FP8 rollout engine);
#   "float4": the decoder layers' linear weights rounded to e2m1 (0, 0.5, 1, 1.5, 2, 3, 4, 6) with one scale per
#             block of 32, embeddings and output head kept (MXFP4 / NVFP4-style 4-bit rollouts);
#   "int4", "int3": every matrix (decoder linears and embeddings, so a tied output head too) rounded to symmetric
#             4-bit (-7 .. 7) or 3-bit (-3 .. 3) integers with one scale per block of 32 (GPTQ / AWQ-style weights,
#             group size 32); int3 is past what serving engines use, to find where corrections start to matter.
WEIGHT_DTYPES = {"float8": "bfloat16", "float4": "bfloat16", "int4": "bfloat16", "int3": "bfloat16"}
ENGINE_DTYPES = ("float32", "bfloat16", "float16", *WEIGHT_DTYPES)  # what engine.dtype / --dtype take


def load_engine_model(path: str | Path, dtype: str = "float32", device: str = "cpu"):
    """`load_model` for an engine: torch dtypes, or a WEIGHT_DTYPES entry (rounded weights, see there)."""
    model = load_model(path, dtype=WEIGHT_DTYPES.get(dtype, dtype), device=device)
    round_engine_weights(model, dtype)
    return model


def round_engine_weights(model, dtype: str) -> None:
    """Round the weights as an engine of WEIGHT_DTYPES `dtype` holds them (nothing for a torch dtype)."""
    if dtype == "float8":
        round_weights_to_float8(model)
    elif dtype == "float4":
        round_weights_to_float4(model)
    elif dtype in ("int4", "int3"):
        round_weights_to_integers(model, bits=int(dtype[3:]))


def decoder_layers(model) -> list:
    """The model's decoder layers: the modules of the types it declares unsplittable (`_no_split_modules`)."""
    layer_types = set(getattr(model, "_no_split_modules", None) or ())
    return [module for module in model.modules() if type(module).__name__ in layer_types]


_E2M1 = (0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0)


def round_to_grid(weight, grid: tuple[float, ...], block: int = 32):
    """`weight` [rows, cols] with each block of `block` inputs scaled so that its largest magnitude is the grid's
    largest value, rounded to the nearest of +-`grid`, scaled back (float32)."""
    import torch

    weight = weight.float()
    values = torch.tensor(grid, device=weight.device)
    rows, cols = weight.shape
    padded = torch.nn.functional.pad(weight, (0, (-cols) % block)).reshape(rows, -1, block)
    scale = padded.abs().amax(-1, keepdim=True).clamp(min=1e-12) / values.max()
    scaled = padded / scale
    nearest = (scaled.abs()[..., None] - values).abs().argmin(-1)
    return (values[nearest] * scaled.sign() * scale).reshape(rows, -1)[:, :cols]


def round_weights_to_float4(model, block: int = 32) -> None:
    """Round every linear weight inside the decoder layers to e2m1 with a scale per block of `block` inputs (the
    block's largest magnitude maps to 6), in place."""
    import torch

    layers = decoder_layers(model)
    if not layers:
        raise ModelError(f"float4: {type(model).__name__} declares no decoder layer type (_no_split_modules) whose "
                         "linear weights to round")
    with torch.no_grad():
        for layer in layers:
            for module in layer.modules():
                if isinstance(module, torch.nn.Linear):
                    module.weight.copy_(round_to_grid(module.weight, _E2M1, block).to(module.weight.dtype))


def round_weights_to_integers(model, bits: int, block: int = 32) -> None:
    """Round every matrix weight (linear layers, embeddings) to symmetric `bits`-bit integers (-(2^(bits-1) - 1) ..
    2^(bits-1) - 1) with a scale per block of `block` inputs (the block's largest magnitude maps to the largest),
    in place; vectors (norms, biases) keep their dtype."""
    import torch

    grid = tuple(float(i) for i in range(2 ** (bits - 1)))
    with torch.no_grad():
        for parameter in model.parameters():
            if parameter.dim() == 2:
                parameter.copy_(round_to_grid(parameter, grid, block).to(parameter.dtype))


def round_weights_to_float8(model) -> None:
    """Round every matrix weight (linear layers, embeddings) to float8 e4m3 with a per-tensor scale (its largest
    magnitude maps to e4m3's 448), in place; vectors (norms, biases) keep their dtype, as FP8 engines keep them."""
    import torch

    with torch.no_grad():
        for parameter in model.parameters():
            if parameter.dim() < 2:
                continue
            scale = parameter.abs().amax().float().clamp(min=1e-12) / 448.0
            rounded = (parameter.float() / scale).to(torch.float8_e4m3fn).float() * scale
            parameter.copy_(rounded.to(parameter.dtype))


def load_tokenizer(path: str | Path):
    """The directory's tokenizer. A directory that declares the generic fast tokenizer (as ours does) gets
    exactly its tokenizer.json; AutoTokenizer would rebuild it as the model type's tokenizer (Qwen2's BPE)."""
    from transformers import AutoTokenizer, PreTrainedTokenizerFast

    path = check_model_dir(path)
    config_file = path / "tokenizer_config.json"
    declared = json.loads(config_file.read_text()).get("tokenizer_class") if config_file.is_file() else None
    if declared in ("TokenizersBackend", "PreTrainedTokenizerFast"):
        return PreTrainedTokenizerFast.from_pretrained(path, local_files_only=True)
    return AutoTokenizer.from_pretrained(path, local_files_only=True)


def eos_token_ids(model_dir: str | Path, tokenizer: Any) -> set[int]:
    """EOS ids from generation_config.json (may be a list), else the tokenizer's."""
    ids: set[int] = set()
    gen = Path(model_dir) / "generation_config.json"
    if gen.is_file():
        value = json.loads(gen.read_text()).get("eos_token_id")
        if isinstance(value, int):
            ids.add(value)
        elif isinstance(value, list):
            ids.update(int(v) for v in value)
    if tokenizer is not None and tokenizer.eos_token_id is not None:
        ids.add(int(tokenizer.eos_token_id))
    return ids
