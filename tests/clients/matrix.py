#!/usr/bin/env python3
"""Git client matrix: drive several non-git-CLI git clients through a fixed scenario against
every given smart-git server and print one JSON object per cell on stdout.

    python3 tests/clients/matrix.py --servers servers.json [--clients pygit2,dulwich,jgit,gogit,isogit]
                                    [--work DIR] [--cache DIR] [--markdown FILE] [--jobs N]

servers.json is a list of {"name", "base", "http", "git", "https", "ssh", "ca", "http_user",
"http_password", "ssh_key", "known_hosts"}: "base" is the directory the server serves repositories
from ("<url>/<name>.git" is "<base>/<name>.git"), "http", "git", "https" and "ssh" the URL prefixes
(or null when the server does not offer that transport), "ca" the PEM certificate of the CA its
HTTPS certificate is signed by (each client is told to trust it the way it reads trust:
SSL_CERT_FILE for OpenSSL and Go, NODE_EXTRA_CA_CERTS for node, http.sslCAInfo in the .gitconfig of
a HOME of its own for dulwich, a PKCS#12 trust store for Java), "ssh_key" the private key the
clients log in with and "known_hosts" the server's host keys (each client is told them its own
way: GIT_SSH_COMMAND for dulwich's OpenSSH, GIXD_CLIENT_SSH_KEY/GIXD_CLIENT_KNOWN_HOSTS for the
libgit2 and go-git drivers, a ~/.ssh of user.home for JGit's JSch).

Each cell is {"client", "server", "transport", "protocol", "step", "status", "detail", "seconds"}
with status pass|fail|skip. The runner exits 0 whatever the cells say; non-zero only on its own
errors (bad arguments, unreadable servers.json, seed creation failed). Standard library only: the
clients' own packages are installed by tests/clients/install.sh (into the cache directory).

Scenario per (client, server, transport): for each protocol version (v0, v2) a repository copied
from a deterministic seed and the steps clone, fetch (after the server gained commits and tags),
shallow (clone --depth 1); then, in another copy, push-branch, push-non-ff-refused (with
receive.denyNonFastForwards) and delete. Server-side set-up and every check use stock git.
"""
import argparse
import concurrent.futures
import hashlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent.parent
CLIENT_ORDER = ["pygit2", "dulwich", "jgit", "gogit", "isogit"]
TRANSPORTS = ["http", "git", "https", "ssh"]
PROTOCOLS = ["v0", "v2"]
FETCH_STEPS = ["clone", "fetch", "shallow"]
PUSH_STEPS = ["push-branch", "push-non-ff-refused", "delete"]
STEP_ORDER = FETCH_STEPS + PUSH_STEPS
TIMEOUT = 120  # seconds per client command
GIT_TIMEOUT = 120

IDENT = {
    "GIT_AUTHOR_NAME": "Matrix Author",
    "GIT_AUTHOR_EMAIL": "author@matrix.invalid",
    "GIT_COMMITTER_NAME": "Matrix Committer",
    "GIT_COMMITTER_EMAIL": "committer@matrix.invalid",
}
# Variables of the caller's environment that would steer stock git or a client somewhere else.
SCRUB = [
    "GIT_DIR", "GIT_WORK_TREE", "GIT_INDEX_FILE", "GIT_OBJECT_DIRECTORY", "GIT_ALTERNATE_OBJECT_DIRECTORIES",
    "GIT_CONFIG", "GIT_CONFIG_GLOBAL", "GIT_CONFIG_PARAMETERS", "GIT_CONFIG_COUNT", "GIT_PROTOCOL",
    "GIT_NAMESPACE", "GIT_CEILING_DIRECTORIES", "GIT_CLIENT_USER", "GIXD_CLIENT_USER", "GIXD_CLIENT_PASSWORD",
    "http_proxy", "https_proxy", "HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "all_proxy",
]


class RunnerError(Exception):
    pass


class Skip(Exception):
    pass


# ---------------------------------------------------------------------------------------------
# stock git helpers


