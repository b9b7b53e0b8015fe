"""S3 settings: read from the AWS environment, written back, handed to hudi-rs; bad ones refused."""

from __future__ import annotations

import pytest

from inlet.core.errors import InvalidConfigError
from inlet.core.s3 import S3Options, split_s3_uri

ENV = {
    "AWS_ENDPOINT_URL": "http://127.0.0.1:8333",
    "AWS_DEFAULT_REGION": "eu-west-1",
    "AWS_ACCESS_KEY_ID": "key",
    "AWS_SECRET_ACCESS_KEY": "secret",
}


def test_options_from_the_aws_environment_and_back() -> None:
    opts = S3Options.from_env(ENV)
    assert (opts.endpoint, opts.region, opts.access_key, opts.secret_key) == (
        "http://127.0.0.1:8333",
        "eu-west-1",
        "key",
        "secret",
    )
    assert opts.uses_path_style  # an endpoint: path style unless told otherwise
    assert "secret" not in repr(opts)
    assert S3Options.from_env(opts.to_env()) == opts
    # the service-specific variable wins over the generic one, a flag over both
    both = {**ENV, "AWS_ENDPOINT_URL_S3": "http://s3:9000"}
    assert S3Options.from_env(both).endpoint == "http://s3:9000"
    assert S3Options.from_env(both, endpoint="http://flag:1", path_style=False).endpoint == "http://flag:1"
    assert not S3Options.from_env(both, path_style=False).uses_path_style
    assert not S3Options.from_env({}).uses_path_style  # AWS: virtual-hosted


def test_hudi_rs_storage_options() -> None:
    assert S3Options.from_env(ENV).hudi_rs_options() == {
        "aws_region": "eu-west-1",
        "aws_endpoint_url": "http://127.0.0.1:8333",
        "aws_allow_http": "true",
        "aws_access_key_id": "key",
        "aws_secret_access_key": "secret",
        "aws_virtual_hosted_style_request": "false",
    }


def test_bad_settings_are_refused() -> None:
    with pytest.raises(InvalidConfigError, match="http"):
        S3Options(endpoint="127.0.0.1:8333")
    with pytest.raises(InvalidConfigError, match="both"):
        S3Options(access_key="key")
    with pytest.raises(InvalidConfigError, match="bucket"):
        split_s3_uri("s3:///prefix")
    with pytest.raises(InvalidConfigError, match="INLET_S3_PATH_STYLE"):
        S3Options.from_env({"INLET_S3_PATH_STYLE": "maybe"})
    assert split_s3_uri("s3a://b/a/b/") == ("b", "a/b")
