"""The SGLang client against real `areal serve` processes over real HTTP: load balancing, interruption by
weight updates (retract and abort), failover when a server dies or hangs, and bad requests.

Log-prob tolerance: LOGPROB_TOLERANCE (float32 on CPU; the server's incremental KV-cache decode and one full
forward pass differ by ~1e-6).
"""
import asyncio
import os
import signal
import socket
import struct
import sys
import time
from pathlib import Path

import httpx
import pytest
import torch

from areal_core.engine.model import load_model
from areal_core.engine.protocol import EngineError, GenerateRequest, SamplingParams
from areal_core.engine.launch import launch_sglang_servers, sglang_servers
from areal_core.engine.sglang_client import SGLangEngine, closed_by_this_client, versions_from_meta

pytest.register_assert_rewrite("conftest_sglang")
pytest_plugins = ["conftest_sglang"]
from conftest_sglang import (  # noqa: E402
    _free_port,
    health_on_one_connection_after_idling,
    pause_mid_generation,
    reference_logprobs,
)
from engine_checks import LOGPROB_TOLERANCE, assert_continued_with_new_weights  # noqa: E402



def served_model(url: str) -> tuple[str, int]:
    info = httpx.get(f"{url}/model_info", timeout=30).json()
    return info["model_path"], int(info["weight_version"])


def running(url: str) -> int:
    return int(httpx.get(f"{url}/model_info", timeout=30).json()["running"])


async def total_running(urls) -> int:
    return sum(await asyncio.gather(*(asyncio.to_thread(running, u) for u in urls)))


def other_model(current: str, tiny_model, tiny_model_v1) -> str:
    return str(tiny_model) if os.path.samefile(current, tiny_model_v1) else str(tiny_model_v1)


def test_many_concurrent_requests_are_spread_over_servers_and_match_the_model(areal_pair):
    urls = [p.url for p in areal_pair]
    model_path, version = served_model(urls[0])
    prompts = [[6 + i % 50, 85, 7 + i % 13] for i in range(48)]
    lengths = [3 + (i * 7) % 60 for i in range(48)]

    async def run():
        async with SGLangEngine(urls) as engine:
            outputs = await asyncio.gather(*(
                engine.generate(GenerateRequest(p, SamplingParams(max_new_tokens=n, temperature=1.0, ignore_eos=True,
                                                                  seed=i)))
                for i, (p, n) in enumerate(zip(prompts, lengths))))
            return outputs, engine.server_stats()

    outputs, stats = asyncio.run(run())
    assert [len(o.output_ids) for o in outputs] == lengths
    assert all(o.finish_reason == "length" and o.output_versions == [version] * len(o.output_ids) for o in outputs)
    assert all(s["segments"] >= 12 and s["failures"] == 0 for s in stats), stats  # both servers took a share
    model = load_model(model_path)
    for prompt, out in zip(prompts, outputs):
        ref = reference_logprobs(model, prompt, out.output_ids, 1.0)
        assert torch.allclose(ref, torch.tensor(out.output_logprobs), atol=LOGPROB_TOLERANCE)


def test_top_p_requests_to_areal_serve_return_the_truncated_distributions_logprobs(areal_pair):
    """The client asks for the sampling support (return_sampling_mask) when top-p truncates; areal serve answers it
    as SGLang does, with the renormalised log-probs the trainer recomputes."""
    url = areal_pair[0].url
    model_path, _ = served_model(url)
    prompts = [[6 + i, 85, 7] for i in range(4)]

    async def run():
        async with SGLangEngine([url]) as engine:
            params = SamplingParams(max_new_tokens=12, temperature=0.8, top_p=0.9, ignore_eos=True, seed=5)
            return await asyncio.gather(*(engine.generate(GenerateRequest(p, params)) for p in prompts))

    model = load_model(model_path)
    for prompt, out in zip(prompts, asyncio.run(run())):
        ref = reference_logprobs(model, prompt, out.output_ids, 0.8, top_p=0.9)
        assert torch.allclose(ref, torch.tensor(out.output_logprobs), atol=LOGPROB_TOLERANCE)


