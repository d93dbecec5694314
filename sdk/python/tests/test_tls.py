"""OTLP export over TLS (`https://`), HTTP and gRPC, against local servers whose certificates
come from a CA made in the test (trustme): trust from `certificate_file` /
`OTEL_EXPORTER_OTLP_CERTIFICATE`, mutual TLS from the client certificate and key variables,
and `OTEL_EXPORTER_OTLP_INSECURE` for scheme-less gRPC endpoints, as the official SDK reads them."""

from __future__ import annotations

import ssl
from pathlib import Path
from typing import Iterator, Tuple

import grpc
import pytest
import trustme

import weft_sdk
from conftest import Receiver, wait_for
from test_export import GrpcReceiver

SERVER_NAMES = ("127.0.0.1", "localhost")


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Tuple[trustme.CA, trustme.LeafCert, Path]:
    """A CA, a server certificate for 127.0.0.1 and its files; a client certificate too."""
    ca = trustme.CA()
    server = ca.issue_cert(*SERVER_NAMES)
    d = tmp_path_factory.mktemp("pki")
    ca.cert_pem.write_to_path(str(d / "ca.pem"))
    client = ca.issue_cert("weft-client@example.com")
    client.cert_chain_pems[0].write_to_path(str(d / "client.pem"))
    client.private_key_pem.write_to_path(str(d / "client.key"))
    server.private_key_and_cert_chain_pem.write_to_path(str(d / "server.pem"))
    other = trustme.CA()  # a CA the exporter does not trust
    other.cert_pem.write_to_path(str(d / "other-ca.pem"))
    return ca, server, d


def server_context(pki: Tuple[trustme.CA, trustme.LeafCert, Path], client_auth: bool) -> ssl.SSLContext:
    ca, server, d = pki
    ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    server.configure_cert(ctx)
    ctx.set_alpn_protocols(["http/1.1"])
    if client_auth:
        ca.configure_trust(ctx)
        ctx.verify_mode = ssl.CERT_REQUIRED
    return ctx


@pytest.fixture
def clean_env(monkeypatch: pytest.MonkeyPatch) -> Iterator[pytest.MonkeyPatch]:
    for k in ("CERTIFICATE", "CLIENT_CERTIFICATE", "CLIENT_KEY", "INSECURE", "ENDPOINT", "PROTOCOL"):
        monkeypatch.delenv(f"OTEL_EXPORTER_OTLP_{k}", raising=False)
        monkeypatch.delenv(f"OTEL_EXPORTER_OTLP_TRACES_{k}", raising=False)
    yield monkeypatch


def provider(exporter: weft_sdk.OTLPExporter) -> weft_sdk.TracerProvider:
    return weft_sdk.TracerProvider(
        resource={"service.name": "tls"},
        sampler=weft_sdk.sampling.ALWAYS_ON,
        exporter=exporter,
        schedule_delay=0.05,
        shutdown_on_exit=False,
    )


def one_span(p: weft_sdk.TracerProvider, name: str = "over-tls") -> None:
    p.get_tracer("t").start_span(name).end()


def test_https_with_the_ca_from_the_argument_and_from_the_environment(
    pki: Tuple[trustme.CA, trustme.LeafCert, Path], clean_env: pytest.MonkeyPatch
) -> None:
    d = pki[2]
    r = Receiver(server_context(pki, client_auth=False))
    try:
        p = provider(weft_sdk.OTLPExporter(endpoint=r.url, certificate_file=str(d / "ca.pem")))
        one_span(p, "from-argument")
        assert p.force_flush(10_000) and p.shutdown()
        clean_env.setenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", r.url)
        clean_env.setenv("OTEL_EXPORTER_OTLP_CERTIFICATE", str(d / "ca.pem"))
        p = provider(weft_sdk.OTLPExporter())
        one_span(p, "from-environment")
        assert p.force_flush(10_000) and p.shutdown()
        wait_for(lambda: len(r.spans()) == 2, what="2 spans over https")
        assert sorted(s.name for _, _, s in r.spans()) == ["from-argument", "from-environment"]
    finally:
        r.close()


