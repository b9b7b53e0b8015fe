"""Generate the Python stubs next to the .proto files, or check that they are up to date.

    python proto/generate.py          # regenerate *_pb2.py, *_pb2.pyi, *_pb2_grpc.py
    python proto/generate.py --check  # exit 1 if regenerating would change anything

Uses grpcio-tools' bundled protoc and mypy-protobuf (both dev dependencies), so the output
depends only on the locked versions.
"""

from __future__ import annotations

import argparse
import filecmp
import shutil
import sys
import tempfile
from pathlib import Path

import grpc_tools
from grpc_tools import protoc

SRC = Path(__file__).resolve().parent / "src"
OUTPUTS = ("*_pb2.py", "*_pb2.pyi", "*_pb2_grpc.py", "*_pb2_grpc.pyi")


def generate(out: Path) -> None:
    protos = sorted(str(p.relative_to(SRC)) for p in SRC.rglob("*.proto"))
    wkt = Path(grpc_tools.__file__).parent / "_proto"
    bin_dir = Path(sys.executable).parent  # mypy-protobuf's plugins live beside the interpreter
    args = [
        "protoc",
        f"-I{SRC}",
        f"-I{wkt}",
        f"--plugin=protoc-gen-mypy={bin_dir / 'protoc-gen-mypy'}",
        f"--plugin=protoc-gen-mypy_grpc={bin_dir / 'protoc-gen-mypy_grpc'}",
        f"--python_out={out}",
        f"--grpc_python_out={out}",
        f"--mypy_out={out}",
        f"--mypy_grpc_out={out}",
        *protos,
    ]
    if protoc.main(args) != 0:
        raise SystemExit("protoc failed")


def generated(root: Path) -> dict[str, Path]:
    return {str(p.relative_to(root)): p for pattern in OUTPUTS for p in root.rglob(pattern)}


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--check", action="store_true", help="fail if the committed stubs are stale")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        fresh_root = Path(tmp)
        generate(fresh_root)
        fresh, committed = generated(fresh_root), generated(SRC)
        if args.check:
            stale = sorted(
                name
                for name in fresh.keys() | committed.keys()
                if name not in fresh
                or name not in committed
                or not filecmp.cmp(fresh[name], committed[name], False)
            )
            if stale:
                print("generated stubs are stale (run `make proto`): " + ", ".join(stale), file=sys.stderr)
                return 1
            return 0
        for name in committed.keys() - fresh.keys():
            committed[name].unlink()
        for name, path in fresh.items():
            shutil.copyfile(path, SRC / name)
    return 0


if __name__ == "__main__":
    sys.exit(main())
