"""The local engine against the model's own forward pass: logits, log-probs, batching, interruption."""
import asyncio
import dataclasses
import math

import pytest
import torch

from areal_core.engine.decoder import SlottedDecoder
from areal_core.engine.local import LocalEngine
from areal_core.engine.model import init_model, load_model
from areal_core.engine.protocol import EngineError, GenerateRequest, SamplingParams

from engine_checks import LOGPROB_TOLERANCE, assert_continued_with_new_weights, reference_logprobs


def test_slotted_decoder_matches_model_forward_for_prefill_and_decode(tiny_model):
    model = load_model(tiny_model)
    decoder = SlottedDecoder(model, slots=4, max_len=64)
    prompts = [[6, 7, 8, 77, 9, 10, 11, 85], [15, 16, 17], [20, 21, 22, 23, 24, 25]]
    width = max(map(len, prompts))
    tokens = torch.tensor([p + [0] * (width - len(p)) for p in prompts])
    slots, lengths = torch.tensor([2, 0, 3]), torch.tensor([len(p) for p in prompts])
    logits = decoder.forward(tokens, slots, torch.zeros(3, dtype=torch.long), lengths)
    step = decoder.forward(torch.tensor([[5], [6], [7]]), slots, lengths, torch.ones(3, dtype=torch.long))
    with torch.no_grad():
        for row, (prompt, nxt) in enumerate(zip(prompts, [5, 6, 7])):
            assert torch.allclose(logits[row], model(torch.tensor([prompt])).logits[0, -1], atol=1e-4)
            assert torch.allclose(step[row], model(torch.tensor([prompt + [nxt]])).logits[0, -1], atol=1e-4)


def test_the_kv_cache_is_sized_by_what_runs_and_grows_mid_generation_keeping_what_it_holds(tmp_path):
    """A real model's context (Qwen2.5: 32768 positions) x 256 slots took tens of GiB before the first request
    (the 0.5B preset's server could not start on 24 GiB). The cache starts small and doubles as requests need:
    here 12 requests (more slots than it starts with) run past 256 positions (longer than it starts), and every
    log-prob still equals the model's own forward."""
    model_dir = init_model(tmp_path / "model", seed=0, max_position_embeddings=32768)

    async def run():
        async with LocalEngine(model_dir, max_running_requests=256) as engine:
            assert engine.max_seq_len == 32768
            first = tuple(engine.decoder.k_cache.shape)
            params = SamplingParams(max_new_tokens=300, temperature=1.0, ignore_eos=True, seed=4)
            prompts = [[6 + i, 85, 9] for i in range(12)]
            outputs = await asyncio.gather(*(engine.generate(GenerateRequest(p, params)) for p in prompts))
            return first, tuple(engine.decoder.k_cache.shape), prompts, outputs

    first, grown, prompts, outputs = asyncio.run(run())
    layers, _, kv_heads, _, head_dim = first
    assert first[1] < 12 and first[3] < 303                       # smaller than what ran ...
    assert grown == (layers, 16, kv_heads, 512, head_dim)        # ... grown to it, in powers of two
    model = load_model(model_dir)
    for prompt, out in zip(prompts, outputs):
        expected = reference_logprobs(model, prompt, out.output_ids, 1.0)
        assert torch.allclose(torch.tensor(out.output_logprobs), expected, atol=LOGPROB_TOLERANCE)


