"""Generation engines: one async protocol (`protocol.py`), the embedded local torch engine, `areal serve` (its
SGLang-compatible HTTP server), the SGLang client, and the backends built from them (`backends.py`), started
by name through the plugin registry (`launch.py`)."""
from areal_core.engine.launch import EngineConfig, start_engines
from areal_core.engine.protocol import (
    EngineError,
    EngineTarget,
    GenerateOutput,
    GenerateRequest,
    InferenceEngine,
    SamplingParams,
    validate_request,
)

__all__ = ["EngineConfig", "EngineError", "EngineTarget", "GenerateOutput", "GenerateRequest", "InferenceEngine",
           "SamplingParams", "start_engines", "validate_request"]
