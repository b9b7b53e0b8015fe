"""``inlet kafka-janitor run``'s settings: rules, S3 and secret from flags or the environment; bad
input is a one-line usage error."""

from __future__ import annotations

import pytest

from inlet.services.cli.errors import UsageError
from inlet.services.cli.kafka_janitor import config_from_args
from inlet.services.cli.main import build_parser
from inlet.services.kafka_janitor import Rule

BASE = ["kafka-janitor", "run", "--kafka-bootstrap", "127.0.0.1:9", "--s3-endpoint", "http://127.0.0.1:9"]


def _config(argv: list[str], environ: dict[str, str]) -> object:
    return config_from_args(build_parser().parse_args([*BASE, *argv]), environ)[0]


def test_rules_and_the_secret_come_from_flags_or_environment() -> None:
    env = {
        "INLET_KAFKA_JANITOR_S3_BUCKET": "kafka",
        "INLET_KAFKA_JANITOR_S3_ACCESS_KEY": "inlet",
        "INLET_KAFKA_JANITOR_S3_SECRET_KEY": "s3cret",
        "INLET_KAFKA_JANITOR_REQUIRE": "app.*=inlet-cdc\ninlet.commits=inlet-table-services,inlet-catalog-sync",
    }
    config = _config([], env)
    assert config.rules == (  # type: ignore[attr-defined]
        Rule("app.*", ("inlet-cdc",)),
        Rule("inlet.commits", ("inlet-table-services", "inlet-catalog-sync")),
    )
    assert config.storage.secret_key == "s3cret" and config.protect[0] == "__*"  # type: ignore[attr-defined]
    flagged = _config(["--require", "inlet.changes.*=inlet-writer", "--interval", "5"], env)
    assert flagged.rules == (Rule("inlet.changes.*", ("inlet-writer",)),)  # type: ignore[attr-defined]
    assert flagged.interval_s == 5.0  # type: ignore[attr-defined]


@pytest.mark.parametrize(
    ("argv", "problem"),
    [
        (["--require", "inlet.changes.*"], "--require: rule 'inlet.changes.*' is not TOPIC_GLOB=GROUP"),
        ([], "--require is required"),
        (["--require", "a=b", "--interval", "0"], "--interval must be more than 0"),
        (["--require", "a=b", "--s3-secret-key", ""], "--s3-secret-key is required"),
    ],
)
def test_bad_settings_are_one_line_errors(argv: list[str], problem: str) -> None:
    env = {"INLET_KAFKA_JANITOR_S3_BUCKET": "kafka", "INLET_KAFKA_JANITOR_S3_ACCESS_KEY": "a"}
    env["INLET_KAFKA_JANITOR_S3_SECRET_KEY"] = "s"
    with pytest.raises(UsageError, match=problem.replace("*", r"\*").replace("(", r"\(")) as err:
        _config(argv, env)
    assert "\n" not in str(err.value)
