#!/usr/bin/env bash
# Test certificates for the project's TLS servers (scripts/kafka-server.sh, scripts/s3-server.sh):
#
#   scripts/test-certs.sh DIR
#
# writes, with openssl (RSA 2048, valid two days): ca.pem and ca-key.pem (a test CA),
# server.pem and server-key.pem (signed by it, for 127.0.0.1 and localhost), client.pem and
# client-key.pem (a client certificate signed by it, for mTLS), and other-ca.pem (a CA that
# signed nothing here: an untrusted one). Keys are PKCS#8, unencrypted. Does nothing if DIR
# already holds them.
set -euo pipefail
t="${1:?usage: $0 DIR}"
[[ -s "$t/server.pem" && -s "$t/client.pem" && -s "$t/other-ca.pem" ]] && exit 0
command -v openssl >/dev/null || { echo "[test-certs] openssl is not on PATH" >&2; exit 1; }
mkdir -p "$t"
ca=(-addext "basicConstraints=critical,CA:TRUE" -addext "keyUsage=critical,keyCertSign,cRLSign")
openssl req -x509 -newkey rsa:2048 -nodes -days 2 -subj "/CN=weft test CA" "${ca[@]}" \
    -keyout "$t/ca-key.pem" -out "$t/ca.pem" 2>/dev/null
openssl req -x509 -newkey rsa:2048 -nodes -days 2 -subj "/CN=weft untrusted CA" "${ca[@]}" \
    -keyout "$t/other-ca-key.pem" -out "$t/other-ca.pem" 2>/dev/null
for who in server client; do
    openssl req -newkey rsa:2048 -nodes -subj "/CN=weft test $who" \
        -keyout "$t/$who-key.pem" -out "$t/$who.csr" 2>/dev/null
    printf 'basicConstraints=CA:FALSE\nsubjectAltName=IP:127.0.0.1,DNS:localhost\n' >"$t/$who.ext"
    openssl x509 -req -in "$t/$who.csr" -CA "$t/ca.pem" -CAkey "$t/ca-key.pem" -CAcreateserial \
        -days 2 -extfile "$t/$who.ext" -out "$t/$who.pem" 2>/dev/null
done
[[ -s "$t/server.pem" && -s "$t/client.pem" ]] || { echo "[test-certs] openssl wrote no certificates in $t" >&2; exit 1; }