class Git:
    """Stock git with a private HOME and fixed identities, for the seed, server-side changes and checks."""

    def __init__(self, home: Path):
        home.mkdir(parents=True, exist_ok=True)
        env = {k: v for k, v in os.environ.items() if k not in SCRUB}
        env.update(IDENT)
        env.update({"HOME": str(home), "GIT_CONFIG_NOSYSTEM": "1", "GIT_TERMINAL_PROMPT": "0",
                    "LC_ALL": "C", "GIT_ADVICE": "0"})
        self.env = env

    def run(self, *args, git_dir=None, cwd=None, input=None, env=None, check=True):
        cmd = ["git"]
        if git_dir is not None:
            cmd.append(f"--git-dir={git_dir}")
        cmd += [str(a) for a in args]
        e = dict(self.env)
        if env:
            e.update(env)
        p = subprocess.run(cmd, cwd=cwd, input=input, env=e, capture_output=True, timeout=GIT_TIMEOUT)
        if check and p.returncode != 0:
            raise RunnerError(f"{' '.join(cmd)} failed ({p.returncode}): {p.stderr.decode(errors='replace').strip()}")
        return p

    def out(self, *args, **kw):
        return self.run(*args, **kw).stdout.decode().strip()

    @staticmethod
    def dated(when):
        """Fixed dates keep every object id the same from run to run and from server to server."""
        d = f"{when} +0000"
        return {"GIT_AUTHOR_DATE": d, "GIT_COMMITTER_DATE": d}

    def refs(self, git_dir):
        out = self.out("for-each-ref", "--format=%(objectname) %(refname)", git_dir=git_dir)
        refs = {}
        for line in out.splitlines():
            sha, name = line.split(" ", 1)
            refs[name] = sha
        return refs

    def commit(self, git_dir, parent, path, content, message, when):
        """A commit on top of `parent` that sets `path` to `content`, written with plumbing only."""
        blob = self.out("hash-object", "-w", "--stdin", git_dir=git_dir, input=content.encode())
        with tempfile.TemporaryDirectory() as tmp:
            idx = {"GIT_INDEX_FILE": str(Path(tmp) / "index")}
            self.run("read-tree", parent, git_dir=git_dir, env=idx)
            self.run("update-index", "--add", "--cacheinfo", f"100644,{blob},{path}", git_dir=git_dir, env=idx)
            tree = self.out("write-tree", git_dir=git_dir, env=idx)
        return self.out("commit-tree", tree, "-p", parent, "-m", message, git_dir=git_dir, env=self.dated(when))

    def tag(self, git_dir, name, target, message, when):
        self.run("tag", "-a", name, "-m", message, target, git_dir=git_dir, env=self.dated(when))


def gitdir_of(path: Path) -> Path:
    return path / ".git" if (path / ".git").exists() else path


def make_seed(git: Git, seed: Path):
    """A deterministic bare repository: 30 commits on main, topic off commit 5, annotated tags on
    old commits (v0.1 on 3, v0.2 on 10), a tag of a tag, a lightweight tag, a tag on topic."""
    if seed.exists():
        shutil.rmtree(seed)
    git.run("init", "--quiet", "--bare", "-b", "main", seed)
    stream = []
    t = 1_600_000_000

    def data(text):
        b = text.encode()
        stream.append(f"data {len(b)}\n".encode() + b + b"\n")

    def commit(ref, mark, parent, files, msg):
        nonlocal t
        t += 3600
        stream.append(f"commit {ref}\nmark :{mark}\n".encode())
        stream.append(f"author {IDENT['GIT_AUTHOR_NAME']} <{IDENT['GIT_AUTHOR_EMAIL']}> {t} +0000\n".encode())
        stream.append(f"committer {IDENT['GIT_COMMITTER_NAME']} <{IDENT['GIT_COMMITTER_EMAIL']}> {t} +0000\n".encode())
        data(msg)
        if parent:
            stream.append(f"from :{parent}\n".encode())
        for path, content in files.items():
            stream.append(f"M 100644 inline {path}\n".encode())
            data(content)

    long_text = "".join(f"line {i}: the quick brown fox jumps over the lazy dog\n" for i in range(400))
    for i in range(1, 31):
        files = {
            "README.md": f"# seed\n\nrevision {i}\n",
            "src/numbers.txt": "".join(f"{n}\n" for n in range(i * 10)),
            "docs/long.txt": long_text + f"edited in commit {i}\n",  # deltas between commits
        }
        if i % 7 == 0:
            files[f"notes/note-{i}.txt"] = f"note {i}\n"
        commit("refs/heads/main", i, i - 1 if i > 1 else None, files, f"main commit {i}\n")
    for j in range(1, 4):
        commit("refs/heads/topic", 100 + j, 5 if j == 1 else 100 + j - 1,
               {"topic.txt": f"topic {j}\n"}, f"topic commit {j}\n")
    stream.append(b"done\n")
    git.run("fast-import", "--quiet", "--done", git_dir=seed, input=b"".join(stream))
    main = git.out("rev-parse", "refs/heads/main", git_dir=seed)
    git.tag(seed, "v0.1", f"{main}~27", "release 0.1 (commit 3)", t + 100)
    git.tag(seed, "v0.2", f"{main}~20", "release 0.2 (commit 10)", t + 200)
    git.tag(seed, "v0.2-meta", "refs/tags/v0.2", "a tag of the tag v0.2", t + 300)
    git.run("tag", "light", f"{main}~23", git_dir=seed)  # lightweight, commit 7
    git.tag(seed, "topic-1", "refs/heads/topic~1", "on the topic branch", t + 400)
    git.run("symbolic-ref", "HEAD", "refs/heads/main", git_dir=seed)
    git.run("repack", "-adq", git_dir=seed)
    git.run("pack-refs", "--all", git_dir=seed)
    git.run("fsck", "--full", "--no-progress", git_dir=seed)


# ---------------------------------------------------------------------------------------------
# clients


def first_lines(text, n=3, limit=400):
    if isinstance(text, bytes):
        text = text.decode(errors="replace")
    lines = [l.strip() for l in text.strip().splitlines() if l.strip()]
    s = " | ".join(lines[:n])
    return s if len(s) <= limit else s[: limit - 3] + "..."


