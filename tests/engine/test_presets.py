"""`areal init-model --preset`: a real-size model built offline — the hub model's architecture and parameter count,
a byte-level BPE tokenizer trained on the eval data that loads through the hub model's tokenizer class, Qwen's
special tokens and chat template — that the engine loads and generates with like any checkpoint."""
from __future__ import annotations

import asyncio
import json
import math
import unicodedata
from pathlib import Path

import pytest
from safetensors import safe_open

from areal_core.engine.local import LocalEngine
from areal_core.engine.model import eos_token_ids, load_model, load_tokenizer
from areal_core.engine.presets import QWEN_SPECIAL_TOKENS, corpus_texts, init_preset_model
from areal_core.engine.protocol import GenerateRequest, SamplingParams
from areal_core.workflows.episode import chat_suffix
from engine_checks import LOGPROB_TOLERANCE, reference_logprobs


@pytest.fixture(scope="module")
def qwen_05b(tmp_path_factory, data_dir) -> Path:
    return init_preset_model(tmp_path_factory.mktemp("preset") / "qwen2.5-0.5b", "qwen2.5-0.5b", data_dir=data_dir)


def test_the_preset_has_the_hub_models_architecture_and_parameter_count(qwen_05b):
    config = json.loads((qwen_05b / "config.json").read_text())
    assert config["architectures"] == ["Qwen2ForCausalLM"]
    assert {k: config[k] for k in ("hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads",
                                   "num_key_value_heads", "vocab_size", "tie_word_embeddings")} == {
        "hidden_size": 896, "intermediate_size": 4864, "num_hidden_layers": 24, "num_attention_heads": 14,
        "num_key_value_heads": 2, "vocab_size": 151936, "tie_word_embeddings": True}
    with safe_open(str(qwen_05b / "model.safetensors"), "pt") as weights:
        shapes = {name: weights.get_slice(name).get_shape() for name in weights.keys()}
        dtypes = {weights.get_slice(name).get_dtype() for name in weights.keys()}
    total = sum(math.prod(shape) for shape in shapes.values())
    assert total == 494_032_768  # Qwen2.5-0.5B's count, tied head included once
    assert dtypes == {"BF16"} and shapes["model.embed_tokens.weight"] == [151936, 896]
    assert {p.name for p in qwen_05b.iterdir()} >= {"config.json", "generation_config.json", "model.safetensors",
                                                     "tokenizer.json", "tokenizer_config.json"}


def test_the_bpe_tokenizer_loads_as_qwens_and_round_trips_every_eval_text(qwen_05b, data_dir):
    tokenizer = load_tokenizer(qwen_05b)
    assert type(tokenizer).__name__ == "Qwen2Tokenizer"  # the class the hub model names: AutoTokenizer's path
    texts = list(corpus_texts(data_dir))
    assert len(tokenizer) >= 16384 and len(texts) > 10_000
    for text in texts:
        ids = tokenizer(text, add_special_tokens=False)["input_ids"]
        assert tokenizer.decode(ids) == unicodedata.normalize("NFC", text)
    # a real subword vocabulary: GSM8K questions take well under a token per 3 characters; numbers digit by digit
    questions = [json.loads(line)["question"] for line in (data_dir / "gsm8k" / "test.jsonl").read_text().splitlines()]
    tokens = sum(len(tokenizer(q, add_special_tokens=False)["input_ids"]) for q in questions)
    assert sum(map(len, questions)) / tokens > 3.0
    assert [tokenizer.decode([i]) for i in tokenizer("12345", add_special_tokens=False)["input_ids"]] == list("12345")
    # Qwen's added tokens after the BPE vocabulary, in Qwen's order, each one id
    ids = [tokenizer.convert_tokens_to_ids(token) for token in QWEN_SPECIAL_TOKENS]
    assert ids == list(range(len(tokenizer) - len(QWEN_SPECIAL_TOKENS), len(tokenizer)))
    assert tokenizer("<|im_start|>user\nhi<|im_end|>", add_special_tokens=False)["input_ids"][0] == ids[1]
    assert eos_token_ids(qwen_05b, tokenizer) == {ids[0], ids[2]}