@pytest.mark.parametrize("temperature, top_p, top_k", [(0.0, 1.0, -1), (1.0, 1.0, -1), (0.7, 0.9, 20)])
def test_returned_logprobs_equal_the_trainers_recomputation(tiny_model, temperature, top_p, top_k):
    async def run():
        async with LocalEngine(tiny_model, max_running_requests=4) as engine:
            params = SamplingParams(max_new_tokens=24, temperature=temperature, top_p=top_p, top_k=top_k,
                                    ignore_eos=True, seed=3)
            prompts = [[6, 7, 8, 77, 9, 10, 11, 85], [30, 31], [12] * 5]
            return engine, prompts, await asyncio.gather(*(engine.generate(GenerateRequest(p, params)) for p in prompts))

    engine, prompts, outputs = asyncio.run(run())
    for prompt, out in zip(prompts, outputs):
        assert len(out.output_ids) == 24 and out.finish_reason == "length"
        ref = reference_logprobs(engine.model, prompt, out.output_ids, temperature, top_p, top_k)
        assert torch.allclose(ref, torch.tensor(out.output_logprobs), atol=LOGPROB_TOLERANCE)
        assert out.output_versions == [0] * 24
        if top_p < 1:  # the truncated distribution's log-probs, not the untruncated ones (which are lower)
            untruncated = reference_logprobs(engine.model, prompt, out.output_ids, temperature)
            assert (torch.tensor(out.output_logprobs) - untruncated).min() > 1e-3


def test_many_concurrent_requests_complete_and_short_ones_do_not_wait_for_long_ones(tiny_model):
    finished = []

    async def run():
        async with LocalEngine(tiny_model, max_running_requests=8, torch_threads=1) as engine:
            async def one(i, n):
                out = await engine.generate(GenerateRequest([6 + i % 10, 85], SamplingParams(max_new_tokens=n, ignore_eos=True, seed=i)))
                finished.append((i, n))
                return out
            lengths = [120] + [4 + i % 7 for i in range(39)]
            outputs = await asyncio.gather(*(one(i, n) for i, n in enumerate(lengths)))
            return lengths, outputs, dict(engine.stats)

    lengths, outputs, stats = asyncio.run(run())
    assert [len(o.output_ids) for o in outputs] == lengths
    assert finished[-1] == (0, 120)  # submitted first, finished last: the batch never waited for it
    # Continuous batching: far fewer forward steps than running every request on its own.
    assert stats["steps"] < sum(lengths) / 3


def test_samples_of_one_prompt_share_its_prefill_and_match_requests_run_alone(tiny_model):
    """n samples of a prompt arrive together: the prompt is computed once, the others copy its keys and
    values. Each sample must be exactly what it is when it runs on its own."""
    prompts = [[6, 7, 8, 77, 9, 10, 11, 85], [30, 31, 32]]
    params = [SamplingParams(max_new_tokens=12, temperature=1.0, seed=seed, ignore_eos=True) for seed in range(6)]

    async def together():
        async with LocalEngine(tiny_model, max_running_requests=16, torch_threads=1) as engine:
            await engine.pause()  # every request is queued before the first step
            tasks = [asyncio.create_task(engine.generate(GenerateRequest(p, sp))) for p in prompts for sp in params]
            await asyncio.sleep(0.2)
            await engine.resume()
            return engine, await asyncio.gather(*tasks), dict(engine.stats)

    async def alone():
        async with LocalEngine(tiny_model, max_running_requests=1, torch_threads=1) as engine:
            return [await engine.generate(GenerateRequest(p, sp)) for p in prompts for sp in params]

    engine, shared, stats = asyncio.run(together())
    single = asyncio.run(alone())
    assert stats["prefill_tokens_reused"] == 5 * len(prompts[0]) + 5 * len(prompts[1])  # each prompt computed once
    assert len({tuple(o.output_ids) for o in shared}) > 2  # the seeds still draw different samples
    for prompt_index, prompt in enumerate(prompts):
        for k in range(len(params)):
            a, b = shared[prompt_index * len(params) + k], single[prompt_index * len(params) + k]
            assert a.output_ids == b.output_ids
            assert torch.allclose(torch.tensor(a.output_logprobs), torch.tensor(b.output_logprobs), atol=LOGPROB_TOLERANCE)
            ref = reference_logprobs(engine.model, prompt, a.output_ids, 1.0)
            assert torch.allclose(ref, torch.tensor(a.output_logprobs), atol=LOGPROB_TOLERANCE)


