"""The command line every client driver of the matrix takes (tests/clients/matrix.py runs them):

    <driver> clone URL DIR [--depth N] [--protocol V] [--bare]
    <driver> fetch DIR [--protocol V]
    <driver> push DIR SRC:DST [--force]
    <driver> delete DIR REFNAME
"""
import argparse


def parse(prog):
    p = argparse.ArgumentParser(prog=prog)
    p.add_argument("cmd", choices=["clone", "fetch", "push", "delete"])
    p.add_argument("args", nargs="+")
    p.add_argument("--depth", type=int, default=0)
    p.add_argument("--protocol")
    p.add_argument("--bare", action="store_true")
    p.add_argument("--force", action="store_true")
    return p.parse_args()
