"""Audit verification rules on a dump of logits: lossless or not, TV from the target,
acceptance beside α*.

    python scripts/audit.py [DUMP] --rule NAME|FILE.py:FUNCTION --temperature 1,0.6 --out DIR

See ``--help`` and ``otbound/cli/audit.py``.
"""

from otbound.cli._common import exit_now
from otbound.cli.audit import main

if __name__ == "__main__":
    exit_now(main())
