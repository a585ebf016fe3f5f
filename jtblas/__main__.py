"""`python -m jtblas ...`: the same as the `jtblas` command."""

import sys

from jtblas.cli import main

if __name__ == "__main__":
    sys.exit(main())