@pytest.mark.parametrize("mode", ["retract", "abort"])
def test_pause_update_continue_completes_every_request_with_new_versions_and_logprobs(
        areal_pair, tiny_model, tiny_model_v1, mode):
    """Through the client, on two servers: pause mid-generation -> update weights -> continue. Every request
    completes with all its tokens; tokens before the update carry the old version and log-probs of the old
    weights, tokens after it the new version and log-probs recomputed with the new weights. With mode abort
    the servers end the requests early and the client resubmits prompt + tokens so far."""
    urls = [p.url for p in areal_pair]
    old_path, old_version = served_model(urls[0])
    new_path, new_version = other_model(old_path, tiny_model, tiny_model_v1), old_version + 1
    prompts = [[6 + i, 85] for i in range(8)]
    n = 200

    async def run():
        async with SGLangEngine(urls) as engine:
            params = SamplingParams(max_new_tokens=n, temperature=1.0, ignore_eos=True, seed=5)
            tasks = await pause_mid_generation(engine, prompts, params, lambda: total_running(urls), mode)
            await engine.update_weights(new_path, new_version)
            info = await engine.model_info()
            await engine.resume()
            return await asyncio.gather(*tasks), info

    outputs, info = asyncio.run(run())
    assert info["weight_version"] == new_version
    assert all(served_model(u) == (new_path, new_version) for u in urls)
    assert_continued_with_new_weights(prompts, outputs, old_path, new_path, old_version, new_version, n)


def test_resubmitted_request_goes_back_to_its_server(areal_pair):
    """Sticky request ids: server A alone is paused with mode abort while idle server B could take more; A's
    requests come back aborted and the client resubmits them to A (where they wait for continue), not to B."""
    a, b = [p.url for p in areal_pair]

    async def run():
        async with SGLangEngine([b, a]) as engine:   # routing: B, A, B, A (fewest in flight, ties to the first)
            lengths = [3, 150, 3, 150]
            tasks = [asyncio.create_task(engine.generate(GenerateRequest([6 + i, 85], SamplingParams(
                max_new_tokens=n, temperature=1.0, ignore_eos=True)))) for i, n in enumerate(lengths)]
            await asyncio.wait([tasks[0], tasks[2]])         # B is idle now
            assert not tasks[1].done() and not tasks[3].done()
            async with httpx.AsyncClient() as raw:
                (await raw.post(f"{a}/pause_generation", json={"mode": "abort"})).raise_for_status()
                deadline = time.monotonic() + 30
                while engine.server_stats()[1]["segments"] < 2 or sum(s["in_flight"] for s in engine.server_stats()) < 2:
                    assert time.monotonic() < deadline, engine.server_stats()   # A's two aborted answers are in
                    await asyncio.sleep(0.01)
                in_flight = [s["in_flight"] for s in engine.server_stats()]
                while in_flight == [0, 2] and (await raw.get(f"{a}/model_info")).json()["waiting"] < 2:
                    assert time.monotonic() < deadline, "the resubmissions did not reach A"
                    await asyncio.sleep(0.01)
                waiting_on_a = (await raw.get(f"{a}/model_info")).json()["waiting"]
                (await raw.post(f"{a}/continue_generation", json={})).raise_for_status()
            return await asyncio.gather(*tasks), in_flight, waiting_on_a, engine.server_stats()

    outputs, in_flight, waiting_on_a, stats = asyncio.run(run())
    assert in_flight == [0, 2] and waiting_on_a == 2
    assert [len(o.output_ids) for o in outputs] == [3, 150, 3, 150]
    assert [o.num_interruptions for o in outputs] == [0, 1, 0, 1]
    assert [s["segments"] for s in stats] == [2, 4]   # B: 2; A: 2 aborted + 2 resumed segments


def test_hung_server_times_out_and_the_request_completes_on_another_server(areal_pair):
    a, b = areal_pair
    os.killpg(a.process.pid, signal.SIGSTOP)    # accepts connections (kernel backlog), never answers
    try:
        async def run():
            async with SGLangEngine([a.url, b.url], request_timeout=3.0, backoff=0.05) as engine:
                params = SamplingParams(max_new_tokens=5, ignore_eos=True)
                outputs = await asyncio.gather(*(engine.generate(GenerateRequest([6 + i], params)) for i in range(2)))
                return outputs, engine.server_stats()

        outputs, stats = asyncio.run(run())
    finally:
        os.killpg(a.process.pid, signal.SIGCONT)
    assert [len(o.output_ids) for o in outputs] == [5, 5]
    assert stats[0]["failures"] == 1 and stats[0]["segments"] == 0
    assert stats[1]["segments"] == 2


