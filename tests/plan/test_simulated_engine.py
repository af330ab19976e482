"""Simulated generation servers (plan/engine.py) on the virtual clock: continuous batching, the KV cache's limit,
interruption by a weight update, routing; every time checked against the cost model by hand."""
from __future__ import annotations

import asyncio

import pytest

from areal_core.engine.protocol import EngineError, GenerateRequest, SamplingParams
from areal_core.plan.clock import run_virtual
from areal_core.plan.engine import GenerationCosts, SimulatedEngine, SimulatedServer


def request(rid: str, prompt: int, tokens: int, ignore_eos: bool = True) -> GenerateRequest:
    return GenerateRequest([1] * prompt, SamplingParams(max_new_tokens=tokens, ignore_eos=ignore_eos), rid=rid)


async def timed(engine, req: GenerateRequest):
    output = await engine.generate(req)
    return output, asyncio.get_running_loop().time()


def test_requests_decode_together_one_token_per_step_at_the_cost_the_model_gives():
    costs = GenerationCosts(step_s=0.01, sequence_s=0.001, context_token_s=1e-5, prefill_token_s=1e-4)

    async def main():
        server = SimulatedServer(costs).start()
        try:
            return await asyncio.gather(timed(server, request("a", 10, 3)), timed(server, request("b", 20, 2)))
        finally:
            await server.close()

    (a, a_done), (b, b_done) = run_virtual(main())
    # step 1: 2 running, context 30, prefill 30; step 2: context 32; step 3: a alone, context 12
    step1 = 0.01 + 0.002 + 30e-5 + 30e-4
    step2 = 0.01 + 0.002 + 32e-5
    step3 = 0.01 + 0.001 + 12e-5
    assert b_done == pytest.approx(step1 + step2) and a_done == pytest.approx(step1 + step2 + step3)
    assert (len(a.output_ids), a.finish_reason, a.prompt_tokens, a.output_versions) == (3, "length", 10, [0, 0, 0])
    assert len(b.output_ids) == 2 and b.num_interruptions == 0


def test_a_request_waits_while_the_kv_cache_is_full_and_one_that_can_never_fit_is_an_error():
    costs = GenerationCosts(step_s=1.0, kv_tokens=30)

    async def main():
        server = SimulatedServer(costs).start()
        try:
            results = await asyncio.gather(timed(server, request("a", 10, 4)), timed(server, request("b", 10, 4)),
                                           timed(server, request("c", 10, 4)))
            with pytest.raises(EngineError, match="a request of 41 tokens does not fit the KV cache of 30"):
                await server.generate(request("huge", 40, 1))
            return results, server.stats
        finally:
            await server.close()

    results, stats = run_virtual(main())
    # a and b fill 20 of 30 tokens and grow to 28; c (11 with its first token) waits until they finish
    assert [done for _, done in results] == [4.0, 4.0, 8.0]
    assert stats.steps == 8 and stats.tokens == 12 and stats.retractions == 0   # c never ran before it fit


def test_a_weight_update_interrupts_generation_and_later_tokens_carry_the_new_version():
    costs = GenerationCosts(step_s=1.0, prefill_token_s=0.1, weight_load_s=2.5)

    async def main():
        engine = SimulatedEngine(1, costs).start()
        loop = asyncio.get_running_loop()
        generation = asyncio.ensure_future(timed(engine, request("a", 10, 5)))
        await asyncio.sleep(2.5)             # mid-way through step 2 (step 1 ends at 2.0: prefill 1.0 + 1.0)
        await engine.pause("retract")        # step 2 ends at 3.0 first
        paused_at = loop.time()
        await engine.update_weights("weights/v1", 1)
        await engine.resume()
        output, done = await generation
        stats = engine.servers[0].stats
        await engine.close()
        return paused_at, output, done, stats

    paused_at, output, done, stats = run_virtual(main())
    assert paused_at == 3.0
    assert output.output_versions == [0, 0, 1, 1, 1] and output.num_interruptions == 1
    # resumed at 5.5: the dropped cache is recomputed (10 + 2 tokens), then 3 steps
    assert done == pytest.approx(5.5 + 1.2 + 3.0) and stats.prefill_tokens == 10 + 12


