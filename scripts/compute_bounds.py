"""Optimal acceptance rates and every verifier's acceptance on a dump of logits.

    python scripts/compute_bounds.py [DUMP] --n 2,4 --design iid,without_replacement --out DIR

See ``--help`` and ``otbound/cli/compute_bounds.py``.
"""

from otbound.cli._common import exit_now
from otbound.cli.compute_bounds import main

if __name__ == "__main__":
    exit_now(main())
