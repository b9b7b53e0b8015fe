"""How catalog sync reaches a metastore: plaintext Thrift, TLS, SASL (Kerberos GSSAPI or PLAIN), or SASL over TLS.

A company metastore runs with Hive's ``hive.metastore.use.SSL=true`` (a keystore on the server; the client
trusts its CA), with ``hive.metastore.sasl.enabled=true`` (Kerberos: principal ``hive/_HOST@REALM``; the
client authenticates from its ticket cache or ``KRB5_CLIENT_KTNAME`` keytab), or, from Hive 4, with
``metastore.authentication=LDAP|CONFIG`` (SASL PLAIN, user and password). :class:`MetastoreSecurity` holds
the client's side of that; :func:`open_transport` opens the matching Thrift transport (thrift's
``TSSLSocket`` for TLS, ``thrift_sasl`` with ``pure-sasl`` for SASL) and :func:`explain` turns what a
mismatch looks like on the wire (a closed connection, a handshake that never comes) into one line naming
the likely cause.
"""

from __future__ import annotations

import logging
import socket
import ssl
import struct
from dataclasses import dataclass
from typing import Any

from inlet.services.catalog_sync.errors import CatalogSyncError

SASL_MECHANISMS = ("none", "kerberos", "plain")
DEFAULT_KERBEROS_SERVICE = "hive"

# thrift logs every failed connect / TLS setup at ERROR before raising; the raised error is reported instead
for _name in ("thrift.transport.TSocket", "thrift.transport.TSSLSocket"):
    logging.getLogger(_name).setLevel(logging.CRITICAL)


@dataclass(frozen=True)
class MetastoreSecurity:
    """The client's side of the metastore's security settings (the default: plaintext, no SASL)."""

    tls: bool = False  # TLS with the system's trusted CAs unless ``ca`` is given
    ca: str | None = None  # PEM file of the CA that signed the metastore's certificate (turns TLS on)
    cert: str | None = None  # PEM client certificate (chain), for a metastore that asks for one
    key: str | None = None  # its private key (default: in ``cert``)
    sasl: str = "none"  # none | kerberos | plain
    kerberos_service: str = DEFAULT_KERBEROS_SERVICE  # the ``hive`` of ``hive/_HOST@REALM``
    kerberos_host: str | None = None  # the ``_HOST`` (default: the URI's host)
    user: str | None = None  # SASL PLAIN
    password: str | None = None

    def __post_init__(self) -> None:
        if self.sasl not in SASL_MECHANISMS:
            raise CatalogSyncError(
                f"metastore SASL {self.sasl!r}: expected one of {', '.join(SASL_MECHANISMS)}"
            )
        if (self.cert or self.key) and not self.use_tls:
            raise CatalogSyncError(
                "a metastore client certificate needs TLS (--metastore-tls or --metastore-ca)"
            )
        if self.key and not self.cert:
            raise CatalogSyncError("--metastore-key needs --metastore-cert")
        if self.sasl == "plain" and (not self.user or self.password is None):
            raise CatalogSyncError("metastore SASL plain needs a user and a password")
        if self.sasl != "plain" and (self.user or self.password):
            raise CatalogSyncError("a metastore user and password are for --metastore-sasl plain")

    @property
    def use_tls(self) -> bool:
        return self.tls or bool(self.ca)

    def describe(self) -> str:
        """``plaintext``, ``TLS``, ``SASL kerberos``, ``SASL plain over TLS``, ..."""
        parts = [] if self.sasl == "none" else [f"SASL {self.sasl}"]
        if self.use_tls:
            parts.append("TLS" if not parts else "over TLS")
        return " ".join(parts) or "plaintext"


def _ssl_context(security: MetastoreSecurity) -> ssl.SSLContext:
    try:
        context = ssl.create_default_context(cafile=security.ca)
    except (OSError, ssl.SSLError) as e:
        raise CatalogSyncError(f"--metastore-ca {security.ca}: cannot load it: {e}") from None
    if security.cert:
        try:
            context.load_cert_chain(security.cert, security.key)
        except (OSError, ssl.SSLError) as e:
            raise CatalogSyncError(f"--metastore-cert {security.cert}: cannot load it: {e}") from None
    return context


class _PureSaslClient:
    """``pure-sasl``'s client behind the interface ``thrift_sasl`` calls (that of the ``sasl`` package)."""

    def __init__(self, host: str, service: str, mechanism: str, **props: Any) -> None:
        from puresasl.client import SASLClient

        self._client = SASLClient(host, service=service, mechanism=mechanism, **props)
        self._error: str | None = None

    def start(self, mechanism: str) -> tuple[bool, str, bytes | None]:
        try:
            return True, mechanism, self._client.process() or b""
        except Exception as e:  # pure-sasl and kerberos raise their own errors
            self._error = str(e) or type(e).__name__
            return False, mechanism, None

    def step(self, challenge: bytes) -> tuple[bool, bytes | None]:
        try:
            return True, self._client.process(challenge) or b""
        except Exception as e:
            self._error = str(e) or type(e).__name__
            return False, None

    def encode(self, data: bytes) -> tuple[bool, bytes]:
        wrapped = self._client.wrap(data)
        # unchanged (QOP auth): thrift_sasl frames it itself; else it expects the frame's length header
        return True, wrapped if wrapped == data else struct.pack(">I", len(wrapped)) + wrapped

    def decode(self, data: bytes) -> tuple[bool, bytes]:
        return True, self._client.unwrap(data[4:])

    def getError(self) -> str | None:  # the name thrift_sasl calls
        return self._error


