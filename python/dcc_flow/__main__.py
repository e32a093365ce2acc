"""``python -m dcc_flow``: the ``dcc-flow`` command line (console script ``dcc_flow.__main__:main``)."""

import sys

from ._cli import main

__all__ = ["main"]

if __name__ == "__main__":
    sys.exit(main())
