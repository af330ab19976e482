"""`areal serve`: the local engine behind the subset of SGLang's native HTTP API the platform uses.

Same paths, request fields and response fields as SGLang (0.5.x):

  POST /generate                  {input_ids | text, sampling_params, return_logprob, rid}  (single or batch)
       -> {text, output_ids, meta_info: {id, finish_reason, prompt_tokens, completion_tokens,
           output_token_logprobs: [[logprob, token_id, null], ...], weight_version,
           weight_versions: [{version, start, end}, ...], num_retractions}}
  POST /pause_generation          {mode: abort | retract | in_place}
  POST /continue_generation
  POST /update_weights_from_disk  {model_path, weight_version} -> {success, message, num_paused_requests}
  POST /init_weights_update_group {master_address, master_port, rank_offset, world_size, group_name, backend}
  POST /begin_weight_update, then per bucket /update_weights_from_distributed {names, dtypes, shapes, group_name,
       weight_version, flush_cache, load_format: "flattened_bucket"} (one uint8 broadcast from rank 0; weight_sync.py),
       then POST /end_weight_update
  POST /destroy_weights_update_group {group_name}                  -> {success, message}
  GET  /get_server_info           {tp_size: 1, ...}  (the ranks a weight-update group gives this server)
  GET  /health, /health_generate, /model_info, /get_model_info;  GET|POST /flush_cache;  POST /abort_request

Beyond SGLang, meta_info also carries `output_token_weight_versions`, the version of every token.
Weight versions are integers here (SGLang's are strings; "3" and 3 are both accepted).
Invalid requests get HTTP 400 with {"error": {"message": ...}}, as SGLang answers.
"""
from __future__ import annotations

import asyncio
import contextlib
import logging
from pathlib import Path
from typing import Any, Awaitable, Callable

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response
from starlette.requests import ClientDisconnect

from areal_core.engine.local import LocalEngine
from areal_core.engine.protocol import (
    SERVER_KEEP_ALIVE_SECONDS,
    EngineError,
    GenerateOutput,
    GenerateRequest,
    SamplingParams,
)
from areal_core.engine.weight_sync import WEIGHT_GROUP, check_bucket

log = logging.getLogger(__name__)


def weight_version_spans(versions: list[int]) -> list[dict[str, Any]]:
    spans: list[dict[str, Any]] = []
    for i, version in enumerate(versions):
        if spans and spans[-1]["version"] == str(version):
            spans[-1]["end"] = i + 1
        else:
            spans.append({"version": str(version), "start": i, "end": i + 1})
    return spans


def finish_reason_json(output: GenerateOutput, eos_like: bool = True) -> dict[str, Any]:
    if output.finish_reason == "stop":
        return {"type": "stop", "matched": output.output_ids[-1] if output.output_ids else None}
    if output.finish_reason == "length":
        return {"type": "length", "length": len(output.output_ids)}
    return {"type": "abort", "message": "Aborted", "status_code": None, "err_type": None}


def output_json(output: GenerateOutput, return_logprob: bool, current_version: int) -> dict[str, Any]:
    meta: dict[str, Any] = {
        "id": output.rid,
        "finish_reason": finish_reason_json(output),
        "prompt_tokens": output.prompt_tokens,
        "completion_tokens": len(output.output_ids),
        "cached_tokens": 0,
        "num_retractions": output.num_interruptions,
        "weight_version": str(output.output_versions[-1] if output.output_versions else current_version),
        "weight_versions": weight_version_spans(output.output_versions),
        "output_token_weight_versions": output.output_versions,
    }
    if return_logprob:
        meta["output_token_logprobs"] = [[lp, tok, None] for lp, tok in zip(output.output_logprobs, output.output_ids)]
        meta["output_token_logprobs_length"] = len(output.output_ids)
        # SGLang's return_sampling_mask answer: the local engine's log-probs already are those of the truncated,
        # renormalised distribution (engine/protocol.py)
        meta["output_token_sampling_logprobs"] = list(output.output_logprobs)
    return {"text": output.text, "output_ids": output.output_ids, "meta_info": meta}


