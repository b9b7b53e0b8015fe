#!/bin/sh
# One-shot: make the commit coordinator's TLS material and bearer tokens for the compose stack.
#
# The coordinator refuses plaintext on a non-loopback address, so in containers it serves TLS with
# token authentication. This writes, once, into DIR (default /var/lib/inlet/secrets):
#   ca.pem                    a throwaway CA that clients trust
#   coordinator.pem/.key      the server certificate (SAN: coordinator, localhost, 127.0.0.1)
#   tokens.json               {"tokens": [{"name": "writer", "token": ..., "tables": ["*"]}, ...]}
#   writer.token              the writer's bearer token alone ($WRITER_TOKEN, else a random one)
#   table-services.token      the table services' token ($TABLE_SERVICES_TOKEN, else a random one)
# Existing certificates and token files are kept (restarts do not rotate them). Production: bring
# your own certificates (cert-manager, a corporate CA) and tokens; see docs/deployment.md.
set -eu
DIR="${1:-/var/lib/inlet/secrets}"
SAN="${INLET_SECRETS_SAN:-DNS:coordinator,DNS:localhost,IP:127.0.0.1}"
mkdir -p "$DIR"
cd "$DIR"
umask 077
if [ -s coordinator.pem ] && [ -s coordinator.key ]; then
    echo "init-secrets: $DIR already has the coordinator's certificate"
else
    openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -days 3650 \
        -subj "/CN=inlet-compose-ca" -keyout ca.key -out ca.pem 2>/dev/null
    openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -days 825 \
        -subj "/CN=coordinator" -addext "subjectAltName=$SAN" \
        -addext "extendedKeyUsage=serverAuth" -CA ca.pem -CAkey ca.key \
        -keyout coordinator.key -out coordinator.pem 2>/dev/null
    rm -f ca.key
    chmod 0444 ca.pem coordinator.pem
    chmod 0400 coordinator.key
    echo "init-secrets: wrote ca.pem, coordinator.pem, coordinator.key to $DIR"
fi
# One token per client (kept once made); tokens.json lists them all, so a client added later gets
# its token on the next run, and the coordinator picks the new file up without a restart.
token_file() {  # NAME VALUE: NAME.token, from VALUE (else random) unless it exists
    if [ ! -s "$1.token" ]; then
        printf '%s' "${2:-$(openssl rand -hex 32)}" > "$1.token"
        chmod 0400 "$1.token"
    fi
}
token_file writer "${WRITER_TOKEN:-}"
token_file table-services "${TABLE_SERVICES_TOKEN:-}"
{
    printf '{"tokens": ['
    sep=""
    for name in writer table-services; do
        printf '%s{"name": "%s", "token": "%s", "tables": ["*"]}' "$sep" "$name" "$(cat "$name.token")"
        sep=", "
    done
    printf ']}\n'
} > tokens.json.tmp
chmod 0400 tokens.json.tmp
mv -f tokens.json.tmp tokens.json
echo "init-secrets: wrote tokens.json (writer, table-services) to $DIR"
