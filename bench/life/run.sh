#!/bin/bash
# "A repository's life" probe (issue 43), run by hand: it needs a real repository, so CI never runs
# it. From a bare repository SRC, build the state a server sees between repacks: main's
# first-parent history BACK commits back, repacked with a bitmap (`git repack -adb`), then PUSHES
# pushes of STEP first-parent commits each, pushed through gixd itself (thin packs, each stored as
# its own pack with its bases appended whole). Then the bytes of the pack a client receives —
# `GIT_TRACE_PACKFILE` — from gixd (HTTP, v2) and from git upload-pack (file://) on the same
# directory: a fetch of a client 200 commits behind, a bare clone, a blob:none clone.
#
#   bench/life/run.sh SRC OUT [GIXD]     (BACK=2000 PUSHES=40 STEP=50 by default)
#
# Prints one line per operation: gixd bytes, git bytes, ratio; and the server's CPU for it — gixd's
# from its access log (`cpu_ms`: the request's thread), git's from `time` around upload-pack (it
# and its pack-objects). Clients' packs are checked by git itself (a failing fsck fails the run).
set -eu
SRC=$1; OUT=$2; GIXD=${3:-target/release/gixd}
BACK=${BACK:-2000}; PUSHES=${PUSHES:-40}; STEP=${STEP:-50}
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
SECRET=$("$GIXD" token add --user bench --write --token-file "$OUT/tokens.toml" 2>/dev/null)
PORT=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
"$GIXD" serve --base-path "$OUT/base" --export-all --listen "127.0.0.1:$PORT" --token-file "$OUT/tokens.toml" \
  --access-log "$OUT/access.log" > "$OUT/gixd.log" 2>&1 &
PID=$!
trap 'kill $PID 2>/dev/null || true' EXIT
sleep 1
for i in $(seq 1 "$PUSHES"); do
  n=$((BACK - i * STEP)); [ $n -lt 0 ] && n=0
  git -C "$OUT/full.git" push -q "http://bench:$SECRET@127.0.0.1:$PORT/repo.git" "$(sed -n "$((n + 1))p" "$OUT/fp.txt"):refs/heads/main"
done
echo "packs: $(ls "$OUT"/base/repo.git/objects/pack/*.pack | wc -l)"
BEHIND=$(git -C "$OUT/base/repo.git" rev-list --first-parent main | sed -n 201p)
UP="/usr/bin/time -f %U+%S -a -o $OUT/git-cpu git-upload-pack"
run() { # label url op
  local d="$OUT/c-$1"; rm -rf "$d" "$OUT/pack-$1"
  case $3 in
    fetch) git init -q --bare "$d"; git -C "$d" fetch -q "$OUT/full.git" "$BEHIND:refs/heads/main"
           GIT_TRACE_PACKFILE="$OUT/pack-$1" git -C "$d" -c protocol.version=2 fetch -q --upload-pack="$UP" "$2" main:refs/heads/main ;;
    clone) GIT_TRACE_PACKFILE="$OUT/pack-$1" git -c protocol.version=2 clone -q --bare --upload-pack="$UP" "$2" "$d" ;;
    blob:none) GIT_TRACE_PACKFILE="$OUT/pack-$1" git -c protocol.version=2 clone -q --bare --filter=blob:none --upload-pack="$UP" "$2" "$d" ;;
  esac
  git -C "$d" fsck --connectivity-only >/dev/null 2>&1 || { echo "client $1: fsck failed" >&2; exit 1; }
  stat -c %s "$OUT/pack-$1"
}
for op in fetch clone blob:none; do
  : > "$OUT/access.log"; : > "$OUT/git-cpu"
  g=$(run "gixd-${op/:/-}" "http://127.0.0.1:$PORT/repo.git" "$op")
  r=$(run "git-${op/:/-}" "file://$OUT/base/repo.git" "$op")
  sleep 1 # a request's access-log line is written as it ends, maybe just after its client did
  gcpu=$(python3 -c "import json,sys; print(round(sum(json.loads(l)['cpu_ms'] for l in open('$OUT/access.log') if 'upload-pack' in l)))")
  rcpu=$(python3 -c "print(round(1000*sum(eval(l) for l in open('$OUT/git-cpu') if l.strip() and l[0].isdigit())))")
  echo "$op bytes gixd=$g git=$r ratio=$(python3 -c "print(f'{$g/$r:.3f}')") cpu_ms gixd=$gcpu git=$rcpu ratio=$(python3 -c "print(f'{$gcpu/max($rcpu,1):.2f}')")"
done
