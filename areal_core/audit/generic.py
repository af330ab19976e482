"""The mutators areal-core applies to every reward, registered as a default plugin: degenerate outputs."""
from __future__ import annotations

from typing import Any

from areal_core.audit.variants import degenerate_variants
from areal_core.plugins import hookimpl


def degenerate(sample: dict[str, Any], rng: Any, options: dict[str, Any]) -> list[Any]:
    return degenerate_variants()


@hookimpl
def register_audit_mutators(register) -> None:
    register("*", degenerate, name="degenerate",
             description="empty, whitespace, huge, binary and deeply nested responses (must be judged wrong)")