def test_a_next_turn_prefills_only_its_new_tokens_and_samples_what_a_cold_engine_samples(tiny_model, tiny_model_v1):
    """Turn 2 of an episode is turn 1's prompt and output plus new text: its keys/values up to there are taken
    from turn 1's slot (idle since turn 1 ended), not computed again; the tokens and log-probs equal those of an
    engine whose cache was flushed between the turns. After a weight update nothing kept is reused (it was
    computed with the old weights)."""
    prompt, tool = [6, 7, 8, 77, 9, 10, 11, 85], [30, 31, 32]
    first, second = (SamplingParams(max_new_tokens=n, temperature=1.0, seed=n, ignore_eos=True) for n in (7, 9))

    async def episode(flush, extra):
        async with LocalEngine(tiny_model, max_running_requests=2, prefix_cache_slots=extra, torch_threads=1) as engine:
            turn1 = await engine.generate(GenerateRequest(prompt, first))
            if flush:
                await engine.flush_cache()
            await engine.generate(GenerateRequest([40, 41], first))  # unrelated: takes the free slot, turn 1's kept
            before = engine.stats["prefill_tokens_reused"]
            turn2 = await engine.generate(GenerateRequest(prompt + turn1.output_ids + tool, second))
            reused = engine.stats["prefill_tokens_reused"] - before
            await engine.update_weights(tiny_model_v1, version=1)
            await engine.generate(GenerateRequest(prompt + turn1.output_ids + tool + turn2.output_ids, second))
            return turn1, turn2, reused, engine.stats["prefill_tokens_reused"] - before - reused

    cold1, cold2, cold_reused, _ = asyncio.run(episode(flush=True, extra=0))
    assert cold_reused == 0
    for extra in (0, 3):
        turn1, turn2, reused, after_update = asyncio.run(episode(flush=False, extra=extra))
        assert reused == len(prompt) + len(turn1.output_ids) - 1 and after_update == 0  # its last token never fed
        assert (turn1.output_ids, turn2.output_ids) == (cold1.output_ids, cold2.output_ids)
        assert torch.allclose(torch.tensor(turn2.output_logprobs), torch.tensor(cold2.output_logprobs),
                              atol=LOGPROB_TOLERANCE)


def test_kept_caches_give_way_to_new_requests_least_recently_finished_first(tiny_model):
    """Every slot idle but holding a finished request's cache: new requests take the oldest first, and one
    that extends a cache still kept reuses it."""
    params = SamplingParams(max_new_tokens=3, temperature=0.0, ignore_eos=True)

    async def run():
        async with LocalEngine(tiny_model, max_running_requests=2, torch_threads=1) as engine:
            a = await engine.generate(GenerateRequest([6, 7, 8], params))
            b = await engine.generate(GenerateRequest([9, 10, 11], params))  # both slots now hold a cache
            await engine.generate(GenerateRequest([12, 13], params))          # takes a's slot (the oldest)
            before = engine.stats["prefill_tokens_reused"]
            await engine.generate(GenerateRequest([9, 10, 11] + b.output_ids + [5], params))
            reused_b = engine.stats["prefill_tokens_reused"] - before
            await engine.generate(GenerateRequest([6, 7, 8] + a.output_ids + [5], params))
            return reused_b, engine.stats["prefill_tokens_reused"] - before - reused_b

    reused_b, reused_a = asyncio.run(run())
    assert reused_b == 3 + 3 - 1 and reused_a == 0


def test_seeded_sampling_is_reproducible_and_greedy_is_deterministic(tiny_model):
    async def run():
        async with LocalEngine(tiny_model) as engine:
            seeded = SamplingParams(max_new_tokens=16, temperature=1.0, seed=11, ignore_eos=True)
            greedy = SamplingParams(max_new_tokens=16, temperature=0.0, ignore_eos=True)
            a, b = [await engine.generate(GenerateRequest([6, 7], seeded)) for _ in range(2)]
            c, d = [await engine.generate(GenerateRequest([6, 7], greedy)) for _ in range(2)]
            other = await engine.generate(GenerateRequest([6, 7], SamplingParams(max_new_tokens=16, seed=12, ignore_eos=True)))
            return a, b, c, d, other

    a, b, c, d, other = asyncio.run(run())
    assert a.output_ids == b.output_ids and c.output_ids == d.output_ids
    assert a.output_ids != other.output_ids


