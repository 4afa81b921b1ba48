"""``python -m otbound``: the ``otbound`` command (:mod:`otbound.cli.main`)."""

import sys

from otbound.cli.main import main

if __name__ == "__main__":
    sys.exit(main())
