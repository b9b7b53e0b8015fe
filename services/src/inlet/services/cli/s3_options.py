"""``--s3-endpoint``, ``--s3-region``, ``--s3-path-style``: where ``s3://`` lake roots and tables live.

Every command takes them (before or after its name). They are written into this process's
environment as the variables :class:`inlet.core.s3.S3Options` reads (``AWS_ENDPOINT_URL_S3``,
``AWS_REGION``, ``INLET_S3_PATH_STYLE``), so everything the command starts (Spark's Python workers,
subprocesses) reaches the same store; Spark executors get them with their tasks. Credentials come
from ``AWS_ACCESS_KEY_ID`` / ``AWS_SECRET_ACCESS_KEY`` or the AWS default chain (a profile, an
instance or container role); never a flag: flags show in process listings.
"""

from __future__ import annotations

import argparse
import os
from typing import Any

from inlet.core.s3 import S3Config, S3Options


def add_s3_options(parser: Any, suppress: bool = False) -> None:
    default = argparse.SUPPRESS if suppress else None
    g = parser.add_argument_group("object store (s3:// paths and lake roots)")
    g.add_argument(
        "--s3-endpoint",
        metavar="URL",
        default=default,
        help="S3 endpoint of an S3-compatible store, e.g. http://127.0.0.1:8333 (default: AWS) "
        f"[env: {S3Config.ENDPOINT.key} or {S3Config.ENDPOINT.alternatives[0]}]; credentials from "
        f"{S3Config.ACCESS_KEY.key} and {S3Config.SECRET_KEY.key} or a profile (AWS_PROFILE)",
    )
    g.add_argument(
        "--s3-region",
        metavar="REGION",
        default=default,
        help=f"S3 region (default us-east-1) [env: {S3Config.REGION.key}]",
    )
    g.add_argument(
        "--s3-path-style",
        action=argparse.BooleanOptionalAction,
        default=default,
        help="path-style requests (http://endpoint/bucket/key); default: on with --s3-endpoint, "
        f"off on AWS [env: {S3Config.PATH_STYLE.key}]",
    )


def apply_s3_options(args: argparse.Namespace) -> None:
    """Put the given ``--s3-*`` flags into the environment (checked: a bad endpoint is an error)."""
    endpoint = getattr(args, "s3_endpoint", None)
    region = getattr(args, "s3_region", None)
    path_style = getattr(args, "s3_path_style", None)
    if endpoint is None and region is None and path_style is None:
        return
    options = S3Options.from_env(endpoint=endpoint, region=region, path_style=path_style)
    os.environ.update(options.to_env())
