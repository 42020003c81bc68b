#!/usr/bin/env bash
# Regenerates the TLS tests' certificates (crates/server/tests/tls.rs, interop): a CA, a server
# certificate for 127.0.0.1 / localhost, a client certificate the CA signs, and a client
# certificate from another CA (one the server must refuse). EC P-256 keys, valid 100 years.
set -euo pipefail
cd "$(dirname "$0")"
days=36500
ec() { openssl ecparam -name prime256v1 -genkey -noout -out "$1"; }
ext=$(mktemp)
trap 'rm -f "$ext" ./*.csr ./*.srl' EXIT

ec ca.key
openssl req -x509 -new -key ca.key -sha256 -days $days -subj "/CN=Quicksilver Test CA" -out ca.pem
ec other-ca.key
openssl req -x509 -new -key other-ca.key -sha256 -days $days -subj "/CN=Another CA" -out other-ca.pem

ec server.key
openssl req -new -key server.key -subj "/O=Quicksilver/OU=Test Server/CN=localhost" -out server.csr
printf 'subjectAltName=DNS:localhost,IP:127.0.0.1\nbasicConstraints=CA:FALSE\nextendedKeyUsage=serverAuth\n' >"$ext"
openssl x509 -req -in server.csr -CA ca.pem -CAkey ca.key -CAcreateserial -days $days -sha256 -extfile "$ext" -out server.pem

ec server2.key
openssl req -new -key server2.key -subj "/O=Quicksilver/OU=Refreshed Server/CN=localhost" -out server2.csr
openssl x509 -req -in server2.csr -CA ca.pem -CAkey ca.key -CAcreateserial -days $days -sha256 -extfile "$ext" -out server2.pem

printf 'basicConstraints=CA:FALSE\nextendedKeyUsage=clientAuth\n' >"$ext"
ec client.key
openssl req -new -key client.key -subj "/O=Quicksilver/CN=client.test" -out client.csr
openssl x509 -req -in client.csr -CA ca.pem -CAkey ca.key -CAcreateserial -days $days -sha256 -extfile "$ext" -out client.pem
ec rogue.key
openssl req -new -key rogue.key -subj "/CN=rogue.test" -out rogue.csr
openssl x509 -req -in rogue.csr -CA other-ca.pem -CAkey other-ca.key -CAcreateserial -days $days -sha256 -extfile "$ext" -out rogue.pem
rm -f ca.key other-ca.key
