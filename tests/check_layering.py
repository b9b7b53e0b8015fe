"""Dependency direction check: services -> core, proto; core imports neither; proto imports nothing of ours.

Inside ``inlet.core`` the modules form layers (:data:`CORE_LAYERS`): a module imports only from its
own layer or the layers below, and no import cycle exists, imports inside functions included.
``import inlet.core`` must not load pyspark (the Spark engine is an optional layer on top).
Also checks that no generic top-level package (core, proto, services) would be installed.
"""

from __future__ import annotations

import ast
import pathlib
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parent.parent
RULES = {
    "core/src/inlet/core": ("inlet.proto", "inlet.services"),
    "proto/src/inlet/proto": ("inlet.core", "inlet.services"),
}


def imports(path: pathlib.Path, submodules: bool = False) -> list[tuple[int, str]]:
    """Every module ``path`` imports (at any depth of the code). With ``submodules``, ``from pkg
    import name`` counts as an import of ``pkg.name`` when that is a module of ours."""
    tree = ast.parse(path.read_text("utf-8"), str(path))
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out.extend((node.lineno, a.name) for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            subs = [f"{node.module}.{a.name}" for a in node.names] if submodules else []
            subs = [m for m in subs if _core_file(m) is not None]
            if len(subs) < len(node.names):  # names defined by the package itself
                out.append((node.lineno, node.module))
            out.extend((node.lineno, m) for m in subs)
    return out


CORE = ROOT / "core/src"
# inlet.core's layers, lowest first: a module may import its own layer and those below
CORE_LAYERS = (
    ("errors", "faults", "progress"),
    ("config", "s3", "storage_requests", "storage", "avro", "schema", "keys"),
    ("timeline",),
    ("table.properties", "table.meta", "table.metadata_table"),
    ("log",),
    ("merge",),
    ("file_group",),
    ("commit",),
    ("table.handle",),
    ("index",),
    ("actions.rollback",),  # writers roll back failed writes before they write
    ("read", "write"),
    ("actions",),
    ("table.facade",),
    ("", "table"),  # the package roots: inlet.core and inlet.core.table (docstring only)
    ("spark",),
)


def _core_file(module: str) -> pathlib.Path | None:
    if not module.startswith("inlet.core"):
        return None
    base = CORE / module.replace(".", "/")
    for p in (base.with_suffix(".py"), base / "__init__.py"):
        if p.exists():
            return p
    return None


def _layer(module: str) -> int:
    rel = module.removeprefix("inlet.core").removeprefix(".")
    best, depth = -1, -1
    for i, names in enumerate(CORE_LAYERS):
        for n in names:
            if (rel == n or rel.startswith(n + ".") or n == "") and len(n) > depth:
                best, depth = i, len(n)
    return best


def _module_of(path: pathlib.Path) -> str:
    rel = path.relative_to(CORE).with_suffix("")
    parts = rel.parts[:-1] if rel.name == "__init__" else rel.parts
    return ".".join(parts)


def core_problems() -> list[str]:
    problems = []
    graph: dict[str, set[str]] = {}
    for py in sorted((CORE / "inlet/core").rglob("*.py")):
        mod = _module_of(py)
        graph[mod] = set()
        for line, imp in imports(py, submodules=True):
            if _core_file(imp) is None:
                continue
            graph[mod].add(imp)
            if _layer(imp) > _layer(mod):
                problems.append(
                    f"{py.relative_to(ROOT)}:{line}: {mod} imports {imp}, a higher layer (tests/check_layering.py)"
                )
    for cycle in _cycles(graph):
        problems.append("import cycle in inlet.core: " + " -> ".join(cycle))
    probe = "import sys, inlet.core; print('pyspark' in sys.modules)"
    loaded = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True).stdout
    if loaded.strip() != "False":
        problems.append("import inlet.core loads pyspark (only inlet.core.spark may)")
    return problems


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """One cycle per strongly connected component of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in graph:
                continue
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                found.append(sorted(comp))

    sys.setrecursionlimit(10_000)
    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


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
    problems.extend(core_problems())
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