def _parse_version(value: Any, fallback: int) -> int:
    if value is None:
        return fallback + 1
    try:
        return int(value)
    except (TypeError, ValueError):
        raise EngineError(f"weight_version must be an integer (or its string), got {value!r}") from None


def build_app(engine: LocalEngine) -> FastAPI:
    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI):
        engine.start()
        yield
        await engine.close()

    app = FastAPI(title="areal local engine (SGLang-compatible)", lifespan=lifespan)

    def error(message: str, status: int = 400) -> JSONResponse:
        return JSONResponse({"error": {"message": message}}, status_code=status)

    @app.exception_handler(ClientDisconnect)
    async def client_left(request: Request, exc: ClientDisconnect) -> Response:
        # the answer goes nowhere (the client closed its connection before its request was read): one line, not a
        # traceback; 499 is what nginx logs for it
        log.warning("%s %s: the client closed the connection before its request was read", request.method,
                    request.url.path)
        return Response(status_code=499)

    async def body(request: Request) -> dict[str, Any]:
        raw = await request.body()
        if not raw:
            return {}
        data = await request.json()
        if not isinstance(data, dict):
            raise EngineError("the request body must be a JSON object")
        return data

    def to_requests(data: dict[str, Any]) -> tuple[list[GenerateRequest], bool]:
        if data.get("stream"):
            raise EngineError("stream=true is not supported by areal serve")
        ids = data.get("input_ids")
        text = data.get("text")
        if ids is None and text is None:
            raise EngineError("give input_ids or text")
        if ids is None:
            single = isinstance(text, str)
            texts = [text] if single else list(text)
            ids = [engine.tokenizer(t, add_special_tokens=False)["input_ids"] for t in texts]
        else:
            if not isinstance(ids, list):
                raise EngineError("input_ids must be a list of token ids or a list of such lists")
            single = not ids or not isinstance(ids[0], list)
            ids = [ids] if single else ids
        params = data.get("sampling_params") or {}
        params_list = params if isinstance(params, list) else [params] * len(ids)
        rids = data.get("rid")
        rid_list = [rids] if single else (rids if isinstance(rids, list) else [f"{rids}-{i}" if rids else "" for i in range(len(ids))])
        if len(params_list) != len(ids) or len(rid_list) != len(ids):
            raise EngineError("sampling_params and rid lists must match the batch size")
        requests = []
        for prompt, p, rid in zip(ids, params_list, rid_list):
            if not isinstance(prompt, list) or not all(isinstance(t, int) for t in prompt):
                raise EngineError("input_ids must contain integers")
            request = GenerateRequest(list(prompt), SamplingParams.from_sglang(p), str(rid or ""))
            engine.validate(request)
            requests.append(request)
        return requests, single

    @app.post("/generate")
    async def generate(request: Request):
        try:
            data = await body(request)
            requests, single = to_requests(data)
        except (EngineError, ValueError, TypeError) as exc:
            return error(str(exc))
        outputs = await asyncio.gather(*(engine.generate(r) for r in requests))
        results = [output_json(o, bool(data.get("return_logprob")), engine.version) for o in outputs]
        return JSONResponse(results[0] if single else results)

    @app.post("/pause_generation")
    async def pause_generation(request: Request):
        try:
            mode = (await body(request)).get("mode", "abort")
            if mode not in ("abort", "retract", "in_place"):
                raise EngineError(f"mode must be abort, retract or in_place, got {mode!r}")
        except (EngineError, ValueError) as exc:
            return error(str(exc))
        await engine.pause(mode)
        return {"message": "Generation paused successfully.", "status": "ok"}

    @app.post("/continue_generation")
    async def continue_generation():
        await engine.resume()
        return {"message": "Generation continued successfully.", "status": "ok"}

    @app.post("/update_weights_from_disk")
    async def update_weights_from_disk(request: Request):
        try:
            data = await body(request)
            path = data.get("model_path")
            if not path or not Path(path).is_dir():
                raise EngineError(f"model_path {path!r} is not a directory")
            version = _parse_version(data.get("weight_version"), engine.version)
            paused = engine.requests
            await engine.update_weights(path, version)
        except Exception as exc:
            return JSONResponse({"success": False, "message": str(exc), "num_paused_requests": 0}, status_code=400)
        seconds = engine.last_weight_load_seconds
        return {"success": True, "message": f"Succeeded to update model weights in {seconds:.3f}s.",
                "num_paused_requests": paused}

    def failed(exc: Exception) -> JSONResponse:
        return JSONResponse({"success": False, "message": str(exc)}, status_code=400)

    @app.post("/init_weights_update_group")
    async def init_weights_update_group(request: Request):
        try:
            data = await body(request)
            await engine.init_weight_group(str(data["master_address"]), int(data["master_port"]),
                                           int(data["rank_offset"]), int(data["world_size"]),
                                           str(data.get("group_name") or WEIGHT_GROUP), str(data.get("backend") or "gloo"))
        except KeyError as exc:
            return failed(EngineError(f"missing field {exc}"))
        except Exception as exc:
            return failed(exc)
        return {"success": True, "message": "Succeeded to initialize custom process group."}

    def session_endpoint(step: Callable[[], Awaitable[None]]) -> Callable[[], Awaitable[Any]]:
        async def endpoint():
            try:
                await step()
            except EngineError as exc:
                return failed(exc)
            return {"success": True, "message": "Success"}
        return endpoint

    # SGLang's weight-update session around the buckets of one update
    app.post("/begin_weight_update")(session_endpoint(engine.begin_weight_update))
    app.post("/end_weight_update")(session_endpoint(engine.end_weight_update))

    @app.post("/update_weights_from_distributed")
    async def update_weights_from_distributed(request: Request):
        try:
            data = await body(request)
            bucket = check_bucket(data)
            version = None if data.get("weight_version") is None else _parse_version(data["weight_version"], 0)
            await engine.update_weights_from_distributed(bucket, version, str(data.get("group_name") or WEIGHT_GROUP),
                                                         bool(data.get("flush_cache", True)))
        except Exception as exc:
            return failed(exc)
        return {"success": True, "message": f"Succeeded to update {len(bucket.names)} tensors in "
                                            f"{engine.last_weight_load_seconds:.3f}s."}

    @app.post("/destroy_weights_update_group")
    async def destroy_weights_update_group(request: Request):
        try:
            await engine.destroy_weight_group(str((await body(request)).get("group_name") or WEIGHT_GROUP))
        except Exception as exc:
            return failed(exc)
        return {"success": True, "message": "Succeeded to destroy custom process group."}

    @app.get("/get_server_info")
    async def server_info():
        return {**(await engine.model_info()), "tp_size": await engine.weight_group_ranks(), "dp_size": 1}

    @app.get("/health")
    @app.get("/health_generate")
    async def health():
        return Response(status_code=200 if await engine.health() else 503)

    @app.get("/model_info")
    @app.get("/get_model_info")
    async def model_info():
        return await engine.model_info()

    @app.api_route("/flush_cache", methods=["GET", "POST"])
    async def flush_cache():
        await engine.flush_cache()
        return Response("Cache flushed.\nPlease check backend logs for more details.", status_code=200)

    @app.post("/abort_request")
    async def abort_request(request: Request):
        data = await body(request)
        if data.get("abort_all"):
            engine.abort_all()
        elif data.get("rid"):
            engine.abort(str(data["rid"]))
        return Response(status_code=200)

    return app


def _exit_with_parent(parent_pid: int) -> None:
    """A server launched by a training run (it sets AREAL_PARENT_PID) must not outlive it, even when the
    run is killed with SIGKILL: poll the parent and exit when it is gone."""
    import os
    import threading
    import time

    def watch() -> None:
        while True:
            try:
                os.kill(parent_pid, 0)
            except ProcessLookupError:
                os._exit(0)
            time.sleep(1.0)

    threading.Thread(target=watch, name="areal-parent-watch", daemon=True).start()


def serve(model_path: str, host: str = "127.0.0.1", port: int = 30000, **engine_options: Any) -> None:
    import os

    import uvicorn

    if os.environ.get("AREAL_PARENT_PID"):
        _exit_with_parent(int(os.environ["AREAL_PARENT_PID"]))

    engine = LocalEngine(model_path, **engine_options)
    uvicorn.run(build_app(engine), host=host, port=port, log_level="warning",
                timeout_keep_alive=SERVER_KEEP_ALIVE_SECONDS)