def test_an_untrusted_server_gets_nothing(pki: Tuple[trustme.CA, trustme.LeafCert, Path], clean_env: pytest.MonkeyPatch) -> None:
    d = pki[2]
    r = Receiver(server_context(pki, client_auth=False))
    try:
        p = provider(weft_sdk.OTLPExporter(endpoint=r.url, certificate_file=str(d / "other-ca.pem"), timeout=1))
        one_span(p)
        p.force_flush(5_000)
        assert p.stats()["dropped"] == 1 and r.spans() == []
        p.shutdown()
    finally:
        r.close()


def test_mutual_tls(pki: Tuple[trustme.CA, trustme.LeafCert, Path], clean_env: pytest.MonkeyPatch) -> None:
    d = pki[2]
    r = Receiver(server_context(pki, client_auth=True))
    try:
        # Without a client certificate the server refuses the handshake.
        p = provider(weft_sdk.OTLPExporter(endpoint=r.url, certificate_file=str(d / "ca.pem"), timeout=1))
        one_span(p, "anonymous")
        p.force_flush(5_000)
        assert p.stats()["dropped"] == 1
        p.shutdown()
        clean_env.setenv("OTEL_EXPORTER_OTLP_CERTIFICATE", str(d / "ca.pem"))
        clean_env.setenv("OTEL_EXPORTER_OTLP_CLIENT_CERTIFICATE", str(d / "client.pem"))
        clean_env.setenv("OTEL_EXPORTER_OTLP_TRACES_CLIENT_KEY", str(d / "client.key"))
        p = provider(weft_sdk.OTLPExporter(endpoint=r.url))
        one_span(p, "with-client-cert")
        assert p.force_flush(10_000) and p.stats()["exported"] == 1
        p.shutdown()
        assert [s.name for _, _, s in r.spans()] == ["with-client-cert"]
    finally:
        r.close()


def test_grpc_over_tls_and_insecure(pki: Tuple[trustme.CA, trustme.LeafCert, Path], clean_env: pytest.MonkeyPatch) -> None:
    ca, server, d = pki
    creds = grpc.ssl_server_credentials(
        [(server.private_key_pem.bytes(), b"".join(c.bytes() for c in server.cert_chain_pems))],
        root_certificates=ca.cert_pem.bytes(),
        require_client_auth=True,
    )
    secure = GrpcReceiver(creds)
    plain = GrpcReceiver()
    try:
        clean_env.setenv("OTEL_EXPORTER_OTLP_CERTIFICATE", str(d / "ca.pem"))
        clean_env.setenv("OTEL_EXPORTER_OTLP_CLIENT_CERTIFICATE", str(d / "client.pem"))
        clean_env.setenv("OTEL_EXPORTER_OTLP_CLIENT_KEY", str(d / "client.key"))
        for endpoint, name in ((f"https://localhost:{secure.port}", "https-url"), (f"127.0.0.1:{secure.port}", "no-scheme")):
            p = provider(weft_sdk.OTLPExporter(endpoint=endpoint, protocol="grpc"))
            one_span(p, name)
            assert p.force_flush(10_000) and p.stats()["exported"] == 1, (endpoint, p.stats())
            p.shutdown()
        assert sorted(s.name for _, _, s in secure.spans()) == ["https-url", "no-scheme"]
        # A scheme-less endpoint with OTEL_EXPORTER_OTLP_INSECURE=true speaks plaintext.
        clean_env.setenv("OTEL_EXPORTER_OTLP_INSECURE", "true")
        p = provider(weft_sdk.OTLPExporter(endpoint=f"127.0.0.1:{plain.port}", protocol="grpc"))
        one_span(p, "insecure")
        assert p.force_flush(10_000) and p.stats()["exported"] == 1
        p.shutdown()
        assert [s.name for _, _, s in plain.spans()] == ["insecure"]
    finally:
        secure.server.stop(0)
        plain.server.stop(0)


def test_bad_tls_settings_are_clear_errors(pki: Tuple[trustme.CA, trustme.LeafCert, Path], clean_env: pytest.MonkeyPatch) -> None:
    d = pki[2]
    with pytest.raises(ValueError, match="missing.pem"):
        provider(weft_sdk.OTLPExporter(endpoint="https://127.0.0.1:1/v1/traces", certificate_file=str(d / "missing.pem")))
    with pytest.raises(ValueError, match="client certificate needs its key"):
        provider(
            weft_sdk.OTLPExporter(
                endpoint="https://127.0.0.1:1/v1/traces",
                certificate_file=str(d / "ca.pem"),
                client_certificate_file=str(d / "client.pem"),
            )
        )
