"""`areal audit`: a reward-hacking fuzzer for any installed reward.

For each sample of a task, the mutators registered for the task's reward (hook
``register_audit_mutators``) make responses that must be judged wrong (hedges, several final answers,
supersets, near misses, the reference quoted before a wrong answer, answers outside the expected frame,
degenerate outputs) and responses that must be judged right (the reference in forms the task's format
allows). The audit scores them all through the reward service and reports false positives and false
negatives per family. See `areal_core.audit.variants` for the mutator contract and the shared builders.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

from areal_core.audit.variants import (DEGENERATE, EQUIVALENT, HEDGE, NEAR_MISS, OUTSIDE, QUOTED, REFERENCE, SEVERAL,
                                       SUPERSET, Mutator, Variant, answer_variants, degenerate_variants, right, wrong)
from areal_core.errors import PluginError
from areal_core.plugins import Registry, get_plugin_manager

ANY_REWARD = "*"

__all__ = ["Variant", "Mutator", "MutatorSpec", "answer_variants", "degenerate_variants", "right", "wrong",
           "mutator_registry", "mutators_for", "ANY_REWARD", "REFERENCE", "EQUIVALENT", "HEDGE", "SEVERAL",
           "SUPERSET", "NEAR_MISS", "QUOTED", "OUTSIDE", "DEGENERATE"]


@dataclass(frozen=True)
class MutatorSpec:
    """A registered mutator: the reward it audits ("*": every reward), its name and the plugin behind it."""

    reward: str
    name: str
    fn: Callable[..., Any]
    plugin: str
    description: str = ""


def mutator_registry() -> Registry[MutatorSpec]:
    def make(plugin: str, reward: str, fn: Callable[..., Any], *, name: str | None = None,
             description: str = "") -> tuple[str, MutatorSpec]:
        if not isinstance(reward, str) or not reward:
            raise PluginError(f"plugin {plugin!r}: audit mutators must name the reward they audit, got {reward!r}")
        if not callable(fn):
            raise PluginError(f"plugin {plugin!r}: audit mutator for reward {reward!r} is not callable")
        name = name or plugin
        return f"{reward}:{name}", MutatorSpec(reward, name, fn, plugin, description)

    return get_plugin_manager().registry("register_audit_mutators", "audit mutator", make)


def mutators_for(reward: str) -> list[MutatorSpec]:
    """The mutators that audit `reward`: its own, then those for every reward. A reward no plugin wrote
    mutators for gets areal-core's format-free ones (hedges and several answers around `reference`)."""
    from areal_core.audit.generic import reference_variants

    specs = [spec for _, spec in mutator_registry().items()]
    own = [s for s in specs if s.reward == reward]
    if not own:
        own = [MutatorSpec(reward, "reference", reference_variants, "builtin-audit",
                           "hedges and several answers around the sample's reference (no format known)")]
    return own + [s for s in specs if s.reward == ANY_REWARD]


def has_own_mutators(reward: str) -> bool:
    return any(spec.reward == reward for _, spec in mutator_registry().items())