def test_cancelled_generate_aborts_the_request_on_the_server(areal_pair):
    """The server is paused in place with the request in its running batch, where it would stay forever;
    cancelling the caller's generate() makes the client send /abort_request, and the request leaves."""
    a = areal_pair[0].url

    async def run():
        async with SGLangEngine([a]) as engine, httpx.AsyncClient() as raw:
            task = asyncio.create_task(engine.generate(GenerateRequest([6, 85], SamplingParams(
                max_new_tokens=250, ignore_eos=True))))
            deadline = time.monotonic() + 60
            while not await total_running([a]):
                assert time.monotonic() < deadline
                await asyncio.sleep(0.01)
            (await raw.post(f"{a}/pause_generation", json={"mode": "in_place"})).raise_for_status()
            try:
                task.cancel()
                with pytest.raises(asyncio.CancelledError):
                    await task
                deadline = time.monotonic() + 30
                while await total_running([a]):
                    assert time.monotonic() < deadline, "the cancelled request is still on the server"
                    await asyncio.sleep(0.01)
            finally:
                (await raw.post(f"{a}/continue_generation", json={})).raise_for_status()

    asyncio.run(run())


BAD_REQUESTS = [  # input_ids, max_new_tokens, the server's 400 message, the client's EngineError message
    pytest.param([], 4, "input_ids is empty", "input_ids is empty", id="empty-prompt"),
    pytest.param([6, 100000], 4, "token id 100000 in input_ids is out of the vocabulary: expected [0, ",
                 "rejected the request: token id 100000 in input_ids is out of the vocabulary: expected [0, ",
                 id="id-above-vocab"),
    pytest.param([6, -3], 4, "token id -3 in input_ids is out of the vocabulary: expected [0, ",
                 "token id -3 in input_ids is out of the vocabulary", id="negative-id"),
    pytest.param([6, 7], 0, "max_new_tokens must be > 0, got 0", "max_new_tokens must be > 0, got 0",
                 id="zero-max-new-tokens"),
    pytest.param([6, 7], -2, "max_new_tokens must be > 0, got -2", "max_new_tokens must be > 0, got -2",
                 id="negative-max-new-tokens"),
]


@pytest.mark.parametrize("ids, max_new_tokens, server_message, client_message", BAD_REQUESTS)
def test_bad_requests_get_http_400_from_the_server_and_engine_error_from_the_client(
        areal_pair, ids, max_new_tokens, server_message, client_message):
    url = areal_pair[0].url
    response = httpx.post(f"{url}/generate", json={"input_ids": ids, "sampling_params": {
        "max_new_tokens": max_new_tokens}}, timeout=30)
    assert response.status_code == 400
    assert server_message in response.json()["error"]["message"]

    async def through_client():
        async with SGLangEngine([url]) as engine:
            with pytest.raises(EngineError) as info:
                await engine.generate(GenerateRequest(ids, SamplingParams(max_new_tokens=max_new_tokens)))
            return str(info.value), engine.server_stats()

    error, stats = asyncio.run(through_client())
    assert client_message in error
    assert stats[0]["failures"] == 0 and stats[0]["state"] == "up"   # the caller's mistake, not the server's
    assert httpx.get(f"{url}/health", timeout=10).status_code == 200


def test_client_rejects_bad_input_before_sending():
    async def run():
        async with SGLangEngine(["http://127.0.0.1:9"], vocab_size=105) as engine:   # nothing listens there
            for ids, message in [([], "input_ids is empty"), ([6, 105], "expected [0, 105)"),
                                 ([6, -1], "out of the vocabulary")]:
                with pytest.raises(EngineError, match=message.replace("[", r"\[").replace(")", r"\)")):
                    await engine.generate(GenerateRequest(ids, SamplingParams(max_new_tokens=2)))
            return engine.server_stats()

    assert asyncio.run(run())[0]["segments"] == 0
    with pytest.raises(EngineError, match="at least one server URL"):
        SGLangEngine([])
    with pytest.raises(EngineError, match="must start with http"):
        SGLangEngine(["127.0.0.1:30000"])


