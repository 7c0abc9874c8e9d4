#!/usr/bin/env python3
"""dulwich driver for the gixd client matrix (tests/clients/matrix.py).

    dulwich_client.py clone URL DIR [--depth N] [--protocol V] [--bare]
    dulwich_client.py fetch DIR [--protocol V]
    dulwich_client.py push DIR SRC:DST [--force]
    dulwich_client.py delete DIR REFNAME

dulwich speaks protocol v0 and v2 (protocol_version=0|2); pushes are always v0 (receive-pack).
"""
import driver_cli
import io
import os
import sys

try:
    import dulwich
    from dulwich import porcelain
    from dulwich.client import get_transport_and_path
    from dulwich.refs import _import_remote_refs
    from dulwich.repo import Repo
except ImportError as e:
    print(f"dulwich: cannot import dulwich: {e}", file=sys.stderr)
    sys.exit(3)


def creds():
    user = os.environ.get("GIXD_CLIENT_USER") or None
    password = os.environ.get("GIXD_CLIENT_PASSWORD") or None
    if user is None and password is None:
        return {}
    return {"username": user or "", "password": password or ""}


def protocol_version(v):
    if v is None:
        return None
    v = v.lstrip("v")
    if v in ("0", "1"):
        return 0
    if v == "2":
        return 2
    print(f"dulwich: unknown protocol version {v}", file=sys.stderr)
    sys.exit(3)


def main():
    a = driver_cli.parse("dulwich_client")
    pv = protocol_version(a.protocol)
    err = io.BytesIO()
    if a.cmd == "clone":
        url, path = a.args
        r = porcelain.clone(url, path, bare=a.bare, depth=a.depth or None, protocol_version=pv,
                            errstream=err, **creds())
        r.close()
        return 0
    path = a.args[0]
    with Repo(path) as r:
        url = r.get_config().get((b"remote", b"origin"), b"url").decode()
        if a.cmd == "fetch":
            extra = creds()
            if url.startswith("ssh://") and os.environ.get("GIT_SSH_COMMAND"):
                extra["ssh_command"] = os.environ["GIT_SSH_COMMAND"]
            client, rpath = get_transport_and_path(url, config=r.get_config_stack(), **extra)
            result = client.fetch(rpath, r, protocol_version=pv)
            _import_remote_refs(r.refs, "origin", result.refs, message=b"fetch: from origin")
            return 0
    result = porcelain.push(path, "origin", [driver_cli.refspec(a)], force=a.force, errstream=err, **creds())
    return driver_cli.rejected("dulwich", [f"{ref.decode()}: {e}" for ref, e in (result.ref_status or {}).items() if e is not None])


if __name__ == "__main__":
    try:
        sys.exit(main())
    except SystemExit:
        raise
    except Exception as e:  # any dulwich error is a client failure, reported on stderr
        print(f"dulwich {'.'.join(map(str, dulwich.__version__))}: {type(e).__name__}: {e}", file=sys.stderr)
        sys.exit(1)
