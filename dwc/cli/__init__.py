"""The ``dwc`` command line: parsing and printing only, one module per subcommand (each with
``add(subparsers)`` and ``run(args)``), the top-level parser and error mapping in :mod:`dwc.cli.app`,
shared argument types and option groups in :mod:`dwc.cli.options`. The work is the library's (dwc.flows
and below); no library module imports this package (the layers of pyproject.toml)."""
from dwc.cli.app import build_parser, main

__all__ = ["build_parser", "main"]
