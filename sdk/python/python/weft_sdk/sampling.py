"""Samplers (spec/sampling.md). Each is a description; the sampler itself runs in Rust on every
span start, so a custom sampler written in Python is not supported.

    TracerProvider(sampler=ParentBased(TraceIdRatioBased(0.1)))
"""

from __future__ import annotations

import math
from typing import Optional, Tuple

__all__ = [
    "Sampler",
    "ALWAYS_ON",
    "ALWAYS_OFF",
    "AlwaysOn",
    "AlwaysOff",
    "TraceIdRatioBased",
    "ConsistentProbabilityBased",
    "RateLimiting",
    "ParentBased",
    "JaegerRemoteSampler",
    "from_env",
]

SamplerSpec = Tuple[object, ...]


class Sampler:
    """Base class of the weft samplers."""

    def _spec(self) -> SamplerSpec:  # pragma: no cover - abstract
        raise NotImplementedError

    def get_description(self) -> str:
        from . import _native

        return _native.Sampler(self._spec()).description()

    def __repr__(self) -> str:
        return f"weft_sdk.sampling.{self.get_description()}"


class AlwaysOn(Sampler):
    """Records and samples every span."""

    def _spec(self) -> SamplerSpec:
        return ("always_on",)


class AlwaysOff(Sampler):
    """Drops every span (they are still created, as non-recording handles)."""

    def _spec(self) -> SamplerSpec:
        return ("always_off",)


ALWAYS_ON = AlwaysOn()
ALWAYS_OFF = AlwaysOff()


def _probability(name: str, value: float) -> float:
    if not isinstance(value, (int, float)) or isinstance(value, bool) or math.isnan(value):
        raise TypeError(f"{name} must be a number between 0 and 1, not {value!r}")
    if not 0.0 <= value <= 1.0:
        raise ValueError(f"{name} must be between 0 and 1, not {value}")
    return float(value)


class TraceIdRatioBased(Sampler):
    """Samples `rate` of the traces by the low 64 bits of the trace ID (the OTel rule)."""

    def __init__(self, rate: float) -> None:
        self.rate = _probability("rate", rate)

    def _spec(self) -> SamplerSpec:
        return ("trace_id_ratio", self.rate)


class ConsistentProbabilityBased(Sampler):
    """Consistent probability sampling (OTEP 235): writes `th` into the `ot` tracestate member
    and honours `rv`."""

    def __init__(self, probability: float) -> None:
        self.probability = _probability("probability", probability)

    def _spec(self) -> SamplerSpec:
        return ("consistent_probability", self.probability)


class RateLimiting(Sampler):
    """At most `spans_per_second` root decisions per second (a token bucket)."""

    def __init__(self, spans_per_second: float) -> None:
        if not isinstance(spans_per_second, (int, float)) or spans_per_second < 0:
            raise ValueError(f"spans_per_second must be a non-negative number, not {spans_per_second!r}")
        self.spans_per_second = float(spans_per_second)

    def _spec(self) -> SamplerSpec:
        return ("rate_limiting", self.spans_per_second)


class ParentBased(Sampler):
    """Follows the parent's sampled flag; `root` decides for new traces."""

    def __init__(
        self,
        root: Sampler,
        remote_parent_sampled: Optional[Sampler] = None,
        remote_parent_not_sampled: Optional[Sampler] = None,
        local_parent_sampled: Optional[Sampler] = None,
        local_parent_not_sampled: Optional[Sampler] = None,
    ) -> None:
        for s in (root, remote_parent_sampled, remote_parent_not_sampled, local_parent_sampled, local_parent_not_sampled):
            if s is not None and not isinstance(s, Sampler):
                raise TypeError(f"ParentBased takes weft_sdk.sampling samplers, not {s!r}")
        self.root = root
        self.slots = (remote_parent_sampled, remote_parent_not_sampled, local_parent_sampled, local_parent_not_sampled)

    def _spec(self) -> SamplerSpec:
        return ("parent_based", self.root._spec(), *(s._spec() if s is not None else None for s in self.slots))


class JaegerRemoteSampler(Sampler):
    """Polls a Jaeger sampling endpoint (weft serves one on :5778) for per-operation strategies."""

    def __init__(
        self,
        service_name: str,
        endpoint: str = "http://localhost:5778/sampling",
        polling_interval: float = 60.0,
        initial_sampler: Optional[Sampler] = None,
    ) -> None:
        if polling_interval <= 0:
            raise ValueError("polling_interval must be positive (seconds)")
        self.service_name = service_name
        self.endpoint = endpoint
        self.polling_interval = polling_interval
        self.initial_sampler = initial_sampler or TraceIdRatioBased(0.001)

    def _spec(self) -> SamplerSpec:
        return (
            "jaeger_remote",
            self.endpoint,
            int(self.polling_interval * 1000),
            self.initial_sampler._spec(),
            self.service_name,
        )


class _FromEnv(Sampler):
    def __init__(self, name: Optional[str], arg: Optional[str], service_name: str) -> None:
        self.name, self.arg, self.service_name = name, arg, service_name

    def _spec(self) -> SamplerSpec:
        return ("env", self.name, self.arg, self.service_name)


def from_env(service_name: str = "unknown_service") -> Sampler:
    """The sampler named by `OTEL_TRACES_SAMPLER` and `OTEL_TRACES_SAMPLER_ARG` (the official
    names plus `jaeger_remote`, `parentbased_jaeger_remote`, `consistent_probability`,
    `rate_limiting`); default `parentbased_always_on`. Unknown names and bad arguments fall back
    to the defaults with a warning, as in the official SDK."""
    import os

    return _FromEnv(os.environ.get("OTEL_TRACES_SAMPLER"), os.environ.get("OTEL_TRACES_SAMPLER_ARG"), service_name)
