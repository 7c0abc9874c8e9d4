#!/bin/bash
# "A repository's life" benchmark (issue 43), run by hand: it needs a real repository, so CI never
# runs it. From a bare repository SRC, build the state a server sees between repacks: main's
# first-parent history BACK commits back, repacked with a bitmap (`git repack -adb`), then PUSHES
# pushes of STEP first-parent commits each, pushed through gixd itself (thin packs, each stored as
# its own pack with its bases appended whole; gixd's maintenance after pushes off meanwhile).
#
# Then four operations — a fetch of a client 200 commits behind, a bare clone, a blob:none clone,
# a no-op fetch — at three moments: after the pushes, after `gixd maintenance --geometric`, after
# `gixd maintenance` (full). Each compares gixd (HTTP, v2) with `git upload-pack` (file://, its
# pack-objects at git's defaults but `pack.allowPackReuse=multi`) on the *same directory*. A reference row per operation compares
# gixd after its geometric run with git on a copy of the pushed state after git's own
# `git repack --geometric=2 -d --write-midx -b`.
#
#   cargo xtask bench life SRC OUT [--writer …] [--pushes N] …   (writes bench/results/life/)
#   bench/life/run.sh SRC OUT [GIXD]     (BACK=2000 PUSHES=40 STEP=50 REPS=3 by default; to stdout)
#
# STATE_ONLY=1 stops after the pushes: OUT/base/repo.git is the state, for profiling by hand.
#
# WRITER=git pushes through stock git instead (`git push` to the directory: git's own
# receive-pack and index-pack --fix-thin write each push, as a repository migrated to gixd, or
# pushed into by a second server, has them), with UNPACK_LIMIT as `receive.unpackLimit` when set
# (1: every push a pack; git's default 100: small pushes stored as loose objects). WRITER=mixed
# alternates: odd pushes through gixd, even ones through stock git (a repository two servers
# take pushes into).
#
# One line per moment and operation: the bytes of the pack the client received
# (`GIT_TRACE_PACKFILE`) and the server's CPU — gixd's from its access log (`cpu_ms` of the
# upload-pack requests: their threads), git's from `perf stat` around upload-pack (it and its
# pack-objects). Each operation runs once against each server to warm up (page cache, and gixd's
# open packs), then REPS times, which count: CPU is their sum, bytes the last run's. Clients'
# packs are checked by git (a failing fsck fails the run).
set -eu
SRC=$1; OUT=$2; GIXD=${3:-target/release/gixd}
BACK=${BACK:-2000}; PUSHES=${PUSHES:-40}; STEP=${STEP:-50}; WRITER=${WRITER:-gixd}; UNPACK_LIMIT=${UNPACK_LIMIT:-}
GIXD=$(cd "$(dirname "$GIXD")" && pwd)/$(basename "$GIXD")
rm -rf "$OUT"; mkdir -p "$OUT/base"; OUT=$(cd "$OUT" && pwd)
git clone -q --bare --no-local "$SRC" "$OUT/full.git"
git -C "$OUT/full.git" rev-list --first-parent HEAD | head -n $((BACK + 1)) > "$OUT/fp.txt"
BASE=$(sed -n "$((BACK + 1))p" "$OUT/fp.txt")
git init -q --bare "$OUT/base/repo.git"
git -C "$OUT/full.git" push -q "$OUT/base/repo.git" "$BASE:refs/heads/main"
git -C "$OUT/base/repo.git" symbolic-ref HEAD refs/heads/main
git -C "$OUT/base/repo.git" repack -adbq
git -C "$OUT/base/repo.git" config uploadpack.allowFilter true
[ -n "$UNPACK_LIMIT" ] && git -C "$OUT/base/repo.git" config receive.unpackLimit "$UNPACK_LIMIT"
SECRET=$("$GIXD" token add --user bench --write --token-file "$OUT/tokens.toml" 2>/dev/null)
PORT=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
"$GIXD" serve --base-path "$OUT/base" --export-all --listen "127.0.0.1:$PORT" --token-file "$OUT/tokens.toml" \
  --auto-maintenance false --access-log "$OUT/access.log" > "$OUT/gixd.log" 2>&1 &
PID=$!
trap 'kill $PID 2>/dev/null || true' EXIT
sleep 1
for i in $(seq 1 "$PUSHES"); do
  n=$((BACK - i * STEP)); [ $n -lt 0 ] && n=0
  to="http://bench:$SECRET@127.0.0.1:$PORT/repo.git"
  if [ "$WRITER" = git ] || { [ "$WRITER" = mixed ] && [ $((i % 2)) = 0 ]; }; then to="$OUT/base/repo.git"; fi
  git -C "$OUT/full.git" push -q "$to" "$(sed -n "$((n + 1))p" "$OUT/fp.txt"):refs/heads/main"
