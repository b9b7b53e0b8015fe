"""The Java parts Inlet runs, from Maven Central: resolved once by ``make install``, read at run time.

``pom.xml`` beside this file is the one declared list: a profile per part (:data:`PARTS`), every version
pinned. :func:`resolve` runs ``mvn`` once per part (``--strict-checksums``: a jar whose checksum does not
match fails the install) and writes the part's classpath to ``$INLET_CACHE_DIR/maven/<part>-<pom
digest>.classpath``; :func:`classpath` reads it. A changed ``pom.xml`` has another digest, so its parts
must be resolved again: nothing is fetched at run time, and a missing part is an error naming the fix::

    python -m inlet.services.stack.maven            # resolve every part (make install does this)
    python -m inlet.services.stack.maven kafka      # one part; prints its classpath file

``$INLET_MAVEN`` names the ``mvn`` to run (default: ``mvn`` on PATH), ``$INLET_MAVEN_REPO`` a local
repository other than Maven's default (``~/.m2/repository``).
"""

from __future__ import annotations

import argparse
import hashlib
import os
import shutil
import subprocess
import sys
from pathlib import Path

from inlet.services.stack.java import cache_root
from inlet.services.stack.processes import StackError

POM = Path(__file__).with_name("pom.xml")
#: The pom's profiles, in the order ``make install`` resolves them.
PARTS = ("kafka", "metastore", "hive-client", "hudi-1.0", "hudi-1.2")
MAVEN_ENV = "INLET_MAVEN"
MAVEN_REPO_ENV = "INLET_MAVEN_REPO"
_DEPENDENCY_PLUGIN = "org.apache.maven.plugins:maven-dependency-plugin:3.8.1"


def classpath_file(part: str) -> Path:
    """Where ``part``'s resolved classpath is kept for the current ``pom.xml``."""
    if part not in PARTS:
        raise StackError(f"unknown Java part {part!r}: one of {', '.join(PARTS)}")
    digest = hashlib.sha256(POM.read_bytes()).hexdigest()[:12]
    return cache_root() / "maven" / f"{part}-{digest}.classpath"


def classpath(part: str) -> list[Path]:
    """The jars of ``part``, as ``make install`` resolved them; a clear error when they are not there."""
    path = classpath_file(part)
    if not path.is_file():
        raise StackError(
            f"the Java part {part!r} is not resolved for this pom.xml: run `make install` "
            f"(or `python -m inlet.services.stack.maven {part}`)"
        )
    jars = [Path(entry) for entry in path.read_text().strip().split(os.pathsep) if entry]
    missing = [str(jar) for jar in jars if not jar.is_file()]
    if missing:
        raise StackError(
            f"the Java part {part!r} lists jars that are gone ({missing[0]}, {len(missing)} in all): "
            f"run `python -m inlet.services.stack.maven {part}` again"
        )
    return jars


def classpath_arg(part: str) -> str:
    """``part``'s jars joined for ``java -cp``."""
    return os.pathsep.join(str(jar) for jar in classpath(part))


def _maven() -> str:
    configured = os.environ.get(MAVEN_ENV)
    found = configured or shutil.which("mvn")
    if not found:
        raise StackError(f"mvn not found: install Apache Maven (Debian: maven) or set {MAVEN_ENV}")
    return found


def resolve(part: str, *, force: bool = False) -> Path:
    """Resolve ``part`` with ``mvn`` (downloads what the local repository lacks) and write its classpath.

    A part already resolved for this ``pom.xml`` whose jars are all there is left as it is (``make
    install`` runs this every time; Maven itself takes seconds a part even with nothing to fetch)."""
    target = classpath_file(part)
    if not force:
        try:
            classpath(part)
            return target
        except StackError:
            pass  # not resolved yet, or a jar is gone: resolve it
    target.parent.mkdir(parents=True, exist_ok=True)
    partial = target.with_suffix(f".{os.getpid()}.tmp")
    cmd = [
        _maven(),
        "-B",
        "-q",
        "--strict-checksums",
        "-f",
        str(POM),
        "-P",
        part,
        f"{_DEPENDENCY_PLUGIN}:build-classpath",
        "-Dmdep.includeScope=runtime",
        f"-Dmdep.outputFile={partial}",
    ]
    repo = os.environ.get(MAVEN_REPO_ENV)
    if repo:
        cmd.append(f"-Dmaven.repo.local={repo}")
    done = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if done.returncode != 0 or not partial.is_file():
        partial.unlink(missing_ok=True)
        errors = [line for line in done.stdout.splitlines() if "[ERROR]" in line][:3]
        raise StackError(
            f"mvn could not resolve the Java part {part!r}:\n" + "\n".join(errors or [done.stderr])
        )
    partial.replace(target)
    return target


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m inlet.services.stack.maven",
        description="Resolve the Java parts Inlet runs (pom.xml beside this module) from Maven Central, "
        "with checksums checked, and write each part's classpath file.",
    )
    parser.add_argument("parts", nargs="*", metavar="PART", help=f"of {', '.join(PARTS)} (default: all)")
    parser.add_argument(
        "--force", action="store_true", help="resolve again even when a part's classpath file is complete"
    )
    args = parser.parse_args(argv)
    for part in args.parts or PARTS:
        if part not in PARTS:
            parser.error(f"unknown part {part!r}: one of {', '.join(PARTS)}")
        try:
            print(f"{part}: {resolve(part, force=args.force)}", flush=True)
        except StackError as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 1
    return 0
