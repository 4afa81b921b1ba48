"""The command lines: ``compute_bounds`` (bounds and verifiers on a dump) and
``log_distributions`` (capture from Hugging Face models).

``scripts/*.py`` are thin wrappers over the ``main`` functions here. Every command reports a
problem as one line on stderr and a non-zero exit status, never a traceback
(:func:`otbound.cli._common.run_command`).
"""
