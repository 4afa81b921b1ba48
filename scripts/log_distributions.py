"""Log target and draft next-token logits from two causal LMs to an otbound dump.

    python scripts/log_distributions.py --target DIR --draft DIR --prompts FILE --out DUMP

See ``--help`` and ``otbound/cli/log_distributions.py``.
"""

from otbound.cli._common import exit_now
from otbound.cli.log_distributions import main

if __name__ == "__main__":
    exit_now(main())