class Client:
    name = ""
    transports = set(TRANSPORTS)

    def __init__(self, cache: Path):
        self.cache = cache
        self.argv = None
        self.env = {}
        self.version = "?"

    def prepare(self):
        """Set self.argv (the driver command) or raise Skip with the reason."""
        raise NotImplementedError

    def transport_skip(self, transport):
        return None


def run_quiet(cmd, **kw):
    try:
        return subprocess.run(cmd, capture_output=True, timeout=kw.pop("timeout", 600), **kw)
    except FileNotFoundError as e:
        raise Skip(f"{cmd[0]} not found: {e}")
    except subprocess.TimeoutExpired:
        raise Skip(f"{' '.join(map(str, cmd[:3]))} timed out")


def stamp_ok(stamp: Path, key: str, outputs):
    return stamp.is_file() and stamp.read_text() == key and all(Path(o).exists() for o in outputs)


def find_python(cache: Path, module: str):
    candidates = [cache / "venv" / "bin" / "python", Path(sys.executable)]
    errors = []
    for py in candidates:
        if not py.exists():
            continue
        p = run_quiet([str(py), "-c", f"import {module}; v = getattr({module}, '__version__', '?'); "
                       f"print('.'.join(map(str, v)) if isinstance(v, tuple) else v)"], timeout=60)
        if p.returncode == 0:
            return str(py), p.stdout.decode().strip()
        last = (p.stderr.decode(errors="replace").strip().splitlines() or ["?"])[-1]
        errors.append(f"{py}: {last}")
    raise Skip(f"python module {module} not installed (tests/clients/install.sh): " + "; ".join(errors))


class Pygit2(Client):
    name = "pygit2"

    def prepare(self):
        py, version = find_python(self.cache, "pygit2")
        p = run_quiet([py, "-c", "import pygit2; print(pygit2.LIBGIT2_VERSION)"])
        self.version = f"pygit2 {version} (libgit2 {p.stdout.decode().strip()})"
        self.argv = [py, str(HERE / "pygit2_client.py")]


class Dulwich(Client):
    name = "dulwich"

    def prepare(self):
        py, version = find_python(self.cache, "dulwich")
        self.version = f"dulwich {version}"
        self.argv = [py, str(HERE / "dulwich_client.py")]


class JGit(Client):
    name = "jgit"

    def jars(self):
        jgit = None
        p = run_quiet(["dpkg", "-L", "libjgit-java"])
        for line in p.stdout.decode().splitlines():
            if re.search(r"/org\.eclipse\.jgit\.jar$", line):
                jgit = line.strip()
        if not jgit or not Path(jgit).is_file():
            raise Skip("libjgit-java is not installed (tests/clients/install.sh)")
        jars = [jgit]
        for name in ["slf4j-api", "slf4j-nop", "javaewah", "jsch", "jzlib"]:
            path = Path("/usr/share/java") / f"{name}.jar"
            if path.is_file():
                jars.append(str(path))
            elif name in ("slf4j-api", "javaewah"):
                raise Skip(f"{path} is missing (apt-get install libslf4j-java libjavaewah-java)")
        versioned = sorted(Path(jgit).parent.glob("org.eclipse.jgit-*.jar"))
        self.version = versioned[0].name[:-4] if versioned else "jgit"
        return jars

    def prepare(self):
        if not shutil.which("javac") or not shutil.which("java"):
            raise Skip("java/javac not found (apt-get install default-jdk-headless)")
        jars = self.jars()
        classpath = ":".join(jars)
        source = HERE / "JGitClient.java"
        out = self.cache / "jgit"
        key = hashlib.sha256(source.read_bytes() + classpath.encode()).hexdigest()
        stamp = out / "stamp"
        if not stamp_ok(stamp, key, [out / "JGitClient.class"]):
            if out.exists():
                shutil.rmtree(out)
            out.mkdir(parents=True)
            p = run_quiet(["javac", "-nowarn", "-d", str(out), "-cp", classpath, str(source)])
            if p.returncode != 0:
                raise Skip(f"javac JGitClient.java failed: {first_lines(p.stderr)}")
            stamp.write_text(key)
        self.argv = ["java", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1", "-Xshare:auto",
                     "-cp", f"{classpath}:{out}", "JGitClient"]


GOCODE = Path("/usr/share/gocode/src")


