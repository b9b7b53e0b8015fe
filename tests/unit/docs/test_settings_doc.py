"""docs/settings.md is generated from the services' settings tables and kept up to date."""

from __future__ import annotations

import argparse
from pathlib import Path

from inlet.services import settings_doc
from inlet.services.runtime import Setting, add_arguments

REPO = Path(__file__).resolve().parents[3]


def test_docs_settings_md_is_what_the_settings_tables_declare() -> None:
    committed = (REPO / "docs" / "settings.md").read_text()
    assert committed == settings_doc.render(), (
        "docs/settings.md is out of date: run `make docs` (python -m inlet.services.settings_doc --write)"
    )


def _parser() -> argparse.ArgumentParser:
    root = argparse.ArgumentParser(prog="inlet")
    sub = root.add_subparsers()
    for name in ("alpha", "beta", "gamma"):
        p = sub.add_parser(name, prog=f"inlet {name}")
        add_arguments(p, (SHARED,), "INLET_")
    run = sub.add_parser("svc", prog="inlet svc").add_subparsers().add_parser("run", prog="inlet svc run")
    add_arguments(run, OWN, "INLET_SVC_")
    run.add_argument("--plain", help="not from a settings table [env: INLET_PLAIN]")
    return root


SHARED = Setting("coordinator", "--coordinator", "the coordinator", metavar="HOST:PORT")
OWN = (
    Setting("bootstrap", "--bootstrap", "Kafka | bootstrap", required=True),
    Setting("batch", "--batch-ms", "batch interval", kind="int", default=1000),
    Setting("compaction", "--compaction", "compact inline", kind="bool", default=True),
    Setting("opts", "--kafka-option", "librdkafka setting", kind="pairs", env_name="KAFKA_OPTIONS"),
)


def test_each_setting_is_a_row_with_flag_variable_default_and_help() -> None:
    text = settings_doc.render(_parser())
    assert "## `inlet svc run`" in text
    assert "| `--bootstrap` | `INLET_SVC_BOOTSTRAP` | required | Kafka \\| bootstrap |" in text
    assert "| `--batch-ms` | `INLET_SVC_BATCH` | `1000` | batch interval |" in text
    assert "| `--compaction` | `INLET_SVC_COMPACTION` | true | compact inline |" in text
    assert (
        "| `--kafka-option` | `INLET_SVC_KAFKA_OPTIONS` |  | librdkafka setting (KEY=VALUE; repeatable) |"
        in text
    )
    # a setting of three commands is listed once, naming them, and the commands get no section
    assert "## `inlet alpha`" not in text
    assert text.count("`INLET_COORDINATOR`") == 1
    assert "the coordinator (`inlet alpha`, `inlet beta`, `inlet gamma`)" in text
    # an option outside the settings tables that names its variable
    assert "| `--plain` | `INLET_PLAIN` | not from a settings table | `inlet svc run` |" in text


def test_check_fails_on_a_stale_file_and_passes_on_a_fresh_one(tmp_path: Path) -> None:
    path = tmp_path / "settings.md"
    assert settings_doc.main(["--write", "--path", str(path)]) == 0
    assert settings_doc.main(["--check", "--path", str(path)]) == 0
    text = path.read_text()
    first_row = next(line for line in text.splitlines() if line.startswith("| `--"))
    path.write_text(text.replace(first_row, first_row.replace("`--", "`--renamed-", 1)))
    assert settings_doc.main(["--check", "--path", str(path)]) == 1