def test_abort_ends_every_request_with_what_it_has_and_in_place_keeps_the_cache():
    costs = GenerationCosts(step_s=1.0, prefill_token_s=0.1)

    async def main():
        server = SimulatedServer(costs).start()
        first = asyncio.ensure_future(server.generate(request("a", 10, 5)))
        await asyncio.sleep(2.5)
        await server.pause("abort")
        aborted = await first
        kept = asyncio.ensure_future(server.generate(request("b", 10, 3)))
        await server.resume()
        await asyncio.sleep(1.5)
        await server.pause("in_place")
        await server.resume()
        await kept
        await server.close()
        return aborted, server.stats

    aborted, stats = run_virtual(main())
    assert aborted.finish_reason == "abort" and len(aborted.output_ids) == 2
    assert stats.prefill_tokens == 20   # b's prompt once: its cache outlived the in-place pause


def test_requests_go_to_the_server_with_fewest_in_flight_and_the_lengths_model_ends_a_response():
    costs = GenerationCosts(step_s=1.0)

    async def main():
        engine = SimulatedEngine(2, costs, lengths=lambda rid, prompt, limit: int(rid)).start()
        outputs = await asyncio.gather(*(engine.generate(request(str(n), 4, 8, ignore_eos=False))
                                         for n in (3, 9, 5, 2)))
        stats = engine.server_stats()
        await engine.close()
        return outputs, stats

    outputs, stats = run_virtual(main())
    assert [(len(o.output_ids), o.finish_reason) for o in outputs] == [(3, "stop"), (8, "length"), (5, "stop"),
                                                                       (2, "stop")]
    assert [s["tokens"] for s in stats] == [3 + 5, 8 + 2]


def test_bad_costs_are_refused_naming_the_cost():
    with pytest.raises(ValueError, match="generation cost prefill_token_s must be >= 0, got -1"):
        GenerationCosts(step_s=1.0, prefill_token_s=-1)
    with pytest.raises(ValueError, match="a decode step must cost something"):
        GenerationCosts(step_s=0.0)


def test_a_request_arriving_mid_generation_joins_at_the_next_step_and_long_generations_cost_no_step_by_step_work():
    costs = GenerationCosts(step_s=1.0, sequence_s=0.5, kv_tokens=64 * 30_100)   # just room for all 64

    async def main():
        server = SimulatedServer(costs).start()
        loop = asyncio.get_running_loop()
        first = asyncio.ensure_future(timed(server, request("a", 4, 10)))
        await asyncio.sleep(3.2)             # a's steps take 1.5 s: the 3rd ends at 4.5, then b joins
        second = asyncio.ensure_future(timed(server, request("b", 4, 2)))
        (a, a_done), (b, b_done) = await asyncio.gather(first, second)
        started = loop.time()
        long = await asyncio.gather(*(server.generate(request(f"long{i}", 100, 30_000)) for i in range(64)))
        seconds = loop.time() - started
        await server.close()
        return a_done, b_done, long, seconds, server.stats

    import time as wall
    began = wall.perf_counter()
    a_done, b_done, long, seconds, stats = run_virtual(main())
    assert wall.perf_counter() - began < 60
    # a: 3 steps alone (4.5 s), 2 with b (2 s each: b done at 8.5), then 5 alone (1.5 s each)
    assert b_done == pytest.approx(8.5) and a_done == pytest.approx(8.5 + 5 * 1.5)
    assert seconds == pytest.approx(30_000 * (1.0 + 0.5 * 64))
    assert all(len(o.output_ids) == 30_000 and o.output_versions == [0] * 30_000 for o in long)
    assert stats.steps == 10 + 30_000


def test_weights_loaded_without_a_pause_wait_for_the_step_in_progress_and_tag_only_later_tokens():
    costs = GenerationCosts(step_s=1.0, weight_load_s=0.0)

    async def main():
        server = SimulatedServer(costs).start()
        generation = asyncio.ensure_future(server.generate(request("a", 4, 5)))
        await asyncio.sleep(2.5)
        await server.update_weights(1)
        loaded_at = asyncio.get_running_loop().time()
        output = await generation
        await server.close()
        return loaded_at, output

    loaded_at, output = run_virtual(main())
    assert loaded_at == 3.0 and output.output_versions == [0, 0, 0, 1, 1]


def test_the_profile_prices_a_batch_on_the_cost_models_engine_without_its_request_cost():
    """areal plan profile's request cost is the measured batch through the controller less this: the batch's prompts
    and response lengths on one simulated server."""
    from areal_core.plan.measure import modelled_engine_seconds, synthetic_batch

    batch = synthetic_batch(0, seed=0, response=5, group=2)   # 2 requests, prompts of 16, responses of 5
    assert modelled_engine_seconds(GenerationCosts(step_s=1.0, request_s=7.0), batch) == pytest.approx(5.0)
    # the prefill of both prompts joins the first step
    assert modelled_engine_seconds(GenerationCosts(step_s=1.0, prefill_token_s=0.5), batch) == pytest.approx(5 + 16)