class GoGit(Client):
    name = "gogit"

    def prepare(self):
        go = shutil.which("go")
        if not go:
            raise Skip("go not found (apt-get install golang-go)")
        gogit_src = GOCODE / "github.com/go-git/go-git"
        if not (gogit_src / "go.mod").is_file():
            raise Skip("go-git sources missing (apt-get install golang-github-go-git-go-git-dev)")
        m = re.search(r"golang-github-go-git-go-git-dev\s+(\S+)",
                      run_quiet(["dpkg-query", "-W", "golang-github-go-git-go-git-dev"]).stdout.decode())
        self.version = f"go-git {m.group(1) if m else '?'}"
        source = HERE / "gogit" / "main.go"
        out = self.cache / "gogit"
        binary = out / "gogit"
        goversion = run_quiet([go, "version"]).stdout.decode().strip()
        key = hashlib.sha256(source.read_bytes() + goversion.encode() + self.version.encode()).hexdigest()
        stamp = out / "stamp"
        if not stamp_ok(stamp, key, [binary]):
            # GOPATH mode, offline: Debian's sources under /usr/share/gocode plus a private GOPATH
            # holding the driver and a go-git/v5 link (GOPATH mode has no /vN import paths).
            gopath = out / "gopath"
            if gopath.exists():
                shutil.rmtree(gopath)
            pkg = gopath / "src" / "gixd-gogit"
            pkg.mkdir(parents=True)
            shutil.copy(source, pkg / "main.go")
            v5 = gopath / "src/github.com/go-git/go-git/v5"
            v5.parent.mkdir(parents=True)
            v5.symlink_to(gogit_src)
            env = {k: v for k, v in os.environ.items() if not k.startswith("GO")}
            env.update({"GO111MODULE": "off", "GOPATH": f"{gopath}:{GOCODE.parent}", "GOPROXY": "off",
                        "GOFLAGS": "", "GOCACHE": str(out / "gocache"), "CGO_ENABLED": "0",
                        "GOTOOLCHAIN": "local", "HOME": str(out)})
            p = run_quiet([go, "build", "-o", str(binary), "."], cwd=pkg, env=env, timeout=900)
            if p.returncode != 0:
                raise Skip(f"go build of the go-git driver failed: {first_lines(p.stderr, 4)}")
            stamp.write_text(key)
        self.argv = [str(binary)]


class IsoGit(Client):
    name = "isogit"
    transports = {"http", "https"}

    def prepare(self):
        node = shutil.which("node")
        if not node:
            raise Skip("node not found (apt-get install nodejs)")
        pkg = self.cache / "node_modules" / "isomorphic-git" / "package.json"
        if not pkg.is_file():
            raise Skip(f"isomorphic-git not installed in {self.cache}/node_modules (tests/clients/install.sh)")
        self.version = f"isomorphic-git {json.loads(pkg.read_text()).get('version', '?')}"
        self.argv = [node, str(HERE / "isogit.mjs")]
        self.env = {"GIXD_CLIENTS_CACHE": str(self.cache)}

    def transport_skip(self, transport):
        if transport in ("git", "ssh"):
            return f"isomorphic-git has no {transport} transport (HTTP only)"
        return None


CLIENTS = {c.name: c for c in [Pygit2, Dulwich, JGit, GoGit, IsoGit]}


# ---------------------------------------------------------------------------------------------
# the scenario


class Result:
    def __init__(self, status, detail=""):
        self.status, self.detail = status, detail


