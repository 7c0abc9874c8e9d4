#!/usr/bin/env python3
"""libgit2 (through pygit2) driver for the gixd client matrix (tests/clients/matrix.py).

    pygit2_client.py clone URL DIR [--depth N] [--protocol V] [--bare]
    pygit2_client.py fetch DIR [--protocol V]
    pygit2_client.py push DIR SRC:DST [--force]
    pygit2_client.py delete DIR REFNAME

libgit2 speaks protocol v0 only: --protocol v2 exits 3.
"""
import driver_cli
import os
import sys

try:
    import pygit2
except ImportError as e:  # the runner normally checks this first
    print(f"pygit2: cannot import pygit2: {e}", file=sys.stderr)
    sys.exit(3)


class Callbacks(pygit2.RemoteCallbacks):
    def __init__(self):
        super().__init__()
        self.user = os.environ.get("GIXD_CLIENT_USER", "")
        self.password = os.environ.get("GIXD_CLIENT_PASSWORD", "")
        self.asked = 0
        self.rejected = []

    def credentials(self, url, username_from_url, allowed_types):
        self.asked += 1
        if self.asked > 3:
            raise RuntimeError("server keeps refusing the credentials")
        key = os.environ.get("GIXD_CLIENT_SSH_KEY")
        if key and allowed_types & pygit2.enums.CredentialType.SSH_KEY:
            return pygit2.Keypair(username_from_url or "git", key + ".pub", key, "")
        if not (self.user or self.password):
            raise RuntimeError("server asked for credentials but GIXD_CLIENT_USER/PASSWORD are not set")
        if allowed_types & pygit2.enums.CredentialType.USERPASS_PLAINTEXT:
            return pygit2.UserPass(self.user or username_from_url or "", self.password)
        raise RuntimeError(f"server wants credential types {allowed_types!r}, only user/password supported")

    def certificate_check(self, certificate, valid, host):
        # An SSH host key: libgit2 checked it against ~/.ssh/known_hosts (HOME is the runner's);
        # `valid` says whether it matched.
        if not valid:
            raise RuntimeError(f"host key of {host} not in known_hosts")
        return True

    def push_update_reference(self, refname, message):
        if message is not None:
            self.rejected.append(f"{refname}: {message}")


def main():
    a = driver_cli.parse("pygit2_client")
    if a.protocol not in (None, "0", "v0", "1", "v1"):
        print(f"pygit2: libgit2 {pygit2.LIBGIT2_VERSION} speaks protocol v0 only (asked for {a.protocol})", file=sys.stderr)
        return 3
    cb = Callbacks()
    if a.cmd == "clone":
        url, path = a.args
        pygit2.clone_repository(url, path, bare=a.bare, callbacks=cb, depth=a.depth)
        return 0
    repo = pygit2.Repository(a.args[0])
    origin = repo.remotes["origin"]
    if a.cmd == "fetch":
        origin.fetch(["+refs/heads/*:refs/remotes/origin/*", "+refs/tags/*:refs/tags/*"], callbacks=cb)
        return 0
    origin.push([driver_cli.refspec(a, plus_for_force=True)], callbacks=cb)
    return driver_cli.rejected("pygit2", cb.rejected)


if __name__ == "__main__":
    try:
        sys.exit(main())
    except (pygit2.GitError, RuntimeError, KeyError, ValueError) as e:
        print(f"pygit2: {type(e).__name__}: {e}", file=sys.stderr)
        sys.exit(1)
