"""Train the decision model of ``--stopping learned:MODEL`` from a run's tree_steps.parquet.

    python scripts/train_stopping.py out/dyn/tree_steps.parquet --out out/stopping.pkl

See ``--help`` and ``otbound/cli/train_stopping.py``.
"""

from otbound.cli._common import exit_now
from otbound.cli.train_stopping import main

if __name__ == "__main__":
    exit_now(main())
