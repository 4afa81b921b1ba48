"""Collection for the whole test run: the examples in the docstrings of ``otbound`` run as
doctests (``--doctest-modules``); modules that need torch are left out where it is missing."""

import importlib.util

collect_ignore_glob = ["scripts/*", "benchmarks/*", "notebooks/*", "data/*"]
if importlib.util.find_spec("torch") is None:
    collect_ignore_glob += [
        "otbound/capture/*",
        "otbound/bounds/torch_sweep.py",
        "otbound/cli/log_distributions.py",
    ]
