#!/bin/sh
# The real-repository benchmark (issue 20), run by hand: it needs the repositories, so CI never
# runs it; CI only checks that bench/README.md is rendered from the committed results.
#
#   bench/real-repos.sh [--rounds N] [--copy-only] PATH…
#
# Each PATH is a bare git repository (for instance a snapshot directory …/owner+name/repo). It is
# copied once, heads and tags only, with `git clone --bare --no-local` into
# target/real-repos/<name>.git — the source is never written to — and the copies are then
# measured by `cargo xtask bench real`, which writes bench/results/real-repos.json; render with
# `cargo xtask report`. Everything runs under nice: the machine is shared.
set -eu
cd "$(dirname "$0")/.."

rounds=3
copy_only=
while [ $# -gt 0 ]; do
  case $1 in
    --rounds) rounds=$2; shift 2 ;;
    --copy-only) copy_only=1; shift ;;
    *) break ;;
  esac
done
if [ $# -eq 0 ]; then
  echo "usage: bench/real-repos.sh [--rounds N] [--copy-only] PATH…" >&2
  exit 2
fi

mkdir -p target/real-repos
args=""
for src in "$@"; do
  src=$(cd "$src" && pwd)
  base=$(basename "$src")
  if [ "$base" = repo ]; then
    # A snapshot laid out as …/owner+name/repo: name it after the repository, keep owner/name.
    parent=$(basename "$(dirname "$src")")
    name=${parent#*+}
    origin=$(printf '%s' "$parent" | sed 's/+/\//')
  else
    name=${base%.git}
    origin=$name
  fi
  dest=target/real-repos/$name.git
  if [ ! -f "$dest/HEAD" ]; then
    echo "copying $src to $dest"
    rm -rf "$dest.partial"
    nice -n 15 git clone -q --bare --no-local "$src" "$dest.partial"
    git -C "$dest.partial" remote remove origin
    git -C "$dest.partial" config gixdbench.origin "$origin"
    mv "$dest.partial" "$dest"
  fi
  args="$args --repo $dest"
done

if [ -n "$copy_only" ]; then
  exit 0
fi
# shellcheck disable=SC2086
exec nice -n 15 cargo xtask bench real --rounds "$rounds" $args