def _sasl_factory(host: str, security: MetastoreSecurity) -> tuple[Any, str]:
    if security.sasl == "kerberos":
        from puresasl.mechanisms import have_kerberos

        if not have_kerberos:
            raise CatalogSyncError(
                "--metastore-sasl kerberos needs the Python package 'kerberos' (MIT Kerberos bindings: "
                "pip install 'inlet-services[kerberos]', with the krb5 development files)"
            )
        service_host = security.kerberos_host or host
        return (lambda: _PureSaslClient(service_host, security.kerberos_service, "GSSAPI")), "GSSAPI"
    return (
        lambda: _PureSaslClient(host, "hive", "PLAIN", username=security.user, password=security.password)
    ), "PLAIN"


def open_transport(host: str, port: int, timeout_s: float, security: MetastoreSecurity) -> Any:
    """An opened Thrift transport to ``host:port`` as ``security`` says (raises thrift/socket/ssl errors)."""
    from thrift.transport import TSocket, TSSLSocket, TTransport

    sock: Any
    if security.use_tls:
        sock = TSSLSocket.TSSLSocket(host, port, ssl_context=_ssl_context(security), server_hostname=host)
    else:
        sock = TSocket.TSocket(host, port)
    sock.setTimeout(int(timeout_s * 1000))
    transport: Any
    if security.sasl == "none":
        transport = TTransport.TBufferedTransport(sock)
    else:
        from thrift_sasl import TSaslClientTransport

        factory, mechanism = _sasl_factory(host, security)
        transport = TSaslClientTransport(factory, mechanism, sock)
    transport.open()
    return transport


def _causes(exc: BaseException) -> list[BaseException]:
    out: list[BaseException] = []
    seen: BaseException | None = exc
    while seen is not None and seen not in out:
        out.append(seen)
        seen = getattr(seen, "inner", None) or seen.__cause__ or seen.__context__
    return out


def explain(exc: BaseException, security: MetastoreSecurity, timeout_s: float) -> str:
    """What a transport failure likely means, given the client's ``security`` (one line; '' if nothing to add).

    Called only for a failure before the first answer on a connection. A TLS client meets a plaintext
    server as a handshake that never completes (the server waits for a Thrift call); a plaintext client
    meets a TLS or SASL server as a closed connection or a reply that is no Thrift message; a SASL client
    meets a plaintext server as a connection closed (or silent) at the SASL start.
    """
    from thrift.transport.TTransport import TTransportException

    causes = _causes(exc)
    if any(isinstance(c, ssl.SSLCertVerificationError) for c in causes):
        return (
            "the metastore's certificate is not trusted or does not name this host "
            "(give its CA with --metastore-ca)"
        )
    if any(isinstance(c, ConnectionRefusedError) for c in causes):
        return ""
    timed_out = any(isinstance(c, (socket.timeout, TimeoutError)) for c in causes) or any(
        isinstance(c, TTransportException) and c.type == TTransportException.TIMED_OUT for c in causes
    )
    ssl_error = any(isinstance(c, ssl.SSLError) for c in causes)
    if security.use_tls and timed_out:
        return (
            f"no TLS handshake within {timeout_s:g}s: does the metastore serve plaintext "
            "(hive.metastore.use.SSL=false)? then drop --metastore-tls/--metastore-ca"
        )
    closed = any(isinstance(c, (ssl.SSLEOFError, ConnectionResetError, BrokenPipeError)) for c in causes)
    if security.use_tls and ssl_error and closed:
        return (
            "the metastore closed the connection in the TLS handshake: does it serve plaintext "
            "(hive.metastore.use.SSL=false)? then drop --metastore-tls/--metastore-ca"
        )
    if security.use_tls and ssl_error:
        return "the TLS handshake failed: does the metastore serve TLS (hive.metastore.use.SSL=true)?"
    if security.sasl != "none":
        return (
            f"no SASL {security.sasl} handshake: does the metastore use SASL (hive.metastore.sasl.enabled, "
            "metastore.authentication), with these credentials? else drop --metastore-sasl"
        )
    return (
        "no answer to a plain Thrift call: does the metastore require TLS (hive.metastore.use.SSL: "
        "--metastore-tls/--metastore-ca) or SASL (hive.metastore.sasl.enabled: --metastore-sasl kerberos)?"
    )