class Matrix:
    def __init__(self, args, servers, clients, git: Git, seed: Path, work: Path):
        self.args = args
        self.servers = servers
        self.clients = clients
        self.git = git
        self.seed = seed
        self.work = work
        self.cells = []
        self.lock = threading.Lock()
        bases = [s["base"] for s in servers]
        self.shared_base = {b for b in bases if bases.count(b) > 1}

    # --- output
    def emit(self, client, server, transport, protocol, step, status, detail, seconds):
        cell = {"client": client, "server": server["name"], "transport": transport, "protocol": protocol,
                "step": step, "status": status, "detail": detail, "seconds": round(seconds, 2)}
        with self.lock:
            self.cells.append(cell)
            print(json.dumps(cell), flush=True)

    def skip_all(self, client, server, transport, reason):
        for proto in PROTOCOLS:
            for step in FETCH_STEPS:
                self.emit(client, server, transport, proto, step, "skip", reason, 0)
        for step in PUSH_STEPS:
            self.emit(client, server, transport, "-", step, "skip", reason, 0)

    # --- driver invocation
    def driver(self, client: Client, server, transport, *args):
        env = {k: v for k, v in os.environ.items() if k not in SCRUB}
        env.update({"HOME": str(self.work / "home"), "GIT_CONFIG_NOSYSTEM": "1", "GIT_TERMINAL_PROMPT": "0"})
        env.update(client.env)
        if transport == "https" and server.get("ca"):
            env.update(self.trust(server["ca"]))
        if transport == "ssh":
            env.update(self.ssh_env(server))
        if transport in ("http", "https"):
            if server.get("http_user"):
                env["GIXD_CLIENT_USER"] = server["http_user"]
            if server.get("http_password"):
                env["GIXD_CLIENT_PASSWORD"] = server["http_password"]
        cmd = client.argv + [str(a) for a in args]
        p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL,
                             env=env, start_new_session=True)
        try:
            out, err = p.communicate(timeout=self.args.timeout)
        except subprocess.TimeoutExpired:
            try:
                os.killpg(p.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            p.communicate()
            return None, ""
        return p.returncode, (err or b"").decode(errors="replace") + (out or b"").decode(errors="replace")

    def trust(self, ca):
        """The environment that makes every client trust the CA of `ca` (a PEM file)."""
        ca = str(ca)
        home = self.work / "trust" / hashlib.sha1(ca.encode()).hexdigest()[:12]
        gitconfig, store = home / ".gitconfig", home / "trust.p12"
        with self.lock:
            if not gitconfig.is_file():
                home.mkdir(parents=True, exist_ok=True)
                gitconfig.write_text(f"[http]\n\tsslCAInfo = {ca}\n")
                keytool = shutil.which("keytool")
                if keytool and not store.is_file():
                    run_quiet([keytool, "-importcert", "-noprompt", "-alias", "matrix-ca", "-file", ca,
                               "-keystore", str(store), "-storetype", "PKCS12", "-storepass", "changeit"], timeout=60)
        env = {"SSL_CERT_FILE": ca, "NODE_EXTRA_CA_CERTS": ca, "GIT_SSL_CAINFO": ca, "HOME": str(home),
               "REQUESTS_CA_BUNDLE": ca}
        if store.is_file():
            env["JAVA_TOOL_OPTIONS"] = (f"-Djavax.net.ssl.trustStore={store} -Djavax.net.ssl.trustStoreType=PKCS12 "
                                        "-Djavax.net.ssl.trustStorePassword=changeit")
        return env

    def ssh_env(self, server):
        """The environment that makes every client log in with the server's `ssh_key` and check its
        host key against `known_hosts`."""
        key, known = str(server["ssh_key"]), str(server["known_hosts"])
        home = self.work / "ssh" / hashlib.sha1((key + known).encode()).hexdigest()[:12]
        with self.lock:
            if not (home / ".ssh" / "config").is_file():
                (home / ".ssh").mkdir(parents=True, exist_ok=True)
                shutil.copy(known, home / ".ssh" / "known_hosts")
                (home / ".ssh" / "config").write_text(
                    f"Host *\n  IdentityFile {key}\n  StrictHostKeyChecking yes\n"
                    f"  UserKnownHostsFile {home / '.ssh' / 'known_hosts'}\n")
        command = (f"ssh -F /dev/null -i {key} -o IdentitiesOnly=yes -o BatchMode=yes -o StrictHostKeyChecking=yes "
                   f"-o UserKnownHostsFile={known} -o GlobalKnownHostsFile=/dev/null")
        return {"GIT_SSH_COMMAND": command, "GIXD_CLIENT_SSH_KEY": key, "GIXD_CLIENT_KNOWN_HOSTS": known,
                "HOME": str(home), "JAVA_TOOL_OPTIONS": f"-Duser.home={home}"}

    def call(self, client, server, transport, *args):
        """Run the driver: None on success, else a Result (fail, or skip for exit code 3)."""
        rc, text = self.driver(client, server, transport, *args)
        if rc is None:
            return Result("fail", f"timeout ({self.args.timeout} s): {client.name} {args[0]}")
        if rc == 3:
            return Result("skip", first_lines(text) or "client cannot do this (exit 3)")
        if rc != 0:
            return Result("fail", f"{args[0]} exited {rc}: {first_lines(text)}")
        return None

    # --- checks
    def compare_refs(self, server_repo: Path, client_dir: Path):
        server = {k: v for k, v in self.git.refs(server_repo).items() if k.startswith(("refs/heads/", "refs/tags/"))}
        raw = self.git.refs(gitdir_of(client_dir))
        remotes = {"refs/heads/" + k[len("refs/remotes/origin/"):]: v for k, v in raw.items()
                   if k.startswith("refs/remotes/origin/") and k != "refs/remotes/origin/HEAD"}
        if not remotes:  # a bare clone maps the server's branches onto refs/heads/*
            remotes = {k: v for k, v in raw.items() if k.startswith("refs/heads/")}
        client = dict(remotes)
        client.update({k: v for k, v in raw.items() if k.startswith("refs/tags/")})
        problems = []
        for k in sorted(set(server) | set(client)):
            if k not in client:
                problems.append(f"missing {k}")
            elif k not in server:
                problems.append(f"extra {k}")
            elif client[k] != server[k]:
                problems.append(f"{k} is {client[k][:10]}, server {server[k][:10]}")
        if problems:
            more = f" (+{len(problems) - 6} more)" if len(problems) > 6 else ""
            return "refs differ: " + "; ".join(problems[:6]) + more
        return None

    def fsck(self, repo: Path):
        p = self.git.run("fsck", "--full", "--no-progress", "--no-dangling", git_dir=gitdir_of(repo), check=False)
        if p.returncode != 0:
            return f"git fsck failed ({p.returncode}): {first_lines(p.stderr + p.stdout)}"
        return None

    def check_clone(self, server_repo, client_dir):
        if not gitdir_of(client_dir).is_dir():
            return "client exited 0 but made no repository"
        return self.compare_refs(server_repo, client_dir) or self.fsck(client_dir)

    # --- server-side set-up
    def server_repo(self, server, client, transport, proto):
        name = f"{client.name}-{transport}-{proto}"
        if server["base"] in self.shared_base:
            name = re.sub(r"[^A-Za-z0-9_-]", "-", server["name"]) + "-" + name
        name += ".git"
        path = Path(server["base"]) / name
        if path.exists():
            shutil.rmtree(path)
        shutil.copytree(self.seed, path, symlinks=True)
        for key, value in [("http.receivepack", "true"), ("receive.denyNonFastForwards", "false"),
                           ("receive.denyDeletes", "false")]:
            self.git.run("config", key, value, git_dir=path)
        return path, f"{server[transport].rstrip('/')}/{name}"

    def advance(self, repo: Path):
        """Three new commits on main, an annotated tag on an old commit and one on the new tip."""
        g = self.git
        old_main = g.out("rev-parse", "refs/heads/main", git_dir=repo)
        tip = old_main
        for i in range(1, 4):
            tip = g.commit(repo, tip, f"new/file-{i}.txt", f"new content {i}\n" * (i * 50), f"new commit {i}",
                           1_700_000_000 + i * 60)
        g.run("update-ref", "refs/heads/main", tip, old_main, git_dir=repo)
        g.tag(repo, "v0.3-late", f"{old_main}~15", "annotated tag on an old commit, added after the clone",
              1_700_000_300)
        g.tag(repo, "v1.0", tip, "annotated tag on the new tip", 1_700_000_400)

    def stock_clone(self, server_repo: Path, url: str, dest: Path):
        """Fallback when a client's own clone failed, so that later steps still run."""
        if dest.exists():
            shutil.rmtree(dest)
        self.git.run("clone", "--quiet", "--no-hardlinks", server_repo, dest)
        self.git.run("remote", "set-url", "origin", url, git_dir=dest / ".git")

    # --- groups
    def fetch_group(self, client, server, transport, proto, gdir: Path):
        emit = lambda step, res, t0: self.emit(client.name, server, transport, proto, step, res.status, res.detail,
                                                time.monotonic() - t0)
        repo, url = self.server_repo(server, client, transport, proto)
        popt = ["--protocol", proto]

        # clone
        t0 = time.monotonic()
        dest = gdir / f"clone-{proto}"
        res = self.call(client, server, transport, "clone", url, dest, *popt)
        if res is None:
            problem = self.check_clone(repo, dest)
            res = Result("fail", problem) if problem else Result("pass", "")
        emit("clone", res, t0)
        usable = res.status == "pass"

        # fetch
        note = ""
        if not usable:
            self.stock_clone(repo, url, dest)
            note = " (the clone step did not pass: fetched into a stock-git clone)"
        self.advance(repo)
        t0 = time.monotonic()
        res = self.call(client, server, transport, "fetch", dest, *popt)
        if res is None:
            problem = self.compare_refs(repo, dest) or self.fsck(dest)
            res = Result("fail", problem) if problem else Result("pass", "")
        if res.status != "skip":
            res.detail = (res.detail + note).strip()
        emit("fetch", res, t0)

        # shallow
        t0 = time.monotonic()
        dest = gdir / f"shallow-{proto}"
        res = self.call(client, server, transport, "clone", url, dest, "--depth", "1", *popt)
        if res is None:
            res = self.check_shallow(repo, dest)
        emit("shallow", res, t0)

    def check_shallow(self, repo, dest):
        g = self.git
        gd = gitdir_of(dest)
        if not gd.is_dir():
            return Result("fail", "client exited 0 but made no repository")
        main = g.out("rev-parse", "refs/heads/main", git_dir=repo)
        head = g.run("rev-parse", "--verify", "HEAD^{commit}", git_dir=gd, check=False).stdout.decode().strip()
        if head != main:
            return Result("fail", f"HEAD is {head[:10] or 'unresolvable'}, server main {main[:10]}")
        if not (gd / "shallow").is_file():
            return Result("fail", "no shallow file: the clone is not shallow")
        problem = self.fsck(dest)
        if problem:
            return Result("fail", problem)
        count = g.out("rev-list", "--count", "HEAD", git_dir=gd)
        if count != "1":
            return Result("fail", f"--depth 1 gave {count} commits on HEAD")
        return Result("pass", "")

    def push_group(self, client, server, transport, gdir: Path):
        g = self.git
        emit = lambda step, res, t0: self.emit(client.name, server, transport, "-", step, res.status, res.detail,
                                                time.monotonic() - t0)
        repo, url = self.server_repo(server, client, transport, "push")
        dest = gdir / "push"
        note = ""
        t0 = time.monotonic()
        res = self.call(client, server, transport, "clone", url, dest)
        if res is not None or not gitdir_of(dest).is_dir():
            self.stock_clone(repo, url, dest)
            note = f" (client clone failed, pushing from a stock-git clone: {res.detail if res else 'no repository'})"
        local = gitdir_of(dest)
        main = g.out("rev-parse", "refs/heads/main", git_dir=repo)

        def server_ref(name):
            return g.refs(repo).get(name)

        def ensure_feature(sha):
            if server_ref("refs/heads/feature") != sha:
                g.run("push", "--quiet", "--force", repo, f"{sha}:refs/heads/feature", git_dir=local)
                return " (set up refs/heads/feature on the server with stock git)"
            return ""

        # push-branch
        c1 = g.commit(local, main, "feature.txt", "feature work\n" * 20, "feature commit", 1_700_001_000)
        g.run("update-ref", "refs/heads/feature", c1, git_dir=local)
        res = self.call(client, server, transport, "push", dest, "refs/heads/feature:refs/heads/feature")
        if res is None:
            got = server_ref("refs/heads/feature")
            if got != c1:
                res = Result("fail", f"server refs/heads/feature is {got and got[:10]}, pushed {c1[:10]}")
            else:
                p = g.run("fsck", "--full", "--no-progress", "--no-dangling", git_dir=repo, check=False)
                res = Result("fail", f"server repository fails fsck after the push: {first_lines(p.stderr)}") \
                    if p.returncode else Result("pass", "")
        res.detail = (res.detail + note).strip()
        emit("push-branch", res, t0)

        # push-non-ff-refused
        t0 = time.monotonic()
        note2 = ensure_feature(c1)
        g.run("config", "receive.denyNonFastForwards", "true", git_dir=repo)
        # A refusal only counts from a client that can push at all: first a new ref, which must land.
        c3 = g.commit(local, main, "probe.txt", "probe\n", "probe commit", 1_700_003_000)
        g.run("update-ref", "refs/heads/probe", c3, git_dir=local)
        probe = self.call(client, server, transport, "push", dest, "refs/heads/probe:refs/heads/probe")
        if probe is None and server_ref("refs/heads/probe") != c3:
            probe = Result("fail", "server has no refs/heads/probe after the push")
        c2 = g.commit(local, main, "feature.txt", "rewritten feature work\n" * 20, "rewritten feature commit",
                      1_700_002_000)
        g.run("update-ref", "refs/heads/feature", c2, git_dir=local)
        if probe is None:
            rc, text = self.driver(client, server, transport, "push", dest, "+refs/heads/feature:refs/heads/feature",
                                   "--force")
        got = server_ref("refs/heads/feature")
        if probe is not None:
            res = Result(probe.status, f"the push of a new ref (refs/heads/probe) before the non-fast-forward "
                                       f"did not pass: {probe.detail}")
        elif rc is None:
            res = Result("fail", f"timeout ({self.args.timeout} s)")
        elif rc == 3:
            res = Result("skip", first_lines(text))
        elif got != c1:
            res = Result("fail", f"server accepted the non-fast-forward: feature is {got and got[:10]}, was {c1[:10]}")
        elif rc == 0:
            res = Result("fail", "server kept the ref but the client reported success (rejection not seen)")
        else:
            res = Result("pass", f"refused: {first_lines(text, 2, 200)}")
        res.detail = (res.detail + note2).strip()
        emit("push-non-ff-refused", res, t0)

        # delete
        t0 = time.monotonic()
        g.run("config", "receive.denyNonFastForwards", "false", git_dir=repo)
        note3 = ensure_feature(c1)
        g.run("update-ref", "refs/heads/feature", c1, git_dir=local)
        res = self.call(client, server, transport, "delete", dest, "refs/heads/feature")
        if res is None:
            got = server_ref("refs/heads/feature")
            res = Result("fail", f"server still has refs/heads/feature at {got[:10]}") if got else Result("pass", "")
        res.detail = (res.detail + note3).strip()
        emit("delete", res, t0)

    def group(self, client: Client, server, transport, skip_reason):
        if skip_reason:
            self.skip_all(client.name, server, transport, skip_reason)
            return
        gdir = self.work / "clients" / re.sub(r"[^A-Za-z0-9_-]", "-", server["name"]) / f"{client.name}-{transport}"
        if gdir.exists():
            shutil.rmtree(gdir)
        gdir.mkdir(parents=True)
        for proto in PROTOCOLS:
            try:
                self.fetch_group(client, server, transport, proto, gdir)
            except (RunnerError, subprocess.TimeoutExpired, OSError) as e:
                self.emit(client.name, server, transport, proto, "clone", "fail", f"runner: {e}"[:400], 0)
        try:
            self.push_group(client, server, transport, gdir)
        except (RunnerError, subprocess.TimeoutExpired, OSError) as e:
            self.emit(client.name, server, transport, "-", "push-branch", "fail", f"runner: {e}"[:400], 0)

    def run(self):
        jobs = []
        for name, client, reason in self.clients:
            for server in self.servers:
                for transport in TRANSPORTS:
                    skip = reason
                    if not skip and not server.get(transport):
                        skip = f"server offers no {transport} URL"
                    if not skip:
                        skip = client.transport_skip(transport)
                    jobs.append((client, server, transport, skip))
        with concurrent.futures.ThreadPoolExecutor(max_workers=max(1, self.args.jobs)) as pool:
            futures = [pool.submit(self.group, *j) for j in jobs]
            for f in futures:
                f.result()


# ---------------------------------------------------------------------------------------------
# markdown


def markdown(cells, servers, versions):
    names = [s["name"] for s in servers]
    rows = {}
    for c in cells:
        key = (c["client"], c["transport"], c["protocol"], c["step"])
        rows.setdefault(key, {})[c["server"]] = c

    def order(k):
        client, transport, protocol, step = k
        return (CLIENT_ORDER.index(client) if client in CLIENT_ORDER else 99, TRANSPORTS.index(transport),
                STEP_ORDER.index(step) >= len(FETCH_STEPS), protocol, STEP_ORDER.index(step))

    lines = ["# Git client matrix", "", "Clients: " + ", ".join(f"{k}: {v}" for k, v in versions.items()), "",
             "| client | transport | protocol | step | " + " | ".join(names) + " |",
             "|---|---|---|---|" + "---|" * len(names)]
    notes = {}  # detail -> number, so that one reason shared by many cells is listed once
    for key in sorted(rows, key=order):
        row = rows[key]
        cols = []
        for n in names:
            c = row.get(n)
            if not c:
                cols.append("")
                continue
            label = {"pass": "pass", "fail": "**FAIL**", "skip": "skip"}[c["status"]]
            if c["status"] != "pass" and c["detail"]:
                number = notes.setdefault(c["detail"], len(notes) + 1)
                label += f" [{number}]"
            cols.append(label)
        lines.append("| " + " | ".join(key) + " | " + " | ".join(cols) + " |")
    if notes:
        lines += ["", "Notes:", ""] + [f"{i}. " + d.replace("|", "\\|") for d, i in notes.items()]
    return "\n".join(lines) + "\n"


# ---------------------------------------------------------------------------------------------


def load_servers(path):
    try:
        servers = json.loads(Path(path).read_text())
    except (OSError, ValueError) as e:
        raise RunnerError(f"cannot read {path}: {e}")
    if not isinstance(servers, list) or not servers:
        raise RunnerError(f"{path}: expected a non-empty JSON list of servers")
    seen = set()
    for s in servers:
        if not isinstance(s, dict) or not s.get("name") or not s.get("base"):
            raise RunnerError(f"{path}: every server needs a name and a base: {s!r}")
        if s["name"] in seen:
            raise RunnerError(f"{path}: server name {s['name']!r} appears twice")
        seen.add(s["name"])
        if not Path(s["base"]).is_absolute() or not Path(s["base"]).is_dir():
            raise RunnerError(f"{path}: base {s['base']!r} of {s['name']} is not an existing absolute directory")
        for t in TRANSPORTS:
            s.setdefault(t, None)
    return servers


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--servers", help="JSON file listing the servers (required unless --prepare)")
    ap.add_argument("--prepare", action="store_true",
                    help="only build the clients that need it (JGit driver, go-git driver) and say which are usable")
    ap.add_argument("--clients", default=",".join(CLIENT_ORDER), help="comma-separated subset of " + ",".join(CLIENT_ORDER))
    ap.add_argument("--work", help="scratch directory (default: a temporary one, removed afterwards)")
    ap.add_argument("--cache", default=str(REPO / "target" / "clients"), help="where install.sh put the clients and builds go")
    ap.add_argument("--markdown", help="also write a table for humans to this file")
    ap.add_argument("--jobs", type=int, default=2, help="client/server/transport groups run at once")
    ap.add_argument("--timeout", type=int, default=TIMEOUT, help="seconds per client command")
    args = ap.parse_args(argv)

    names = [c.strip() for c in args.clients.split(",") if c.strip()]
    unknown = [n for n in names if n not in CLIENTS]
    if unknown or not names:
        ap.error(f"unknown client(s) {unknown}; choose from {','.join(CLIENT_ORDER)}")
    cache = Path(args.cache).resolve()
    cache.mkdir(parents=True, exist_ok=True)
    if args.prepare:
        for n in names:
            c = CLIENTS[n](cache)
            try:
                c.prepare()
                print(f"matrix: {n}: {c.version}", file=sys.stderr)
            except Skip as e:
                print(f"matrix: {n}: unavailable: {e}", file=sys.stderr)
        return 0
    if not args.servers:
        ap.error("--servers is required")
    try:
        servers = load_servers(args.servers)
    except RunnerError as e:
        print(f"matrix: {e}", file=sys.stderr)
        return 2
    if not shutil.which("git"):
        print("matrix: stock git is not on PATH", file=sys.stderr)
        return 1

    temp = None
    if args.work:
        work = Path(args.work).resolve()
        work.mkdir(parents=True, exist_ok=True)
    else:
        temp = tempfile.mkdtemp(prefix="gixd-client-matrix-")
        work = Path(temp)
    try:
        git = Git(work / "home")
        seed = work / "seed.git"
        try:
            make_seed(git, seed)
        except (RunnerError, OSError, subprocess.TimeoutExpired) as e:
            print(f"matrix: seed creation failed: {e}", file=sys.stderr)
            return 1

        clients, versions = [], {}
        for n in names:
            c = CLIENTS[n](cache)
            reason = None
            try:
                c.prepare()
                versions[n] = c.version
            except Skip as e:
                reason = f"{n} unavailable: {e}"
                versions[n] = "unavailable"
            print(f"matrix: {n}: {reason or c.version}", file=sys.stderr)
            clients.append((n, c, reason))

        m = Matrix(args, servers, clients, git, seed, work)
        m.run()
        if args.markdown:
            Path(args.markdown).write_text(markdown(m.cells, servers, versions))
        counts = {s: sum(1 for c in m.cells if c["status"] == s) for s in ("pass", "fail", "skip")}
        print(f"matrix: {counts['pass']} pass, {counts['fail']} fail, {counts['skip']} skip", file=sys.stderr)
        return 0
    finally:
        if temp:
            shutil.rmtree(temp, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
