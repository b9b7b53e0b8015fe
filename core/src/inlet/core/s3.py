"""Tables on S3-compatible object stores: where the store is, how to sign for it, conditional writes.

:class:`S3Options` is the one place S3 settings live. They come from the usual AWS environment
(``AWS_ACCESS_KEY_ID``, ``AWS_SECRET_ACCESS_KEY``, ``AWS_SESSION_TOKEN``, ``AWS_REGION`` /
``AWS_DEFAULT_REGION``, ``AWS_ENDPOINT_URL_S3`` / ``AWS_ENDPOINT_URL``) plus Inlet's own
``INLET_S3_PATH_STYLE``, or explicitly (the services' ``--s3-*`` flags write them into the
environment with :meth:`S3Options.to_env`, so subprocesses see them too). Spark executors get them
with their tasks, not from their environment (see :mod:`inlet.core.spark.executors`).

Object stores have no rename and no lock. A table's lock on S3 is an object created with
``If-None-Match: *`` and released with ``If-Match: <etag>`` (see :mod:`inlet.core.commit.locks`);
pyarrow cannot send those headers, so :class:`ConditionalS3` signs the few conditional requests
itself (AWS Signature V4), with the options' keys or, without them, the AWS default credential chain
(:func:`credentials`: a profile, container or instance role, web identity, as pyarrow finds them). A
store that ignores the headers is detected once per bucket (:meth:`ConditionalS3.supported`), and
local-lock writers are then refused.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import hmac
import http.client
import os
import threading
import urllib.parse
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

import pyarrow.fs as pafs

from inlet.core.config import ConfigKey, parse_bool
from inlet.core.errors import InvalidConfigError
from inlet.core.storage_requests import RequestCounts

_S3_INIT = threading.Lock()


def new_s3_filesystem(**kwargs: object) -> pafs.S3FileSystem:
    """``pyarrow.fs.S3FileSystem(**kwargs)``, one construction at a time after the AWS SDK is initialised:
    its first use from two threads at once can segfault (apache/arrow#39703), and the coordinator and
    writers open S3 tables from several threads."""
    with _S3_INIT:
        pafs.ensure_s3_initialized()
        return pafs.S3FileSystem(**kwargs)


#: URI schemes read as S3 (``s3a://`` is what Hadoop and Apache Hudi's catalogs register).
S3_SCHEMES = ("s3://", "s3a://", "s3n://")


def is_s3_uri(uri: str) -> bool:
    return uri.lower().startswith(S3_SCHEMES)


def split_s3_uri(uri: str) -> tuple[str, str]:
    """``s3://bucket/a/b`` -> (``bucket``, ``a/b``)."""
    rest = uri.split("://", 1)[1]
    bucket, _, key = rest.partition("/")
    if not bucket:
        raise InvalidConfigError(f"S3 URI {uri!r} names no bucket (expected s3://BUCKET/PREFIX)")
    return bucket, key.strip("/")


class S3Config:
    """Typed keys of the S3 settings (the environment variable each is read from)."""

    ENDPOINT = ConfigKey[str](
        "AWS_ENDPOINT_URL_S3",
        str,
        doc="S3 endpoint URL for S3-compatible stores (http://host:port); AWS when unset",
        alternatives=("AWS_ENDPOINT_URL",),
    )
    REGION = ConfigKey[str]("AWS_REGION", str, doc="region", alternatives=("AWS_DEFAULT_REGION",))
    ACCESS_KEY = ConfigKey[str]("AWS_ACCESS_KEY_ID", str, doc="access key id")
    SECRET_KEY = ConfigKey[str]("AWS_SECRET_ACCESS_KEY", str, doc="secret access key")
    SESSION_TOKEN = ConfigKey[str]("AWS_SESSION_TOKEN", str, doc="session token (temporary credentials)")
    PATH_STYLE = ConfigKey[bool](
        "INLET_S3_PATH_STYLE",
        parse_bool,
        doc="path-style requests (http://endpoint/bucket/key); default: true with an endpoint, else false",
    )


#: Hadoop S3A's names of the S3 options (what Apache Hudi on Spark reads from ``fs.s3a.*``)
HADOOP_OPTIONS = {
    "endpoint": "fs.s3a.endpoint",
    "region": "fs.s3a.endpoint.region",
    "access_key": "fs.s3a.access.key",
    "secret_key": "fs.s3a.secret.key",
    "session_token": "fs.s3a.session.token",
    "path_style": "fs.s3a.path.style.access",
}


@dataclass(frozen=True)
class S3Options:
    """Endpoint, region, credentials and addressing of an S3-compatible store."""

    endpoint: str | None = None
    region: str | None = None
    access_key: str | None = None
    secret_key: str | None = field(default=None, repr=False)
    session_token: str | None = field(default=None, repr=False)
    path_style: bool | None = None

    def __post_init__(self) -> None:
        if self.endpoint is not None and not self.endpoint.startswith(("http://", "https://")):
            raise InvalidConfigError(f"S3 endpoint must be an http(s) URL, got {self.endpoint!r}")
        if (self.access_key is None) != (self.secret_key is None):
            raise InvalidConfigError("S3 credentials need both an access key id and a secret access key")

    @classmethod
    def from_env(
        cls,
        env: Mapping[str, str] | None = None,
        *,
        endpoint: str | None = None,
        region: str | None = None,
        path_style: bool | None = None,
    ) -> S3Options:
        """Options from ``env`` (default ``os.environ``); the keyword arguments that are not None win."""
        e = {k: v for k, v in (os.environ if env is None else env).items() if v != ""}
        opts = cls(
            endpoint=S3Config.ENDPOINT.get(e),
            region=S3Config.REGION.get(e),
            access_key=S3Config.ACCESS_KEY.get(e),
            secret_key=S3Config.SECRET_KEY.get(e),
            session_token=S3Config.SESSION_TOKEN.get(e),
            path_style=S3Config.PATH_STYLE.get(e),
        )
        return replace(
            opts,
            endpoint=endpoint or opts.endpoint,
            region=region or opts.region,
            path_style=opts.path_style if path_style is None else path_style,
        )

    def to_env(self) -> dict[str, str]:
        """The environment variables that :meth:`from_env` reads back as these options."""
        out: dict[str, str] = {}
        if self.endpoint:
            out[S3Config.ENDPOINT.key] = self.endpoint
        if self.region:
            out[S3Config.REGION.key] = self.region
        if self.access_key and self.secret_key:
            out[S3Config.ACCESS_KEY.key] = self.access_key
            out[S3Config.SECRET_KEY.key] = self.secret_key
        if self.session_token:
            out[S3Config.SESSION_TOKEN.key] = self.session_token
        if self.path_style is not None:
            out[S3Config.PATH_STYLE.key] = str(self.path_style).lower()
        return out

    def hadoop_options(self) -> dict[str, str]:
        """These options under Hadoop S3A's names (:data:`HADOOP_OPTIONS`), as the Spark data source
        takes them; the secret's key names match Spark's redaction pattern."""
        values = {
            "endpoint": self.endpoint,
            "region": self.region,
            "access_key": self.access_key if self.secret_key else None,
            "secret_key": self.secret_key if self.access_key else None,
            "session_token": self.session_token,
            "path_style": None if self.path_style is None else str(self.path_style).lower(),
        }
        return {HADOOP_OPTIONS[k]: v for k, v in values.items() if v}

    def with_hadoop_options(self, options: Mapping[str, str]) -> S3Options:
        """These options, overridden by the Hadoop S3A names given in ``options``."""
        given = {k: str(options[name]) for k, name in HADOOP_OPTIONS.items() if options.get(name)}
        if not given:
            return self
        path_style = given.pop("path_style", None)
        out = replace(self, **given)  # type: ignore[arg-type]
        return out if path_style is None else replace(out, path_style=parse_bool(path_style))

    @property
    def uses_path_style(self) -> bool:
        return self.path_style if self.path_style is not None else self.endpoint is not None

    @property
    def effective_region(self) -> str:
        return self.region or "us-east-1"

    def filesystem(self) -> pafs.S3FileSystem:
        """A pyarrow S3 filesystem (paths ``bucket/key``); credentials fall back to the AWS chain."""
        kwargs: dict[str, object] = {
            "region": self.effective_region,
            "force_virtual_addressing": not self.uses_path_style,
            "connect_timeout": 10,
            "request_timeout": 60,
        }
        if self.endpoint:
            scheme, _, host = self.endpoint.partition("://")
            kwargs["endpoint_override"] = host.rstrip("/")
            kwargs["scheme"] = scheme
        if self.access_key and self.secret_key:
            kwargs["access_key"] = self.access_key
            kwargs["secret_key"] = self.secret_key
            if self.session_token:
                kwargs["session_token"] = self.session_token
        return new_s3_filesystem(**kwargs)

    def hudi_rs_options(self) -> dict[str, str]:
        """Storage options for hudi-rs / the Rust ``object_store`` crate (``aws_*`` keys)."""
        out: dict[str, str] = {"aws_region": self.effective_region}
        if self.endpoint:
            out["aws_endpoint_url"] = self.endpoint
            if self.endpoint.startswith("http://"):
                out["aws_allow_http"] = "true"
        if self.access_key and self.secret_key:
            out["aws_access_key_id"] = self.access_key
            out["aws_secret_access_key"] = self.secret_key
        if self.session_token:
            out["aws_session_token"] = self.session_token
        out["aws_virtual_hosted_style_request"] = str(not self.uses_path_style).lower()
        return out


# -- credentials -------------------------------------------------------------------------------


@dataclass(frozen=True)
class Credentials:
    """Keys to sign one request with (temporary ones carry a session token)."""

    access_key: str
    secret_key: str = field(repr=False)
    session_token: str | None = field(default=None, repr=False)


_chain_guard = threading.Lock()
_chains: dict[tuple[tuple[str, str], ...], Any] = {}


def _default_chain() -> Any:
    """botocore's credential provider chain for this environment (one per set of ``AWS_*``
    variables, kept: temporary credentials are refreshed by it before they expire), or None."""
    import botocore.session  # imported on first use: only S3 writers without explicit keys need it

    env_key = tuple(sorted((k, v) for k, v in os.environ.items() if k.startswith("AWS_")))
    with _chain_guard:
        if env_key not in _chains:
            found = botocore.session.Session().get_credentials()
            if found is None:
                return None  # nothing found: looked for again next time
            _chains[env_key] = found
        return _chains[env_key]


def credentials(options: S3Options) -> Credentials:
    """The options' keys, else the AWS default credential chain, as the AWS SDK behind pyarrow's
    S3 file system finds them: the environment, ``AWS_PROFILE`` in the shared credentials and config
    files (``AWS_SHARED_CREDENTIALS_FILE``, ``AWS_CONFIG_FILE``; roles assumed and ``credential_process``
    included), web identity (``AWS_WEB_IDENTITY_TOKEN_FILE`` + ``AWS_ROLE_ARN``), the container's
    role (``AWS_CONTAINER_CREDENTIALS_*``) and the instance's role (IMDS)."""
    if options.access_key and options.secret_key:
        return Credentials(options.access_key, options.secret_key, options.session_token)
    chain = _default_chain()
    if chain is None:
        raise InvalidConfigError(
            "no S3 credentials: set AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY, a profile (AWS_PROFILE "
            "and ~/.aws/credentials or ~/.aws/config), or run with a container or instance role"
        )
    frozen = chain.get_frozen_credentials()  # refreshed first if they are about to expire
    return Credentials(frozen.access_key, frozen.secret_key, frozen.token)


# -- conditional requests ----------------------------------------------------------------------


@dataclass(frozen=True)
class Response:
    status: int
    body: bytes
    etag: str | None


class ConditionalS3:
    """Signed ``PUT``/``GET``/``DELETE`` with ``If-None-Match``/``If-Match`` on one bucket.

    Only for the few small objects whose writes must be conditional (the table lock), and for deletes
    (pyarrow's also checks the object first and recreates its parent "directory" as an empty object);
    everything else goes through pyarrow. Signed with :func:`credentials` (the options' keys, or the
    AWS default chain).
    """

    _probed: dict[tuple[str, str], bool] = {}
    _probe_guard = threading.Lock()

    def __init__(self, options: S3Options, bucket: str, counts: RequestCounts | None = None) -> None:
        credentials(options)  # none anywhere: a clear error now, not a 403 later
        self.options = options
        self.bucket = bucket
        region = options.effective_region
        endpoint = options.endpoint or f"https://s3.{region}.amazonaws.com"
        parsed = urllib.parse.urlsplit(endpoint)
        self._https = parsed.scheme == "https"
        host = parsed.netloc
        if not options.uses_path_style:
            host = f"{bucket}.{host}"
        self._host = host
        self._prefix = f"/{bucket}" if options.uses_path_style else ""
        self.counts = counts

    def _request(self, method: str, key: str, body: bytes = b"", headers: Mapping[str, str] = {}) -> Response:
        path = self._prefix + "/" + urllib.parse.quote(key, safe="/-_.~")
        now = dt.datetime.now(dt.UTC)
        amz_date = now.strftime("%Y%m%dT%H%M%SZ")
        day = now.strftime("%Y%m%d")
        payload_hash = hashlib.sha256(body).hexdigest()
        keys = credentials(self.options)
        h = {"host": self._host, "x-amz-date": amz_date, "x-amz-content-sha256": payload_hash}
        if keys.session_token:
            h["x-amz-security-token"] = keys.session_token
        h.update({k.lower(): v for k, v in headers.items()})
        signed = sorted(h)
        canonical = "\n".join(
            [method, path, "", "".join(f"{k}:{h[k]}\n" for k in signed), ";".join(signed), payload_hash]
        )
        region = self.options.effective_region
        scope = f"{day}/{region}/s3/aws4_request"
        to_sign = "\n".join(
            ["AWS4-HMAC-SHA256", amz_date, scope, hashlib.sha256(canonical.encode()).hexdigest()]
        )
        k = ("AWS4" + keys.secret_key).encode()
        for part in (day, region, "s3", "aws4_request"):
            k = hmac.new(k, part.encode(), hashlib.sha256).digest()
        signature = hmac.new(k, to_sign.encode(), hashlib.sha256).hexdigest()
        h["authorization"] = (
            f"AWS4-HMAC-SHA256 Credential={keys.access_key}/{scope}, "
            f"SignedHeaders={';'.join(signed)}, Signature={signature}"
        )
        conn_cls = http.client.HTTPSConnection if self._https else http.client.HTTPConnection
        conn = conn_cls(self._host, timeout=30)
        try:
            conn.request(method, path, body=body if method == "PUT" else None, headers=h)
            resp = conn.getresponse()
            data = resp.read()
            if self.counts is not None:
                self.counts.add(method)
            return Response(resp.status, data, resp.getheader("ETag"))
        finally:
            conn.close()

    def _check(self, resp: Response, what: str, ok: tuple[int, ...]) -> Response:
        if resp.status not in ok:
            detail = resp.body.decode("utf-8", "replace")[:300]
            raise OSError(f"S3 {what} on bucket {self.bucket!r} failed: HTTP {resp.status} {detail}")
        return resp

    def put_if_absent(self, key: str, data: bytes) -> str | None:
        """Create ``key``; its ETag, or None if it exists."""
        resp = self._check(self._request("PUT", key, data, {"If-None-Match": "*"}), "PUT", (200, 412))
        return resp.etag or "" if resp.status == 200 else None

    def put_if_match(self, key: str, data: bytes, etag: str) -> str | None:
        """Replace ``key`` if its ETag is still ``etag``; the new ETag, or None."""
        resp = self._check(self._request("PUT", key, data, {"If-Match": etag}), "PUT", (200, 404, 412))
        return resp.etag or "" if resp.status == 200 else None

    def get(self, key: str) -> Response | None:
        resp = self._check(self._request("GET", key), "GET", (200, 404))
        return resp if resp.status == 200 else None

    def delete(self, key: str) -> None:
        """Delete ``key`` (fine if it does not exist): one request."""
        self._check(self._request("DELETE", key), "DELETE", (204, 200, 404))

    def delete_if_match(self, key: str, etag: str) -> bool:
        resp = self._check(
            self._request("DELETE", key, headers={"If-Match": etag}), "DELETE", (204, 200, 404, 412)
        )
        return resp.status in (200, 204)

    def supported(self, probe_dir: str) -> bool:
        """Whether the store honours ``If-None-Match: *`` (probed once per endpoint and bucket)."""
        cache_key = (self.options.endpoint or "aws", self.bucket)
        with self._probe_guard:
            if cache_key in self._probed:
                return self._probed[cache_key]
            key = f"{probe_dir.strip('/')}/.inlet-conditional-probe-{uuid.uuid4().hex}"
            first = self.put_if_absent(key, b"1")
            second = self.put_if_absent(key, b"2")
            self._request("DELETE", key)
            result = first is not None and second is None
            self._probed[cache_key] = result
            return result
