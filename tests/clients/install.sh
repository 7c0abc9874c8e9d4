#!/usr/bin/env bash
# Installs what the git client matrix (tests/clients/matrix.py) needs on a Debian 12 machine, and
# builds its JGit and go-git drivers. Idempotent and quiet: a second run changes nothing and prints
# only the summary. A client that cannot be installed does not fail the script: it says so and
# goes on, and the runner then reports that client's cells as skip, with the reason.
#
#   bash tests/clients/install.sh [CACHE]     # CACHE defaults to $GIXD_CLIENTS_CACHE or <repo>/target/clients
#
# What goes where:
#   apt   libjgit-java (+ slf4j, javaewah, jsch), a JDK if javac is missing, golang-go,
#         golang-github-go-git-go-git-dev (sources under /usr/share/gocode), lighttpd (the control
#         HTTP server in front of git http-backend)
#   pip   pygit2 and dulwich as pinned in requirements.txt, into CACHE/venv
#   npm   isomorphic-git as pinned in package.json/package-lock.json, into CACHE/node_modules
#   build CACHE/jgit (javac) and CACHE/gogit/gogit (go build, offline), through matrix.py --prepare
set -uo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
repo="$(cd "$here/../.." && pwd)"
cache="${1:-${GIXD_CLIENTS_CACHE:-$repo/target/clients}}"
mkdir -p "$cache"
cache="$(cd "$cache" && pwd)"
problems=()
note() { echo "clients: $*"; }

if [ "$(id -u)" = 0 ]; then SUDO=(); else SUDO=(sudo -n); fi

# --- Debian packages
have_pkg() { dpkg-query -W -f='${Status}' "$1" 2>/dev/null | grep -q "install ok installed"; }
want=(libjgit-java libslf4j-java libjavaewah-java libjsch-java golang-go golang-github-go-git-go-git-dev lighttpd lighttpd-mod-openssl)
command -v javac >/dev/null || want+=(default-jdk-headless)
command -v node >/dev/null || want+=(nodejs)
command -v npm >/dev/null || want+=(npm)
missing=()
for p in "${want[@]}"; do have_pkg "$p" || missing+=("$p"); done
if [ ${#missing[@]} -gt 0 ]; then
  note "apt-get install ${missing[*]}"
  "${SUDO[@]}" apt-get update -qq >/dev/null 2>&1 || note "apt-get update failed"
  if ! DEBIAN_FRONTEND=noninteractive "${SUDO[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null 2>&1; then
    # One at a time, so that one broken package costs only its own client.
    for p in "${missing[@]}"; do
      DEBIAN_FRONTEND=noninteractive "${SUDO[@]}" apt-get install -y -qq --no-install-recommends "$p" >/dev/null 2>&1 \
        || problems+=("apt package $p could not be installed")
    done
  fi
fi

# --- Python: pygit2 and dulwich in a venv under the cache
venv="$cache/venv"
req="$here/requirements.txt"
stamp="$venv/.requirements"
if [ -x "$venv/bin/python" ] && [ -f "$stamp" ] && cmp -s "$req" "$stamp"; then
  :
else
  if [ ! -x "$venv/bin/python" ]; then
    python3 -m venv "$venv" >/dev/null 2>&1 || problems+=("python3 -m venv $venv failed (pygit2, dulwich)")
  fi
  if [ -x "$venv/bin/python" ]; then
    note "pip install -r requirements.txt into $venv"
    ok=1
    # Each requirement on its own: a wheel that will not install costs only its client.
    while read -r line; do
      line="${line%%#*}"; line="$(echo "$line" | tr -d '[:space:]')"
      [ -n "$line" ] || continue
      "$venv/bin/python" -m pip install --quiet --disable-pip-version-check "$line" >/dev/null 2>&1 \
        || { problems+=("pip install $line failed"); ok=0; }
    done < "$req"
    [ $ok = 1 ] && cp "$req" "$stamp"
  fi
fi

# --- Node: isomorphic-git under the cache
if command -v npm >/dev/null; then
  if ! cmp -s "$here/package-lock.json" "$cache/package-lock.json" || [ ! -f "$cache/node_modules/isomorphic-git/package.json" ]; then
    note "npm ci (isomorphic-git) into $cache"
    cp "$here/package.json" "$here/package-lock.json" "$cache/"
    (cd "$cache" && npm ci --silent --no-audit --no-fund >/dev/null 2>&1) || {
      problems+=("npm ci of isomorphic-git failed")
      rm -f "$cache/package-lock.json"
    }
  fi
else
  problems+=("npm not found (isomorphic-git)")
fi

# --- build the JGit and go-git drivers now, so that the matrix run itself does not
python3 "$here/matrix.py" --prepare --cache "$cache" 2> "$cache/prepare.log"
while read -r line; do
  case "$line" in *unavailable*) problems+=("${line#matrix: }") ;; esac
done < "$cache/prepare.log"

for p in "${problems[@]}"; do note "WARNING: $p"; done
note "$(grep -c -v unavailable "$cache/prepare.log") of $(wc -l < "$cache/prepare.log") clients ready ($cache)"
exit 0