def test_stop_token_ends_generation_and_is_included(tiny_model):
    async def run():
        async with LocalEngine(tiny_model) as engine:
            free = await engine.generate(GenerateRequest([6, 7], SamplingParams(max_new_tokens=40, temperature=0, ignore_eos=True)))
            stop_at = free.output_ids[5]
            first = free.output_ids.index(stop_at)
            out = await engine.generate(GenerateRequest([6, 7], SamplingParams(max_new_tokens=40, temperature=0, ignore_eos=True,
                                                                               stop_token_ids=(stop_at,))))
            return free, out, first

    free, out, first = asyncio.run(run())
    assert out.finish_reason == "stop"
    assert out.output_ids == free.output_ids[: first + 1]


def test_stop_strings_end_generation_at_the_token_that_completes_them_whatever_their_last_character(tiny_model):
    """The engine decodes a request's tail only after a token that may complete a stop string (one holding its last
    character; a stop string ending in a space or a non-ASCII character is always checked): every stop string
    still ends generation at the token that completes it."""
    async def run():
        async with LocalEngine(tiny_model) as engine:
            params = SamplingParams(max_new_tokens=200, temperature=1.0, ignore_eos=True, seed=3)
            frees = await asyncio.gather(*(engine.generate(GenerateRequest([6 + i, 7], params)) for i in range(8)))
            texts = [engine.tokenizer.decode(f.output_ids, skip_special_tokens=True) for f in frees]
            cases = []
            for i, text in enumerate(texts):   # a stop string ending in a space, and one ending elsewhere
                for end in (text.find(" ", 3), 6):
                    if end >= 3:
                        cases.append((i, text[end - 2:end + 1]))
            stopped = await asyncio.gather(*(engine.generate(GenerateRequest([6 + i, 7], dataclasses.replace(
                params, stop=(stop,)))) for i, stop in cases))
            return frees, texts, cases, stopped, engine.tokenizer

    frees, texts, cases, stopped, tokenizer = asyncio.run(run())
    assert any(stop.endswith(" ") for _, stop in cases) and any(not stop.endswith(" ") for _, stop in cases)
    for (i, stop), out in zip(cases, stopped):
        ids = frees[i].output_ids
        first = next(n for n in range(1, len(ids) + 1)
                     if stop in tokenizer.decode(ids[max(0, n - 32):n], skip_special_tokens=True))
        assert out.finish_reason == "stop" and out.output_ids == ids[:first], stop


def test_a_token_that_completes_a_stop_string_is_never_skipped_by_the_check_with_a_byte_level_bpe_tokenizer(data_dir):
    """The check the engine makes before decoding a request's tail, against stop strings the presets' byte-level BPE
    tokenizer (Qwen2's construction, trained on the eval data) completes in real text: the token that completes one
    always passes it. The stop strings end in letters, digits, punctuation, spaces, newlines and multi-byte
    characters (text in other scripts, which the tokenizer splits into byte pieces)."""
    import json
    import random

    from areal_core.engine.local import token_may_end_a_stop_string
    from areal_core.engine.presets import preset_tokenizer

    tokenizer = preset_tokenizer("qwen2.5-0.5b", data_dir)
    assert not tokenizer.clean_up_tokenization_spaces   # (a tokenizer that cleans up is always checked)
    rows = [json.loads(line) for line in (data_dir / "gsm8k" / "test.jsonl").read_text().splitlines()[:150]]
    texts = [row["question"] + "\n" + row["answer"] for row in rows] + [
        "Le café était très apprécié, déjà à l'été. ", "数学题：一共有多少个苹果？答案是四十二。",
        "Ответ: сорок два. ", "x² + y² = z² → θ ≈ 0.5π ", "naïve façade — “quotes” … done\n"]
    rng = random.Random(0)
    endings = set()
    for text in texts:
        ids = tokenizer(text, add_special_tokens=False)["input_ids"]
        for _ in range(8):
            end = rng.randrange(1, len(text) + 1)
            stop = text[max(0, end - rng.randrange(1, 6)):end]
            first = next(n for n in range(1, len(ids) + 1) if stop in tokenizer.decode(ids[:n]))
            own = tokenizer.decode([ids[first - 1]], skip_special_tokens=False)
            assert token_may_end_a_stop_string(own, (stop,)), (stop, own)
            endings.add("space" if stop[-1].isspace() else "ascii" if stop[-1].isascii() else "other")
    assert endings == {"space", "ascii", "other"}


