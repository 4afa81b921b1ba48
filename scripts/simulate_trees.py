"""Tree speculative decoding with a draft and a target model: tokens per target call.

    python scripts/simulate_trees.py --trees binary:1-5,ternary:1-3 --out out/trees

See ``--help`` and ``otbound/cli/simulate_trees.py``.
"""

from otbound.cli._common import exit_now
from otbound.cli.simulate_trees import main

if __name__ == "__main__":
    exit_now(main())