def test_update_to_a_missing_checkpoint_is_an_engine_error_and_serving_goes_on(areal_pair, tmp_path):
    urls = [p.url for p in areal_pair]
    before = served_model(urls[0])

    async def run():
        async with SGLangEngine(urls) as engine:
            with pytest.raises(EngineError, match="is not a directory"):
                await engine.update_weights(tmp_path / "nothing-here", before[1] + 1)
            out = await engine.generate(GenerateRequest([6], SamplingParams(max_new_tokens=3, ignore_eos=True)))
            return out, engine.server_stats()

    out, stats = asyncio.run(run())
    assert len(out.output_ids) == 3 and out.output_versions == [before[1]] * 3
    assert all(s["state"] == "up" for s in stats)
    assert all(served_model(u) == before for u in urls)


def test_control_call_drops_an_unreachable_server_and_serving_goes_on(areal_pair):
    url = areal_pair[0].url
    dead = f"http://127.0.0.1:{_free_port()}"   # nothing listens there

    async def run():
        async with SGLangEngine([dead, url], backoff=0.01) as engine:
            await engine.pause("retract")
            await engine.resume()
            out = await engine.generate(GenerateRequest([6], SamplingParams(max_new_tokens=3, ignore_eos=True)))
            healthy = await engine.health()
            return out, healthy, engine.server_stats()

    out, healthy, stats = asyncio.run(run())
    assert len(out.output_ids) == 3 and healthy
    assert [s["state"] for s in stats] == ["lost", "up"]


def test_areal_serve_keeps_an_idle_connection_far_longer_than_the_client_does(areal_pair):
    """uvicorn's default keep-alive (5 s) leaves a loaded client 3 s of margin over its own 2 s before a request
    may go out on a connection the server is closing (and be reset). `areal serve` keeps it 65 s."""
    assert health_on_one_connection_after_idling(areal_pair[0].url, idle=6.0) == [200, 200]


class ResettingProxy:
    """A real TCP proxy in front of a server that resets (RST) the connection of the first `faults` requests
    containing `trigger`, before they reach the server: what a client sees when the server's keep-alive
    timeout closes a pooled connection just as a request is sent on it."""

    def __init__(self, upstream: str, trigger: bytes, faults: int) -> None:
        host, port = upstream.removeprefix("http://").split(":")
        self.upstream = (host, int(port))
        self.trigger = trigger
        self.faults = faults
        self.resets = 0
        self.server: asyncio.Server | None = None

    async def __aenter__(self) -> "ResettingProxy":
        self.server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        self.url = f"http://127.0.0.1:{self.server.sockets[0].getsockname()[1]}"
        return self

    async def __aexit__(self, *exc) -> None:
        self.server.close()

    async def _serve(self, client_reader, client_writer) -> None:
        upstream_reader, upstream_writer = await asyncio.open_connection(*self.upstream)

        async def to_server() -> None:
            while chunk := await client_reader.read(65536):
                if self.trigger in chunk and self.resets < self.faults:
                    self.resets += 1
                    sock = client_writer.get_extra_info("socket")
                    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                    client_writer.transport.abort()   # linger 0: the kernel answers with RST
                    upstream_writer.close()
                    return
                upstream_writer.write(chunk)
                await upstream_writer.drain()
            upstream_writer.close()

        async def to_client() -> None:
            while chunk := await upstream_reader.read(65536):
                client_writer.write(chunk)
                await client_writer.drain()
            client_writer.close()

        await asyncio.gather(to_server(), to_client(), return_exceptions=True)


def test_a_control_call_whose_connection_is_reset_is_retried_and_the_server_kept(areal_pair, tiny_model,
                                                                                 tiny_model_v1):
    """The weight update to server A is reset once on the wire: the client retries it, A loads the new weights
    with B, stays in use, and every later token carries the new version."""
    a, b = areal_pair
    old_path, old_version = served_model(a.url)
    new_path, new_version = other_model(old_path, tiny_model, tiny_model_v1), old_version + 1

    async def run():
        async with ResettingProxy(a.url, b"POST /update_weights_from_disk", faults=1) as proxy:
            async with SGLangEngine([proxy.url, b.url], backoff=0.01) as engine:
                await engine.pause("retract")
                await engine.update_weights(new_path, new_version)
                await engine.resume()
                outputs = await asyncio.gather(*(
                    engine.generate(GenerateRequest([6 + i, 85], SamplingParams(max_new_tokens=3, ignore_eos=True)))
                    for i in range(8)))
                return outputs, engine.server_stats(), proxy.resets

    outputs, stats, resets = asyncio.run(run())
    assert resets == 1
    assert [s["state"] for s in stats] == ["up", "up"], stats
    assert stats[0]["failures"] == 1 and stats[0]["segments"] >= 1 and stats[1]["failures"] == 0, stats
    assert all(o.output_versions == [new_version] * 3 for o in outputs)
    for url in (a.url, b.url):
        path, version = served_model(url)
        assert os.path.samefile(path, new_path) and version == new_version