def test_an_empty_stop_string_is_refused_before_it_reaches_the_engine(tiny_model):
    async def run():
        async with LocalEngine(tiny_model) as engine:
            with pytest.raises(EngineError, match="stop strings must be non-empty strings, got ''"):
                await engine.generate(GenerateRequest([6, 7], SamplingParams(stop=("</tool>", ""))))
            return await engine.generate(GenerateRequest([6, 7], SamplingParams(max_new_tokens=3, ignore_eos=True)))

    assert len(asyncio.run(run()).output_ids) == 3   # and the engine serves on


def test_a_prefill_joining_decoding_requests_gets_a_forward_of_its_own_and_changes_no_log_prob(tiny_model):
    """A forward pads its rows to its widest: a long prompt joining requests that decode one token a step would
    make each of them as wide as that prompt. The prompt is prefilled in a forward of its own, and every log-prob
    is still the model's."""
    shapes = []

    async def run():
        async with LocalEngine(tiny_model, max_running_requests=8) as engine:
            forward = engine.decoder.forward

            def recording(tokens, *args):
                shapes.append(tuple(tokens.shape))
                return forward(tokens, *args)

            engine.decoder.forward = recording
            params = SamplingParams(max_new_tokens=60, temperature=1.0, ignore_eos=True, seed=1)
            short = [[6 + i, 85, 9] for i in range(6)]
            running = [asyncio.create_task(engine.generate(GenerateRequest(p, params))) for p in short]
            while len(shapes) < 10:
                await asyncio.sleep(0.001)
            long = [6 + i % 50 for i in range(40)]
            joined = await engine.generate(GenerateRequest(long, params))
            return short + [long], await asyncio.gather(*running) + [joined]

    prompts, outputs = asyncio.run(run())
    assert (1, 40) in shapes                                      # the long prompt alone
    assert all(rows == 1 or width <= 3 for rows, width in shapes)  # never decoding rows 40 wide
    model = load_model(tiny_model)
    for prompt, out in zip(prompts, outputs):
        expected = reference_logprobs(model, prompt, out.output_ids, 1.0)
        assert torch.allclose(torch.tensor(out.output_logprobs), expected, atol=LOGPROB_TOLERANCE)


@pytest.mark.parametrize("request_, message", [
    (GenerateRequest([], SamplingParams()), "input_ids is empty"),
    (GenerateRequest([1, 100000], SamplingParams()), "out of the vocabulary"),
    (GenerateRequest([1, -3], SamplingParams()), "out of the vocabulary"),
    (GenerateRequest([1], SamplingParams(max_new_tokens=0)), "max_new_tokens must be > 0"),
    (GenerateRequest([1], SamplingParams(top_p=0)), "top_p must be in (0, 1]"),
])
def test_invalid_requests_are_rejected_with_a_clear_message(tiny_model, request_, message):
    engine = LocalEngine(tiny_model)
    with pytest.raises(EngineError) as info:
        engine.validate(request_)
    assert message in str(info.value)


