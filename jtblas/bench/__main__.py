"""`python -m jtblas.bench ...`: the same as `jtblas bench ...`."""

import sys

from jtblas.bench.cli import main

if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
