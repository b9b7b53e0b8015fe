#!/bin/sh
# One-shot: make the commit coordinator's TLS material and bearer tokens for the compose stack.
#
# The coordinator refuses plaintext on a non-loopback address, so in containers it serves TLS with
# token authentication. This writes, once, into DIR (default /var/lib/inlet/secrets):
#   ca.pem                    a throwaway CA that clients trust
#   coordinator.pem/.key      the server certificate (SAN: coordinator, localhost, 127.0.0.1)
#   tokens.json               {"tokens": [{"name": "writer", "token": ..., "tables": ["*"]}]}
#   writer.token              the writer's bearer token alone ($WRITER_TOKEN, else a random one)
# Existing files are kept (restarts do not rotate them). Production: bring your own certificates
# (cert-manager, a corporate CA) and tokens; see deploy/README.md.
set -eu
DIR="${1:-/var/lib/inlet/secrets}"
SAN="${INLET_SECRETS_SAN:-DNS:coordinator,DNS:localhost,IP:127.0.0.1}"
mkdir -p "$DIR"
cd "$DIR"
umask 077
if [ -s coordinator.pem ] && [ -s coordinator.key ] && [ -s tokens.json ]; then
    echo "init-secrets: $DIR already has the coordinator's certificate and tokens"
    exit 0
fi
openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -days 3650 \
    -subj "/CN=inlet-compose-ca" -keyout ca.key -out ca.pem 2>/dev/null
openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -days 825 \
    -subj "/CN=coordinator" -addext "subjectAltName=$SAN" \
    -addext "extendedKeyUsage=serverAuth" -CA ca.pem -CAkey ca.key \
    -keyout coordinator.key -out coordinator.pem 2>/dev/null
rm -f ca.key
token="${WRITER_TOKEN:-$(openssl rand -hex 32)}"
printf '%s' "$token" > writer.token
printf '{"tokens": [{"name": "writer", "token": "%s", "tables": ["*"]}]}\n' "$token" > tokens.json
chmod 0444 ca.pem coordinator.pem
chmod 0400 coordinator.key tokens.json writer.token
echo "init-secrets: wrote ca.pem, coordinator.pem, coordinator.key, tokens.json, writer.token to $DIR"