def test_interrupted_generation_continues_with_new_weights_and_versions(tiny_model, tiny_model_v1):
    """pause -> update weights -> continue: every request completes; tokens after the update carry
    version 1 and their log-probs are those of the new weights, tokens before it those of the old."""
    async def run():
        async with LocalEngine(tiny_model, max_running_requests=8, torch_threads=1) as engine:
            params = SamplingParams(max_new_tokens=100, temperature=1.0, ignore_eos=True, seed=5)
            prompts = [[6 + i, 85] for i in range(6)]
            tasks = [asyncio.create_task(engine.generate(GenerateRequest(p, params))) for p in prompts]
            while len(engine._running) < 6 or min(len(r.output_ids) for r in engine._running) < 5:
                await asyncio.sleep(0.005)
            await engine.pause("retract")
            await engine.update_weights(tiny_model_v1, version=1)
            await engine.resume()
            return prompts, await asyncio.gather(*tasks), engine

    prompts, outputs, engine = asyncio.run(run())
    assert_continued_with_new_weights(prompts, outputs, tiny_model, tiny_model_v1, 0, 1, 100, min_cut=5)


def test_pause_abort_ends_requests_with_partial_output(tiny_model):
    async def run():
        async with LocalEngine(tiny_model, torch_threads=1) as engine:
            task = asyncio.create_task(engine.generate(GenerateRequest([6], SamplingParams(max_new_tokens=200, ignore_eos=True))))
            while not engine._running or len(engine._running[0].output_ids) < 3:
                await asyncio.sleep(0.005)
            await engine.pause("abort")
            out = await task
            await engine.resume()
            after = await engine.generate(GenerateRequest([6], SamplingParams(max_new_tokens=3, ignore_eos=True)))
            return out, after

    out, after = asyncio.run(run())
    assert out.finish_reason == "abort" and 3 <= len(out.output_ids) < 200
    assert len(after.output_ids) == 3


def test_update_weights_rejects_a_checkpoint_of_another_shape(tiny_model, tmp_path):
    from areal_core.engine.model import ModelError, init_model

    other = init_model(tmp_path / "wide", hidden_size=64, intermediate_size=192)

    async def run():
        async with LocalEngine(tiny_model) as engine:
            with pytest.raises(ModelError, match="has shape"):
                await engine.update_weights(other, 1)
            assert engine.version == 0
            out = await engine.generate(GenerateRequest([6], SamplingParams(max_new_tokens=2, ignore_eos=True)))
            return out

    assert len(asyncio.run(run()).output_ids) == 2


def test_interruption_without_new_weights_changes_nothing(tiny_model):
    """Sampling noise depends only on (seed, position): a retracted and resumed request draws exactly
    the tokens it would have drawn without the interruption."""
    params = SamplingParams(max_new_tokens=60, temperature=1.0, top_p=0.9, ignore_eos=True, seed=21)

    async def run():
        async with LocalEngine(tiny_model, torch_threads=1) as engine:
            plain = await engine.generate(GenerateRequest([6, 7, 85], params))
            task = asyncio.create_task(engine.generate(GenerateRequest([6, 7, 85], params)))
            while not engine._running or len(engine._running[0].output_ids) < 10:
                await asyncio.sleep(0.002)
            await engine.pause("retract")
            await engine.resume()
            return plain, await task

    plain, interrupted = asyncio.run(run())
    assert interrupted.num_interruptions == 1
    assert interrupted.output_ids == plain.output_ids
    assert torch.allclose(torch.tensor(interrupted.output_logprobs), torch.tensor(plain.output_logprobs), atol=1e-5)


def test_sampling_follows_the_truncated_distribution():
    from areal_core.engine.local import sample

    torch.manual_seed(0)
    logits = torch.randn(1, 6).expand(20000, 6).contiguous()
    probs = torch.softmax(logits[0], -1)
    n = logits.shape[0]
    tokens, _ = sample(logits, [SamplingParams(temperature=1.0)] * n, list(range(n)), [0] * n)
    empirical = torch.bincount(torch.tensor(tokens), minlength=6).float() / n
    assert (empirical - probs).abs().max() < 0.02           # ~5 standard errors at n = 20000
    top2, _ = sample(logits, [SamplingParams(top_k=2)] * n, list(range(n)), [0] * n)
    assert set(top2) == set(probs.topk(2).indices.tolist())


