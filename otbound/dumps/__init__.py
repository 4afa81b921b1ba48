r"""Dumped logits: otbound's own format, single files, and the processing of ``p`` and ``q``.

**otbound's dump format, version 1** (:data:`FORMAT_VERSION`) is a directory::

    DUMP/
      manifest.json
      shard-00000.safetensors
      shard-00000.parquet
      shard-00001.safetensors
      ...

``manifest.json`` holds ``format`` (``"otbound-dump"``), ``format_version``,
``target_model``, ``draft_model``, ``tokenizer``, ``target_vocab_size`` and
``draft_vocab_size`` (the logit widths, which may differ), ``tokenizer_vocab_size``,
``dtype`` (``float16``, ``bfloat16``, ``float32`` or ``float64``), ``storage`` (``"full"`` or
``"topk:K"``), ``logits_processing`` (``"raw"``: as the model produced them, before
temperature or filtering), ``created`` (time, otbound, Python and numpy versions), ``extra``
(free-form), ``num_steps`` and ``shards``: one entry per shard with ``id``, ``file``,
``num_steps``, ``sha256``, ``size``, ``metadata_file``, ``metadata_sha256``,
``metadata_size``. A shard's steps follow the previous shard's, so step ids are global.

Each shard is a safetensors file with, for full storage, ``target_logits`` and
``draft_logits`` of shape ``[steps, V]`` in the manifest's dtype (``bfloat16`` is stored as
``uint16`` bit patterns, because numpy has no bfloat16; reading shifts them into float32);
for top-k storage, ``{target,draft}_ids`` (int64) and ``{target,draft}_topk_logits`` of shape
``[steps, K]`` (float32 or float64) and ``{target,draft}_logsumexp`` ``[steps]`` (float64, the
full row's, so the tail mass ``1 − Σ exp(ℓ − lse)`` is known). The Parquet file beside it has
one row per step: ``prompt_id``, ``position``, ``token`` and any extra columns.

Write with :class:`DumpWriter` (atomic files, resumable), read with :func:`open_dump`, which
also wraps a single ``.safetensors``, ``.npz``, ``.npy`` or ``.pt`` file as a one-shard
:class:`Dump` (one reader per format, registered by suffix: :mod:`otbound.dumps.readers`).
:func:`to_probabilities` and :func:`prepare_distributions` apply temperature,
top-k and top-p identically to both models, :func:`process_topk` to top-k rows where that is
exact. This package reads and writes dumps and computes no bounds: ``α*`` per step of dumped
rows (an interval for top-k rows) is :func:`otbound.analysis.acceptance_interval`.
"""

from typing import TYPE_CHECKING

from otbound._lazy import lazy_exports

if TYPE_CHECKING:
    from otbound.dumps._format import (
        DTYPES,
        FORMAT_NAME,
        FORMAT_VERSION,
        MANIFEST_NAME,
        DumpError,
        ShardInfo,
        TopKRows,
        file_sha256,
        parse_storage,
    )
    from otbound.dumps._processing import (
        StepDistributions,
        describe_steps,
        find_bad_steps,
        find_probability_rows,
        prepare_distributions,
        probability_tolerance,
        to_probabilities,
    )
    from otbound.dumps._reader import SINGLE_FILE_SUFFIXES, VALUES_CHOICES, Dump, open_dump
    from otbound.dumps._shard import ShardData
    from otbound.dumps._topk import find_bad_topk_steps, process_topk
    from otbound.dumps._writer import DumpWriter
else:
    __getattr__, __dir__ = lazy_exports(
        __name__,
        {
            "otbound.dumps._format": (
                "DTYPES",
                "FORMAT_NAME",
                "FORMAT_VERSION",
                "MANIFEST_NAME",
                "DumpError",
                "ShardInfo",
                "TopKRows",
                "file_sha256",
                "parse_storage",
            ),
            "otbound.dumps._processing": (
                "StepDistributions",
                "describe_steps",
                "find_bad_steps",
                "find_probability_rows",
                "prepare_distributions",
                "probability_tolerance",
                "to_probabilities",
            ),
            "otbound.dumps._reader": (
                "SINGLE_FILE_SUFFIXES",
                "VALUES_CHOICES",
                "Dump",
                "open_dump",
            ),
            "otbound.dumps._shard": ("ShardData",),
            "otbound.dumps._topk": ("find_bad_topk_steps", "process_topk"),
            "otbound.dumps._writer": ("DumpWriter",),
        },
        moved={
            "INTERVAL_DESIGNS": "otbound.analysis",
            "AcceptanceInterval": "otbound.analysis",
            "acceptance_interval": "otbound.analysis",
            "topk_interval": "otbound.analysis",
        },
    )

__all__ = [
    "DTYPES",
    "FORMAT_NAME",
    "FORMAT_VERSION",
    "MANIFEST_NAME",
    "SINGLE_FILE_SUFFIXES",
    "VALUES_CHOICES",
    "Dump",
    "DumpError",
    "DumpWriter",
    "ShardData",
    "ShardInfo",
    "StepDistributions",
    "TopKRows",
    "describe_steps",
    "file_sha256",
    "find_bad_steps",
    "find_bad_topk_steps",
    "find_probability_rows",
    "open_dump",
    "parse_storage",
    "prepare_distributions",
    "probability_tolerance",
    "process_topk",
    "to_probabilities",
]
