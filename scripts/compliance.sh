#!/usr/bin/env bash
# Run the Open Responses compliance suite's own CLI against a running service:
#   bash scripts/compliance.sh [CLI options...]      e.g. --filter basic-response,streaming-response --verbose
#
# Needs network access to GitHub and the npm registry, git and Node.js 18+, and the service running
# (bash scripts/run.sh; COMPLIANCE_BASE_URL, default http://127.0.0.1:${PORT:-7071}/v1, says where).
# It fetches openresponses/openresponses at the pinned commit OPENRESPONSES_COMMIT into
# .compliance/openresponses-<commit> (reused by later runs), then runs bin/compliance-test.ts with Bun
# when `bun` is installed (the suite's own way: bun install, bun run), else with tsx and zod from npm
# (the only packages the CLI imports), installed into .compliance/node-tools. OPENRESPONSES_DIR=<dir>
# runs a checkout you already have instead. Every option is passed to the CLI (--help lists them);
# --api-key defaults to "local" (the service needs none). The exit status is the CLI's: 0 when no test failed.
set -euo pipefail
cd "$(dirname "$0")/.."

OPENRESPONSES_COMMIT=${OPENRESPONSES_COMMIT:-18e565604fdf7a08ad3a06bbc30d1ddaee999ea4}
REPOSITORY=https://github.com/openresponses/openresponses
ZOD_VERSION=3.25.76   # the suite's package.json asks for zod ^3.25.76
TSX_VERSION=4.23.15
BASE_URL=${COMPLIANCE_BASE_URL:-http://127.0.0.1:${PORT:-7071}/v1}
WORK=.compliance
for arg in "$@"; do
  case "$arg" in -h|--help) sed -n '2,13p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;; esac
done

command -v node >/dev/null 2>&1 || { echo "compliance: Node.js 18+ is required" >&2; exit 1; }
if command -v curl >/dev/null 2>&1 && ! curl -s -o /dev/null --max-time 5 "$BASE_URL/responses/resp_0"; then
  echo "compliance: no service answers at $BASE_URL: start it (bash scripts/run.sh) or set COMPLIANCE_BASE_URL" >&2
  exit 1
fi

SUITE=${OPENRESPONSES_DIR:-$WORK/openresponses-$OPENRESPONSES_COMMIT}
if [ -z "${OPENRESPONSES_DIR:-}" ] && [ ! -f "$SUITE/bin/compliance-test.ts" ]; then
  command -v git >/dev/null 2>&1 || { echo "compliance: git is required to fetch the suite" >&2; exit 1; }
  echo "compliance: fetching $REPOSITORY at $OPENRESPONSES_COMMIT into $SUITE"
  rm -rf "$SUITE.partial" && mkdir -p "$SUITE.partial"
  git -C "$SUITE.partial" init --quiet
  git -C "$SUITE.partial" fetch --quiet --depth 1 "$REPOSITORY" "$OPENRESPONSES_COMMIT"
  git -C "$SUITE.partial" checkout --quiet FETCH_HEAD
  mv "$SUITE.partial" "$SUITE"
fi
[ -f "$SUITE/bin/compliance-test.ts" ] || { echo "compliance: $SUITE has no bin/compliance-test.ts" >&2; exit 1; }

has_api_key=""
for arg in "$@"; do case "$arg" in -k|--api-key) has_api_key=1 ;; esac; done
CLI_ARGS=(--base-url "$BASE_URL")
[ -n "$has_api_key" ] || [ -n "${OPENRESPONSES_API_KEY:-}" ] || CLI_ARGS+=(--api-key local)
echo "compliance: running the suite's CLI ($SUITE) against $BASE_URL"

if command -v bun >/dev/null 2>&1; then
  (cd "$SUITE" && bun install --silent)
  cd "$SUITE" && exec bun run bin/compliance-test.ts "${CLI_ARGS[@]}" "$@"
fi
TOOLS=$WORK/node-tools
if [ ! -x "$TOOLS/node_modules/.bin/tsx" ] || [ ! -d "$TOOLS/node_modules/zod" ]; then
  mkdir -p "$TOOLS"
  [ -f "$TOOLS/package.json" ] || echo '{"name": "compliance-tools", "private": true}' > "$TOOLS/package.json"
  npm install --prefix "$TOOLS" --no-audit --no-fund --silent "zod@$ZOD_VERSION" "tsx@$TSX_VERSION"
fi
# The suite's sources import "zod": resolve it from the tools' node_modules (no install into the suite).
mkdir -p "$SUITE/node_modules"
[ -e "$SUITE/node_modules/zod" ] || ln -s "$(cd "$TOOLS/node_modules/zod" && pwd)" "$SUITE/node_modules/zod"
TSX="$(cd "$TOOLS/node_modules/.bin" && pwd)/tsx"
cd "$SUITE" && exec "$TSX" bin/compliance-test.ts "${CLI_ARGS[@]}" "$@"
