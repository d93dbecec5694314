"""`TracerProvider`: configuration (arguments, then the standard `OTEL_*` variables), the
native pipeline, shutdown at exit and the fork hooks."""

from __future__ import annotations

import atexit
import os
import urllib.parse
import weakref
from dataclasses import dataclass
from typing import Any, Dict, List, Mapping, Optional, Tuple, Union

from opentelemetry import trace as _trace

from . import _api, _native
from .sampling import Sampler, from_env as _sampler_from_env

__all__ = ["TracerProvider", "OTLPExporter", "InMemoryExporter", "NoopExporter", "SpanLimits"]

_SDK_VERSION = "0.1.0"


@dataclass(frozen=True)
class OTLPExporter:
    """OTLP export settings. Fields left `None` are read from `OTEL_EXPORTER_OTLP_*` as the
    official exporters read them (`TRACES_` variants first)."""

    endpoint: Optional[str] = None
    """Full URL: `http://host:4318/v1/traces` (HTTP) or `http://host:4317` (gRPC)."""
    protocol: Optional[str] = None
    """`"http/protobuf"` (default) or `"grpc"`."""
    headers: Optional[Mapping[str, str]] = None
    compression: Optional[str] = None
    """`"gzip"` (default) or `"none"`."""
    timeout: Optional[float] = None
    """Seconds per batch, every retry included (default 10)."""
    certificate_file: Optional[str] = None
    """PEM CA certificates to trust for `https://` (default: the system's roots)."""
    client_certificate_file: Optional[str] = None
    """PEM client certificate for mutual TLS (with `client_key_file`)."""
    client_key_file: Optional[str] = None
    insecure: Optional[bool] = None
    """gRPC endpoints without a scheme (`host:4317`): plaintext instead of TLS."""

    def _spec(self) -> Tuple[Any, ...]:
        env = os.environ.get

        def var(name: str) -> Optional[str]:
            v = env(f"OTEL_EXPORTER_OTLP_TRACES_{name}") or env(f"OTEL_EXPORTER_OTLP_{name}")
            return v.strip() if v and v.strip() else None

        protocol = self.protocol or var("PROTOCOL") or "http/protobuf"
        if protocol not in ("http/protobuf", "grpc"):
            raise ValueError(f'unsupported OTLP protocol {protocol!r}: use "http/protobuf" or "grpc"')
        endpoint = self.endpoint
        if endpoint is None:
            endpoint = env("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
        if endpoint is None:
            base = env("OTEL_EXPORTER_OTLP_ENDPOINT")
            if base:
                endpoint = base if protocol == "grpc" else base.rstrip("/") + "/v1/traces"
            else:
                endpoint = "http://localhost:4317" if protocol == "grpc" else "http://localhost:4318/v1/traces"
        if "://" not in endpoint and protocol == "grpc":
            pass  # host:port, TLS unless insecure (as the official gRPC exporter)
        elif not endpoint.startswith(("http://", "https://")):
            raise ValueError(f"unsupported OTLP endpoint {endpoint!r}: use an http:// or https:// URL")
        if self.headers is not None:
            headers = [(str(k), str(v)) for k, v in self.headers.items()]
        else:
            headers = []
            for item in (var("HEADERS") or "").split(","):
                k, sep, v = item.partition("=")
                if sep and k.strip():
                    headers.append((k.strip(), urllib.parse.unquote(v.strip())))
        compression = self.compression or var("COMPRESSION") or "gzip"
        if compression not in ("gzip", "none"):
            raise ValueError(f'unsupported OTLP compression {compression!r}: use "gzip" or "none"')
        if self.timeout is not None:
            timeout_ms = int(self.timeout * 1000)
        else:
            t = var("TIMEOUT")
            try:
                timeout_ms = int(float(t)) if t else 10_000
            except ValueError:
                _api.warn(f"invalid OTEL_EXPORTER_OTLP_TIMEOUT {t!r}, using 10000 ms")
                timeout_ms = 10_000
        if timeout_ms <= 0:
            raise ValueError("the OTLP timeout must be positive")
        insecure = self.insecure
        if insecure is None:
            insecure = (var("INSECURE") or "").lower() == "true"
        tls = (
            self.certificate_file or var("CERTIFICATE"),
            self.client_certificate_file or var("CLIENT_CERTIFICATE"),
            self.client_key_file or var("CLIENT_KEY"),
            insecure,
        )
        return ("otlp", protocol, endpoint, headers, compression, timeout_ms, tls)


class NoopExporter:
    """Discards every batch on the export thread (benchmarks: queue and batching run, no I/O)."""

    def _spec(self) -> Tuple[Any, ...]:
        return ("noop",)


class InMemoryExporter:
    """Keeps exported spans in memory (tests); read them with `TracerProvider.exported_spans()`."""

    def _spec(self) -> Tuple[Any, ...]:
        return ("memory",)


@dataclass(frozen=True)
class SpanLimits:
    """Span limits; `None` keeps the `OTEL_SPAN_*` value or the default (128, unlimited length)."""

    max_attributes: Optional[int] = None
    max_attribute_length: Optional[int] = None
    max_events: Optional[int] = None
    max_links: Optional[int] = None
    max_event_attributes: Optional[int] = None
    max_link_attributes: Optional[int] = None

    def _dict(self) -> Dict[str, int]:
        out: Dict[str, int] = {}
        for k, v in self.__dict__.items():
            if v is not None:
                if not isinstance(v, int) or v < 0:
                    raise ValueError(f"span limit {k} must be a non-negative int, not {v!r}")
                out[k] = v
        return out


def _resource_attributes(resource: Any) -> Tuple[List[Tuple[str, Any]], Optional[str]]:
    """The resource as the official `Resource.create` builds it: SDK attributes, then
    `OTEL_RESOURCE_ATTRIBUTES`, then `OTEL_SERVICE_NAME`, then the given attributes."""
    schema_url = None
    if resource is not None and not isinstance(resource, Mapping) and hasattr(resource, "attributes"):
        # An opentelemetry.sdk.resources.Resource: already merged with the environment.
        given = dict(resource.attributes)
        schema_url = getattr(resource, "schema_url", None) or None
        given.setdefault("service.name", "unknown_service")
        return list(given.items()), schema_url
    if resource is not None and not isinstance(resource, Mapping):
        raise TypeError(f"resource must be a mapping of attributes or an OTel Resource, not {resource!r}")
    attrs: Dict[str, Any] = {
        "telemetry.sdk.language": "python",
        "telemetry.sdk.name": "weft",
        "telemetry.sdk.version": _SDK_VERSION,
    }
    for item in os.environ.get("OTEL_RESOURCE_ATTRIBUTES", "").split(","):
        if not item.strip():
            continue
        k, sep, v = item.partition("=")
        if not sep or not k.strip():
            _api.warn(f"OTEL_RESOURCE_ATTRIBUTES: invalid member {item!r} skipped")
            continue
        attrs[k.strip()] = urllib.parse.unquote(v.strip())
    service = os.environ.get("OTEL_SERVICE_NAME")
    if service:
        attrs["service.name"] = service
    if resource:
        attrs.update(resource)
    attrs.setdefault("service.name", "unknown_service")
    return list(attrs.items()), schema_url


_PROVIDERS: "weakref.WeakSet[TracerProvider]" = weakref.WeakSet()


def _after_fork_in_child() -> None:
    # The child has one thread (this one). Every provider gets a fresh queue, export thread and
    # sampler; the ID generator of this thread is reseeded even without a provider. The
    # registry lock taken before the fork is released first: building a pipeline takes it.
    _native.after_fork()
    _native.reseed_after_fork()
    for p in list(_PROVIDERS):
        p._after_fork_child()


if hasattr(os, "register_at_fork"):
    # `before`: no thread of the native core may hold its pipeline registry's lock at the
    # instant of the fork (the child would find it locked forever), so the forking thread holds
    # it across the fork and both processes release it after.
    os.register_at_fork(before=_native.prepare_fork, after_in_parent=_native.after_fork, after_in_child=_after_fork_in_child)


def _shutdown_all() -> None:
    for p in list(_PROVIDERS):
        if p._shutdown_on_exit:
            p.shutdown()


atexit.register(_shutdown_all)


class TracerProvider(_trace.TracerProvider):
    """The weft tracer provider.

    Every argument is optional; what is not given comes from the standard variables, as in the
    official SDK: `OTEL_SERVICE_NAME`, `OTEL_RESOURCE_ATTRIBUTES`, `OTEL_TRACES_SAMPLER[_ARG]`,
    `OTEL_EXPORTER_OTLP_*`, `OTEL_BSP_*`, `OTEL_SPAN_*_LIMIT`. `OTEL_TRACES_EXPORTER=none`
    disables export. The provider keeps working in a child after `os.fork()`, and is shut down
    (queued spans exported, for up to 5 s) at interpreter exit.
    """

    def __init__(
        self,
        resource: Any = None,
        sampler: Optional[Sampler] = None,
        exporter: Union[OTLPExporter, InMemoryExporter, NoopExporter, None] = None,
        *,
        span_limits: Optional[SpanLimits] = None,
        id_generator: str = "random",
        max_queue_size: Optional[int] = None,
        max_export_batch_size: Optional[int] = None,
        schedule_delay: Optional[float] = None,
        shutdown_on_exit: bool = True,
    ) -> None:
        attrs, schema_url = _resource_attributes(resource)
        service = str(dict(attrs).get("service.name", "unknown_service"))
        if sampler is None:
            sampler = _sampler_from_env(service)
        elif not isinstance(sampler, Sampler):
            raise TypeError(
                f"sampler must be a weft_sdk.sampling sampler (samplers run natively), not {type(sampler).__name__}"
            )
        if exporter is None:
            choice = os.environ.get("OTEL_TRACES_EXPORTER", "otlp").strip().lower()
            if choice == "none":
                spec: Tuple[Any, ...] = ("none",)
            else:
                if choice != "otlp":
                    _api.warn(f"OTEL_TRACES_EXPORTER={choice!r} is not supported by weft; exporting OTLP")
                spec = OTLPExporter()._spec()
        elif isinstance(exporter, (OTLPExporter, InMemoryExporter, NoopExporter)):
            spec = exporter._spec()
        else:
            raise TypeError(f"exporter must be weft_sdk.OTLPExporter, InMemoryExporter or NoopExporter, not {exporter!r}")
        batch: Dict[str, int] = {}
        if max_queue_size is not None:
            batch["max_queue_size"] = max_queue_size
        if max_export_batch_size is not None:
            batch["max_export_batch_size"] = max_export_batch_size
        if schedule_delay is not None:
            batch["schedule_delay_millis"] = int(schedule_delay * 1000)
        self._native = _native.Provider(
            attrs,
            sampler._spec(),
            spec,
            id_generator,
            (span_limits or SpanLimits())._dict(),
            batch,
            schema_url,
        )
        self._shutdown_on_exit = shutdown_on_exit
        self._is_shutdown = False
        _PROVIDERS.add(self)

    def get_tracer(
        self,
        instrumenting_module_name: str,
        instrumenting_library_version: Optional[str] = None,
        schema_url: Optional[str] = None,
        attributes: Optional[Mapping[str, Any]] = None,
    ) -> "_trace.Tracer":
        """A tracer for one instrumentation scope (scope attributes are not exported)."""
        if not instrumenting_module_name:
            _api.warn("get_tracer called with an empty instrumenting_module_name")
            instrumenting_module_name = ""
        return self._native.tracer(instrumenting_module_name, instrumenting_library_version, schema_url)

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        """Exports every span ended so far; returns whether that finished within the timeout."""
        return self._native.force_flush(max(timeout_millis, 0) / 1000.0)

    def shutdown(self, timeout_millis: int = 5000) -> bool:
        """Exports what is queued (within the timeout) and stops export; later spans are dropped
        and counted. A second call does nothing and returns False."""
        if self._is_shutdown:
            return False
        self._is_shutdown = True
        return self._native.shutdown(max(timeout_millis, 0) / 1000.0)

    def stats(self) -> Dict[str, int]:
        """Counters: exported, dropped (total and by reason: queue full, after shutdown,
        permanent errors, retries exhausted, deadline), rejected, batches."""
        return self._native.stats()

    @property
    def resource_attributes(self) -> Dict[str, Any]:
        return self._native.resource_attributes()

    @property
    def sampler_description(self) -> str:
        return self._native.sampler_description()

    def exported_spans(self) -> List[Dict[str, Any]]:
        """The spans an `InMemoryExporter` received, as dicts (call `force_flush` first)."""
        return self._native.memory_spans()

    def clear_exported_spans(self) -> None:
        self._native.memory_reset()

    def _after_fork_child(self) -> None:
        if not self._is_shutdown:
            self._native.after_fork_child()