def test_the_chat_template_renders_qwens_turns(qwen_05b):
    tokenizer = load_tokenizer(qwen_05b)
    text = tokenizer.apply_chat_template([{"role": "user", "content": "What is 2+2?"}], tokenize=False,
                                         add_generation_prompt=True)
    assert text == ("<|im_start|>system\nYou are Qwen, created by Alibaba Cloud. You are a helpful assistant."
                    "<|im_end|>\n<|im_start|>user\nWhat is 2+2?<|im_end|>\n<|im_start|>assistant\n")
    # a tool result comes back as a user turn wrapped in <tool_response>, as Qwen2.5 renders it; episodes extend
    # turn by turn with it (workflows.episode.chat_suffix)
    assert chat_suffix(tokenizer, "tool", "4") == "<|im_end|>\n<|im_start|>user\n<tool_response>\n4\n</tool_response>" \
                                                  "<|im_end|>\n<|im_start|>assistant\n"


def test_the_engine_generates_from_the_preset_like_any_checkpoint(qwen_05b):
    tokenizer = load_tokenizer(qwen_05b)
    text = tokenizer.apply_chat_template([{"role": "user", "content": "Natalia sold 48 clips."}], tokenize=False,
                                         add_generation_prompt=True)
    prompt = tokenizer(text, add_special_tokens=False)["input_ids"]

    async def run():
        async with LocalEngine(qwen_05b, max_running_requests=2) as engine:
            return await engine.generate(GenerateRequest(prompt, SamplingParams(max_new_tokens=6, temperature=1.0,
                                                                                seed=1, ignore_eos=True)))

    output = asyncio.run(run())
    assert len(output.output_ids) == 6 and all(0 <= i < 151936 for i in output.output_ids)
    # the log-probs the trainer would recompute from the checkpoint (one full forward)
    expected = reference_logprobs(load_model(qwen_05b), prompt, list(output.output_ids), 1.0)
    assert max(abs(a - b) for a, b in zip(output.output_logprobs, expected.tolist())) < LOGPROB_TOLERANCE


def test_a_preset_is_the_same_for_the_same_seed_and_data_and_shorter_on_request(areal, qwen_05b, tmp_path, data_dir):
    def build(name: str, seed: int) -> Path:
        run = areal("--data-dir", str(data_dir), "init-model", str(tmp_path / name), "--preset", "qwen2.5-0.5b",
                    "--layers", "1", "--seed", str(seed))
        assert run.returncode == 0, run.stderr
        assert "qwen2.5-0.5b, 151,047,936 parameters, byte-level BPE tokenizer of" in run.stdout  # 1 of 24 layers
        return tmp_path / name

    first, again, other = build("first", 0), build("again", 0), build("other", 1)
    assert (first / "model.safetensors").read_bytes() == (again / "model.safetensors").read_bytes()
    assert (first / "model.safetensors").read_bytes() != (other / "model.safetensors").read_bytes()
    # the tokenizer depends on the data only
    assert (other / "tokenizer.json").read_bytes() == (qwen_05b / "tokenizer.json").read_bytes()
    with safe_open(str(first / "model.safetensors"), "pt") as short:
        assert "model.layers.0.mlp.up_proj.weight" in set(short.keys())
        assert "model.layers.1.mlp.up_proj.weight" not in set(short.keys())


@pytest.mark.parametrize("args, message", [
    (["--preset", "qwen2.5-0.5b", "--hidden-size", "64"], "--hidden-size does not apply to --preset"),
    (["--preset", "gpt-7"], "'gpt-7' is not one of"),
])
def test_bad_preset_options_are_one_clear_line(areal, tmp_path, args, message):
    run = areal("init-model", str(tmp_path / "m"), *args)
    assert run.returncode == 2 and message in run.stderr and "Traceback" not in run.stderr
    assert not (tmp_path / "m").exists()


def test_a_preset_without_eval_data_says_where_to_give_it(areal, tmp_path):
    run = areal("--data-dir", str(tmp_path / "empty"), "init-model", str(tmp_path / "m"), "--preset", "llama-1b")
    assert run.returncode != 0 and "Traceback" not in run.stderr
    assert "no data files" in run.stderr and "--data-dir DIR" in run.stderr