def test_a_request_whose_connection_this_client_closed_is_sent_again_and_the_server_not_blamed(areal_pair):
    """httpcore's pool can close a connection it has just handed to a request, under that request
    (encode/httpcore#1110): CI once saw it as a ReadError that marked a healthy server down. Here the client's own
    pool closes the connection of a request the server is generating: the request goes again to the same server
    and completes, and the server is neither marked down nor charged a failure."""
    a = areal_pair[0].url

    async def run():
        async with SGLangEngine([a]) as engine:
            task = asyncio.create_task(engine.generate(GenerateRequest([6, 85], SamplingParams(
                max_new_tokens=150, temperature=0.0, ignore_eos=True))))
            deadline = time.monotonic() + 60
            while not await total_running([a]):
                assert time.monotonic() < deadline
                await asyncio.sleep(0.01)
            pool = engine._client._transport._pool    # what httpcore's own pass does to an assigned connection
            busy = [connection for connection in pool.connections if not connection.is_idle()]
            assert len(busy) == 1
            await busy[0].aclose()
            return await task, engine.server_stats()

    out, stats = asyncio.run(run())
    assert len(out.output_ids) == 150 and out.finish_reason == "length" and out.num_interruptions == 0
    assert [(s["state"], s["failures"], s["segments"]) for s in stats] == [("up", 0, 1)], stats
    model_path, _ = served_model(a)
    model = load_model(model_path)
    with torch.no_grad():   # greedy: the tokens of one uninterrupted generation
        logits = model(torch.tensor([[6, 85] + out.output_ids])).logits[0, 1:-1]
    assert out.output_ids == logits.argmax(-1).tolist()


