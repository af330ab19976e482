"""Generation engines: one async protocol, an embedded local torch engine and an SGLang HTTP client."""
from areal_core.engine.protocol import (
    EngineError,
    GenerateOutput,
    GenerateRequest,
    InferenceEngine,
    SamplingParams,
)

__all__ = ["EngineError", "GenerateOutput", "GenerateRequest", "InferenceEngine", "SamplingParams"]
