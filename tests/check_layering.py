"""Dependency direction check: services -> core, proto; core imports neither; proto imports nothing of ours.

Also checks that no generic top-level package (core, proto, services) would be installed.
"""

from __future__ import annotations

import ast
import pathlib
import sys

ROOT = pathlib.Path(__file__).resolve().parent.parent
RULES = {
    "core/src/inlet/core": ("inlet.proto", "inlet.services"),
    "proto/src/inlet/proto": ("inlet.core", "inlet.services"),
}


def imports(path: pathlib.Path) -> list[tuple[int, str]]:
    tree = ast.parse(path.read_text("utf-8"), str(path))
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out.extend((node.lineno, a.name) for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            out.append((node.lineno, node.module))
    return out


# only these may import the coordinator service's package; every other part of services reaches
# the coordinator through inlet.services.coordinator_client
COORDINATOR = "inlet.services.coordinator"
COORDINATOR_USERS = (
    "services/src/inlet/services/coordinator/",
    "services/src/inlet/services/cli/coordinator.py",
)


def main() -> int:
    problems = []
    for py in sorted((ROOT / "services/src/inlet/services").rglob("*.py")):
        rel = str(py.relative_to(ROOT))
        if rel.startswith(COORDINATOR_USERS):
            continue
        for line, mod in imports(py):
            if mod == COORDINATOR or mod.startswith(COORDINATOR + "."):
                problems.append(f"{rel}:{line}: imports {mod} (use inlet.services.coordinator_client)")
    for folder, forbidden in RULES.items():
        for py in sorted((ROOT / folder).rglob("*.py")):
            for line, mod in imports(py):
                if any(mod == f or mod.startswith(f + ".") for f in forbidden):
                    problems.append(f"{py.relative_to(ROOT)}:{line}: imports {mod} (forbidden for {folder})")
    for dist in ("core", "proto", "services"):
        if (ROOT / dist / "src" / "inlet" / "__init__.py").exists():
            problems.append(f"{dist}/src/inlet/__init__.py must not exist (inlet is a namespace package)")
        extra = [
            p.name
            for p in (ROOT / dist / "src").iterdir()
            if p.name != "inlet" and not p.name.startswith(".")
        ]
        if extra:
            problems.append(f"{dist}/src holds top-level names other than inlet: {extra}")
    for p in problems:
        print(p)
    print("layering: ok" if not problems else f"layering: {len(problems)} problem(s)")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