def test_the_recorded_logprob_is_that_of_the_renormalised_truncated_distribution():
    """Top-k 2 over logits whose two best tokens hold 0.5 + 0.25 of the mass: a drawn token's log-prob is that of
    0.5 / 0.75 or 0.25 / 0.75, what it was drawn with, not log 0.5 or log 0.25."""
    from areal_core.engine.local import sample

    probs = torch.tensor([[0.5, 0.25, 0.125, 0.125]])
    logits = probs.log().expand(64, 4).contiguous()
    tokens, logprobs = sample(logits, [SamplingParams(top_k=2)] * 64, list(range(64)), [0] * 64)
    assert set(tokens) == {0, 1}
    expected = {0: math.log(0.5 / 0.75), 1: math.log(0.25 / 0.75)}
    assert all(lp == pytest.approx(expected[t], abs=1e-6) for t, lp in zip(tokens, logprobs))
    # top-p 0.6 keeps the first two (the mass before the second, 0.5, is <= 0.6), as SGLang does
    tokens, logprobs = sample(logits, [SamplingParams(top_p=0.6)] * 64, list(range(64)), [0] * 64)
    assert set(tokens) == {0, 1}
    assert all(lp == pytest.approx(expected[t], abs=1e-6) for t, lp in zip(tokens, logprobs))


def on_grid(weight: torch.Tensor, full: torch.Tensor, grid: list[float]) -> bool:
    """Whether `weight` is `full` rounded to +-`grid` with one scale per block of 32 inputs (the block's largest
    magnitude on the grid's largest value), within bfloat16 storage."""
    blocks = torch.nn.functional.pad(full, (0, (-full.shape[1]) % 32)).reshape(full.shape[0], -1, 32)
    scale = blocks.abs().amax(-1, keepdim=True) / max(grid)
    got = torch.nn.functional.pad(weight, (0, (-full.shape[1]) % 32)).reshape(blocks.shape) / scale
    return bool(((got.abs()[..., None] - torch.tensor(grid)).abs().min(-1).values < 0.05).all())


@pytest.mark.parametrize("dtype", ["float8", "float4", "int4", "int3"])
def test_low_precision_engines_hold_rounded_weights_also_after_an_update(tiny_model, tiny_model_v1, dtype):
    """A float8 engine's matrices are float8 e4m3 numbers times one scale per tensor; a float4 engine's decoder
    linear weights are e2m1 numbers times one scale per block of 32, its embeddings untouched; an int4 / int3
    engine's matrices, embeddings included, are integers -7..7 / -3..3 times one scale per block of 32. Weights loaded by an update
    are rounded the same way (the engine samples with what a low-precision server would hold)."""
    def check(engine, source):
        reference = load_model(source).state_dict()
        for name, weight in engine.model.state_dict().items():
            full = reference[name].float()
            weight = weight.float()
            if dtype == "float8" and weight.dim() == 2:
                scale = full.abs().max() / 448.0
                assert torch.allclose((weight / scale).to(torch.float8_e4m3fn).float() * scale, weight, rtol=1e-2), name
                assert not torch.equal(weight, full), name
            elif dtype == "float4" and ".layers." in name and name.endswith("proj.weight"):
                assert on_grid(weight, full, [0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0]), name
            elif dtype == "float4" and "embed" in name:
                assert torch.allclose(weight, full, rtol=1e-2, atol=1e-3), name  # bfloat16 only
            elif dtype in ("int4", "int3") and weight.dim() == 2:
                assert on_grid(weight, full, [float(i) for i in range(8 if dtype == "int4" else 4)]), name
                assert not torch.equal(weight, full), name

    async def run():
        async with LocalEngine(tiny_model, dtype=dtype) as engine:
            check(engine, tiny_model)
            await engine.update_weights(tiny_model_v1, 1)
            check(engine, tiny_model_v1)

    asyncio.run(run())