done
echo "params back=$BACK pushes=$PUSHES step=$STEP reps=${REPS:-3} writer=$WRITER unpack_limit=${UNPACK_LIMIT:-default} git_pack_reuse=multi commit=$(git -C "$(dirname "$0")" rev-parse --short HEAD) git=$(git --version)"
echo "packs after pushes: $(ls "$OUT"/base/repo.git/objects/pack/*.pack | wc -l), loose objects: $(find "$OUT"/base/repo.git/objects/?? -type f 2>/dev/null | wc -l)"
[ -n "${STATE_ONLY:-}" ] && exit 0
BEHIND=$(git -C "$OUT/base/repo.git" rev-list --first-parent main | sed -n 201p)
# git's side: upload-pack under `perf stat`, which adds its task-clock and its children's
# (pack-objects) to git-cpu (getrusage's and `time`'s tick-based figures were off by tens of ms
# per process on this machine: 40 ms for `true`).
# git's pack-objects with `pack.allowPackReuse=multi` (its default reuses from one pack only): a
# multi-pack-index's packs are copied verbatim as gixd's are (the same as `single` without one).
UP="perf stat -x, -e task-clock --append -o $OUT/git-cpu git -c pack.allowPackReuse=multi upload-pack"
REPS=${REPS:-3}

# One client operation against URL; prints the bytes of the pack it received (0: none).
op() { # label url op
  local d="$OUT/c-$1"; rm -f "$OUT/pack-$1"
  case $3 in
    fetch|noop)
      if [ "$3" = fetch ] || [ ! -d "$d" ]; then
        rm -rf "$d"; git init -q --bare "$d"; git -C "$d" fetch -q "$OUT/full.git" "$BEHIND:refs/heads/main"
      fi
      [ "$3" = noop ] && git -C "$d" -c protocol.version=2 fetch -q --upload-pack="$UP" "$2" main:refs/heads/main 2>/dev/null
      GIT_TRACE_PACKFILE="$OUT/pack-$1" git -C "$d" -c protocol.version=2 fetch -q --upload-pack="$UP" "$2" main:refs/heads/main 2>/dev/null ;;
    clone) rm -rf "$d"; GIT_TRACE_PACKFILE="$OUT/pack-$1" git -c protocol.version=2 clone -q --bare --upload-pack="$UP" "$2" "$d" 2>/dev/null ;;
    blob:none) rm -rf "$d"; GIT_TRACE_PACKFILE="$OUT/pack-$1" git -c protocol.version=2 clone -q --bare --filter=blob:none --upload-pack="$UP" "$2" "$d" 2>/dev/null ;;
  esac
  git -C "$d" fsck --connectivity-only >/dev/null 2>&1 || { echo "client $1: fsck failed" >&2; exit 1; }
  if [ -f "$OUT/pack-$1" ]; then stat -c %s "$OUT/pack-$1"; else echo 0; fi
}

# gixd's CPU (ms) for what its access log holds now, and git's from its `time` lines.
gixd_cpu() { python3 -c "import json; print(round(sum(json.loads(l)['cpu_ms'] for l in open('$OUT/access.log') if 'upload-pack' in l), 1))"; }
git_cpu() { python3 -c "print(round(sum(float(l.split(',')[0]) for l in open('$OUT/git-cpu') if 'task-clock' in l), 1))"; }

# The four operations, gixd against git at GIT_URL: a warm-up, then REPS counted runs each.
moment() { # name git-url
  for o in fetch clone blob:none noop; do
    local label=${o/:/-}
    op "gixd-$label" "http://127.0.0.1:$PORT/repo.git" "$o" > /dev/null
    sleep 1; : > "$OUT/access.log"
    for _ in $(seq "$REPS"); do g=$(op "gixd-$label" "http://127.0.0.1:$PORT/repo.git" "$o"); done
    sleep 1 # a request's access-log line is written as it ends, maybe just after its client did
    gcpu=$(gixd_cpu)
    op "git-$label" "$2" "$o" > /dev/null
    : > "$OUT/git-cpu"
    for _ in $(seq "$REPS"); do r=$(op "git-$label" "$2" "$o"); done
    rcpu=$(git_cpu)
    echo "moment=$1 op=$o bytes gixd=$g git=$r ratio=$(python3 -c "print(f'{$g/$r:.3f}' if $r else 'n/a')") cpu_ms gixd=$gcpu git=$rcpu ratio=$(python3 -c "print(f'{$gcpu/$rcpu:.2f}' if $rcpu >= 1 else 'n/a')")"
  done
}

moment pushed "file://$OUT/base/repo.git"
# git's own geometric repack with a MIDX bitmap, on a copy of the pushed state: the reference.
mkdir -p "$OUT/ref"; cp -a "$OUT/base/repo.git" "$OUT/ref/repo.git"
git -C "$OUT/ref/repo.git" repack -q --geometric=2 -d --write-midx -b
"$GIXD" maintenance --geometric "$OUT/base/repo.git" > "$OUT/geometric.txt"
# The packs a run replaced stay 60 s for transfers that started before it (noted in
# objects/gixd-rolled/): counted apart.
echo "packs after gixd's geometric maintenance: $(ls "$OUT"/base/repo.git/objects/pack/*.pack | wc -l), of which retired: $(ls "$OUT"/base/repo.git/objects/gixd-rolled 2>/dev/null | wc -l)"
moment geometric "file://$OUT/base/repo.git"
moment reference-git-geometric-midx "file://$OUT/ref/repo.git"
"$GIXD" maintenance "$OUT/base/repo.git" > "$OUT/full.txt"
moment full "file://$OUT/base/repo.git"
