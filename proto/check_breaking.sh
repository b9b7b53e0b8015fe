#!/usr/bin/env bash
# buf breaking-change check of proto/ against the previous commit (the last landed version when run
# on main); skipped when that commit has no proto module or the clone has no history.
set -euo pipefail
cd "$(dirname "$0")/.."
BUF=${BUF:-.venv/bin/buf}
if ! git rev-parse -q --verify HEAD~1 >/dev/null || ! git cat-file -e HEAD~1:proto/buf.yaml 2>/dev/null; then
  echo "proto breaking check: no previous proto module to compare with; skipped"
  exit 0
fi
"$BUF" breaking proto --against ".git#ref=HEAD~1,subdir=proto"