def test_a_client_that_leaves_before_its_request_is_read_costs_areal_serve_no_traceback(areal_pair):
    """A /generate and an /abort_request whose clients close mid-body (what the pool's close above does to a request
    in flight): `areal serve` answers the next requests as before, and its log holds no traceback for them."""
    a = areal_pair[0]
    log = Path(a.log_path)
    before = log.read_text(errors="replace")
    host, port = a.url.removeprefix("http://").split(":")
    for path in ("/generate", "/abort_request"):
        with socket.create_connection((host, int(port))) as sock:
            sock.sendall(f"POST {path} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                         f"Content-Length: 1000\r\n\r\n{{\"input_ids\": [6,".encode())
            time.sleep(0.3)
    answer = httpx.post(f"{a.url}/generate", json={"input_ids": [6, 85], "sampling_params": {"max_new_tokens": 2}},
                        timeout=30)
    assert answer.status_code == 200 and len(answer.json()["output_ids"]) == 2
    time.sleep(0.5)
    added = log.read_text(errors="replace")[len(before):]
    assert "Traceback" not in added and "Exception in ASGI application" not in added, added[-2000:]
    assert added.count("the client closed the connection before its request was read") == 2, added[-2000:]


def test_closed_by_this_client_tells_our_own_close_from_a_servers_reset():
    async def read_after(close_here: bool) -> BaseException:
        async def serve(reader, writer):
            await reader.read(100)
            if not close_here:
                sock = writer.get_extra_info("socket")
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                writer.transport.abort()    # RST
            else:
                await asyncio.sleep(5)

        server = await asyncio.start_server(serve, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        async with httpx.AsyncClient() as client:
            request = asyncio.create_task(client.post(f"http://127.0.0.1:{port}/generate", json={"rid": "x"}))
            await asyncio.sleep(0.3)
            if close_here:
                for connection in client._transport._pool.connections:
                    await connection.aclose()
            with pytest.raises(httpx.HTTPError) as failure:
                await request
        server.close()
        return failure.value

    assert closed_by_this_client(asyncio.run(read_after(close_here=True)))
    assert not closed_by_this_client(asyncio.run(read_after(close_here=False)))


def test_versions_from_meta_reads_sglang_spans_and_areal_per_token_versions():
    spans = {"weight_version": "3", "weight_versions": [{"version": "2", "start": 0, "end": 4},
                                                        {"version": "3", "start": 4, "end": 6}]}
    assert versions_from_meta(spans, 6) == [2, 2, 2, 2, 3, 3]
    assert versions_from_meta({"weight_version": "default", "weight_versions": [
        {"version": "default", "start": 0, "end": 2}]}, 2) == [0, 0]
    assert versions_from_meta({"weight_version": "5"}, 3) == [5, 5, 5]
    assert versions_from_meta({**spans, "output_token_weight_versions": [1, 1, 2, 2, 3, 3]}, 6) == [1, 1, 2, 2, 3, 3]
    with pytest.raises(EngineError, match="is not an integer"):
        versions_from_meta({"weight_version": "v-abc"}, 1)


def test_server_killed_mid_request_the_request_completes_on_another_server(areal_pair):
    """Server A is SIGKILLed while it generates half of the requests: the client resubmits them to B and every
    request completes. (Last in the module: the next user of the pair would restart A.)"""
    a, b = areal_pair
    prompts = [[6 + i, 85] for i in range(8)]

    async def run():
        async with SGLangEngine([a.url, b.url], backoff=0.05, down_seconds=300) as engine:
            params = SamplingParams(max_new_tokens=200, temperature=0.0, ignore_eos=True)
            tasks = [asyncio.create_task(engine.generate(GenerateRequest(p, params))) for p in prompts]
            deadline = time.monotonic() + 60
            while await asyncio.to_thread(running, a.url) < 4:
                assert time.monotonic() < deadline
                await asyncio.sleep(0.01)
            a.kill()                      # SIGKILL to the server's process group
            outputs = await asyncio.gather(*tasks)
            return outputs, engine.server_stats()

    outputs, stats = asyncio.run(run())
    assert not a.alive
    assert all(len(o.output_ids) == 200 and o.finish_reason == "length" for o in outputs)
    assert stats[0]["failures"] >= 1 and stats[0]["state"] == "down"
    assert stats[1]["segments"] == len(prompts) and stats[1]["failures"] == 0
    model_path, _ = served_model(b.url)
    model = load_model(model_path)
    for prompt, out in zip(prompts, outputs):   # greedy: the same tokens whichever server produced them
        ref = reference_logprobs(model, prompt, out.output_ids, 1.0)
        assert torch.allclose(ref, torch.tensor(out.output_logprobs), atol=LOGPROB_TOLERANCE)
        with torch.no_grad():
            logits = model(torch.tensor([prompt + out.output_ids])).logits[0, len(prompt) - 1:-1]
        assert out.output_ids == logits.argmax(-1).tolist()


def test_sglang_launcher_gives_each_server_its_port_and_gpus():
    servers = sglang_servers("/models/qwen", 2, base_port=31000, gpus_per_server=2, extra_args=["--tp-size", "2"],
                             python="/opt/sglang/bin/python", log_dir=None)
    assert [s.url for s in servers] == ["http://127.0.0.1:31000", "http://127.0.0.1:31001"]
    assert [s.env["CUDA_VISIBLE_DEVICES"] for s in servers] == ["0,1", "2,3"]
    assert servers[1].command == ["/opt/sglang/bin/python", "-m", "sglang.launch_server", "--model-path", "/models/qwen",
                                  "--host", "127.0.0.1", "--port", "31001", "--weight-version", "0", "--tp-size", "2"]
    with pytest.raises(EngineError, match="need 4 GPU ids, got 3"):
        sglang_servers("/models/qwen", 2, gpus_per_server=2, gpu_ids=[0, 1, 2])


def test_sglang_launcher_reports_a_server_that_cannot_start_with_its_log(tmp_path):
    """This interpreter has no SGLang: the real process exits at once and the error quotes its log."""
    with pytest.raises(EngineError) as info:
        launch_sglang_servers(tmp_path, 1, base_port=_free_port(), gpus_per_server=0, python=sys.executable,
                              log_dir=tmp_path / "logs", startup_timeout=60)
    message = str(info.value)
    assert "exited with code 1 while starting" in message and "No module named 'sglang'" in message
