#!/usr/bin/env bash
# Measure commits against a base commit, alternating, each from its own checkout.
#
#   bash bench/bisect_points.sh OUT_DIR ROUNDS SHA [SHA ...]
#
# For each SHA: a detached worktree of it (created next to this checkout as bisect-point-<sha>, .venv and
# node_modules symlinked from this checkout, removed at the end unless KEEP_WORKTREES=1; WORKTREE_PREFIX
# renames them so two runs of this script do not share one), then ROUNDS
# rounds of `bench/compare.py --start --only ours` run from the point's checkout and from the base's, the
# order swapped every round (base, point; point, base; ...) so a drift in the machine's load hits both.
# Every run writes OUT_DIR/<sha>.<round>.point.json and OUT_DIR/<sha>.<round>.base.json (compare.py
# --json); `bench/bisect_table.py OUT_DIR` turns them into per-point ratios to the adjacent base run.
#
# Environment: BASE (a commit, default e54b976; BASE_DIR uses an existing checkout of it instead),
# RUNS (measured runs per compare.py call, default 20), COMPARE_ARGS (extra compare.py arguments, e.g.
# "--count-storage": the script passes this Azurite's ports to it). Starts an Azurite of its own
# (temporary) and stops exactly that one on exit. Each compare.py call spawns its own host double with the
# point's own tests/hostdouble and function_app.py, so the double's changes are in the figures too.
#
# PAIRED=1: instead of alternating calls, each round is one `bench/bisect_pair.py` run (this checkout's
# compare.py driving a double of the point and one of the base at once, runs interleaved one by one, each
# double on an Azurite of its own): OUT_DIR/<sha>.<round>.pair.json. Wall times need this on a busy
# machine; CPU per event is steady enough either way. COMPARE_ARGS does not apply to it;
# PAIR_ARGS (e.g. "--settle-ms 1000") is passed to compare.py through bisect_pair.py.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
[ $# -ge 3 ] || { echo "usage: $0 OUT_DIR ROUNDS SHA [SHA ...]" >&2; exit 2; }
OUT=$(realpath -m "$1"); ROUNDS=$2; shift 2
RUNS=${RUNS:-20}; BASE=${BASE:-e54b976}
mkdir -p "$OUT"
PARENT=$(dirname "$ROOT")
INSTANCE="bisect-$$"
CREATED=()

cleanup() {
  bash scripts/azurite.sh stop "$INSTANCE" || true
  if [ "${PAIRED:-0}" = 1 ]; then bash scripts/azurite.sh stop "$INSTANCE-b" || true; fi
  if [ "${KEEP_WORKTREES:-0}" != 1 ]; then
    for dir in "${CREATED[@]}"; do git -C "$ROOT" worktree remove --force "$dir" || true; done
  fi
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

checkout() {  # checkout SHA: sets DIR to its checkout (created once, detached)
  local sha
  sha=$(git -C "$ROOT" rev-parse --short=7 "$1")
  DIR="$PARENT/${WORKTREE_PREFIX:-bisect-point}-$sha"
  if [ ! -d "$DIR" ]; then
    git -C "$ROOT" worktree add --detach "$DIR" "$sha" >/dev/null 2>&1
    ln -sfn "$(realpath "$ROOT/.venv")" "$DIR/.venv"
    ln -sfn "$(realpath "$ROOT/node_modules")" "$DIR/node_modules"
    CREATED+=("$DIR")
  fi
}

bash scripts/azurite.sh start "$INSTANCE" --temporary
if [ "${PAIRED:-0}" = 1 ]; then
  bash scripts/azurite.sh start "$INSTANCE-b" --temporary
  SECOND="$(bash scripts/azurite.sh connection-string "$INSTANCE-b")"
fi
AzureWebJobsStorage="$(bash scripts/azurite.sh connection-string "$INSTANCE")"
export AzureWebJobsStorage
export TASKHUB_NAME="${TASKHUB_NAME:-ResilientResponsesLocal}"
read -r BLOB QUEUE TABLE < ".azurite/$INSTANCE/ports"
if [ -z "${BASE_DIR:-}" ]; then checkout "$BASE"; BASE_DIR=$DIR; fi

run() {  # run DIR JSON
  # shellcheck disable=SC2086  # COMPARE_ARGS is a list of arguments
  (cd "$1" && .venv/bin/python bench/compare.py --start --only ours --runs "$RUNS" --idle-seconds 0 \
      --azurite-ports "$BLOB,$QUEUE,$TABLE" ${COMPARE_ARGS:-} --json "$2" >"${2%.json}.log" 2>&1) \
    || echo "compare.py failed in $1 (see ${2%.json}.log)" >&2
}

for sha in "$@"; do
  short=$(git -C "$ROOT" rev-parse --short=7 "$sha")
  checkout "$sha"; dir=$DIR
  for round in $(seq 1 "$ROUNDS"); do
    if [ "${PAIRED:-0}" = 1 ]; then
      .venv/bin/python bench/bisect_pair.py --base "$BASE_DIR" --point "$dir" --base-storage "$AzureWebJobsStorage" \
        --point-storage "$SECOND" --runs "$RUNS" --json "$OUT/$short.$round.pair.json" ${PAIR_ARGS:-} \
        >"$OUT/$short.$round.pair.log" 2>&1 || echo "bisect_pair.py failed for $short (see its log)" >&2
    elif [ $((round % 2)) = 1 ]; then
      run "$BASE_DIR" "$OUT/$short.$round.base.json"; run "$dir" "$OUT/$short.$round.point.json"
    else
      run "$dir" "$OUT/$short.$round.point.json"; run "$BASE_DIR" "$OUT/$short.$round.base.json"
    fi
    echo "$(date -u +%H:%M:%S) $short round $round done" >&2
  done
done
