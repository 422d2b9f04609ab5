"""dwc policies: the shipped pretrained policies (policies/) with their returns."""
from __future__ import annotations

from dwc.cli.options import show
from dwc.core.catalog import POLICIES_DIR


def add(sub):
    p = sub.add_parser("policies", help="list the shipped pretrained policies with their returns",
                       description=f"List the policies shipped in {POLICIES_DIR} (each a run directory: "
                                   "dwc eval, compile and verify work on it).")
    p.add_argument("--json", action="store_true", help="print the list as JSON")


def run(args) -> int:
    from dwc.core.catalog import list_policies, policies_text
    show(args, list_policies(), policies_text)
    return 0
