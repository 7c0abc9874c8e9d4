"""The command line every client driver of the matrix takes (tests/clients/matrix.py runs them):

    <driver> clone URL DIR [--depth N] [--protocol V] [--bare]
    <driver> fetch DIR [--protocol V]
    <driver> push DIR SRC:DST [--force]
    <driver> delete DIR REFNAME
"""
import argparse
import sys


def parse(prog):
    p = argparse.ArgumentParser(prog=prog)
    p.add_argument("cmd", choices=["clone", "fetch", "push", "delete"])
    p.add_argument("args", nargs="+")
    p.add_argument("--depth", type=int, default=0)
    p.add_argument("--protocol")
    p.add_argument("--bare", action="store_true")
    p.add_argument("--force", action="store_true")
    return p.parse_args()


def refspec(a, plus_for_force=False):
    """What `push`/`delete` push: `:REF` deletes; `--force` becomes a leading `+` for clients that
    take force in the refspec (`plus_for_force`) rather than as an option."""
    spec = a.args[1]
    if a.cmd == "delete":
        return ":" + spec
    if plus_for_force and a.force and not spec.startswith("+"):
        return "+" + spec
    return spec


def rejected(prog, refusals):
    """Exit status of a push: 1, each refusal on stderr, if the server refused any ref."""
    for refusal in refusals:
        print(f"{prog}: rejected {refusal}", file=sys.stderr)
    return 1 if refusals else 0
