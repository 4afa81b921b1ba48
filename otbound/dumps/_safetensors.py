"""A small, dependency-free reader and writer of the safetensors file format.

The format (https://github.com/huggingface/safetensors): an 8-byte little-endian header length
``N``, ``N`` bytes of JSON mapping each tensor name to ``{"dtype", "shape", "data_offsets"}``
(offsets relative to the end of the header; an optional ``"__metadata__"`` maps strings to
strings), then the tensors' bytes, little-endian and C-ordered, covering the rest of the file.

otbound reads the format itself rather than through ``safetensors.numpy`` because that API
cannot return ``BF16`` tensors (numpy has no bfloat16), which are what a torch script saves;
here a ``BF16`` tensor comes back as float32. Reading is lazy: :class:`SafetensorsFile` parses
the header only, and :meth:`SafetensorsFile.array` memory-maps one tensor. The tests check
both directions against the official ``safetensors`` package.
"""

from __future__ import annotations

import json
import math
import os
import struct
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO

import numpy as np

#: safetensors dtype code -> numpy dtype (``BF16`` is read as raw ``uint16`` bits).
_NUMPY_OF: dict[str, np.dtype[Any]] = {
    "F64": np.dtype("<f8"),
    "F32": np.dtype("<f4"),
    "F16": np.dtype("<f2"),
    "BF16": np.dtype("<u2"),
    "I64": np.dtype("<i8"),
    "I32": np.dtype("<i4"),
    "I16": np.dtype("<i2"),
    "I8": np.dtype("i1"),
    "U64": np.dtype("<u8"),
    "U32": np.dtype("<u4"),
    "U16": np.dtype("<u2"),
    "U8": np.dtype("u1"),
    "BOOL": np.dtype("?"),
}
#: numpy dtype -> safetensors dtype code, for writing.
_CODE_OF = {dt: code for code, dt in _NUMPY_OF.items() if code != "BF16"}

#: Headers larger than this are refused (the official library's limit is 100 MB).
_MAX_HEADER = 100_000_000


class SafetensorsFormatError(ValueError):
    """The file is not a valid safetensors file (the message says why)."""


def bf16_bits_to_float32(bits: np.ndarray) -> np.ndarray:
    """Float32 values of bfloat16 numbers given as their raw ``uint16`` bit patterns.

    A bfloat16 is the upper half of a float32, so the conversion is exact: ``bits << 16``.
    """
    return (np.asarray(bits, dtype=np.uint16).astype(np.uint32) << 16).view(np.float32)


def float32_to_bf16_bits(values: np.ndarray) -> np.ndarray:
    """Raw ``uint16`` bit patterns of ``values`` rounded to bfloat16 (nearest, ties to even).

    NaN stays NaN (a quiet NaN); infinities and signed zeros are kept.
    """
    bits = np.ascontiguousarray(values, dtype=np.float32).view(np.uint32)
    rounded = (bits + np.uint32(0x7FFF) + ((bits >> np.uint32(16)) & np.uint32(1))) >> np.uint32(16)
    out: np.ndarray = rounded.astype(np.uint16)
    nan = np.isnan(np.asarray(values, dtype=np.float32))
    if np.any(nan):
        out[nan] = ((bits[nan] >> np.uint32(16)) | np.uint32(0x0040)).astype(np.uint16)
    return out


@dataclass(frozen=True)
class TensorInfo:
    """Where one tensor lies in a safetensors file.

    Attributes
    ----------
    dtype : str
        The safetensors dtype code (``"F32"``, ``"BF16"``, ...).
    shape : tuple of int
    offset : int
        Absolute byte offset of the tensor's first byte in the file.
    nbytes : int
    """

    dtype: str
    shape: tuple[int, ...]
    offset: int
    nbytes: int


class SafetensorsFile:
    """The parsed header of a safetensors file; tensors are read one at a time, on demand.

    Parameters
    ----------
    path : str or os.PathLike
        The file.

    Raises
    ------
    SafetensorsFormatError
        The header is unreadable, or the file is truncated or longer than its header says.
    OSError
        The file cannot be opened.
    """

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)
        size = self.path.stat().st_size
        with open(self.path, "rb") as f:
            head = f.read(8)
            if len(head) < 8:
                raise SafetensorsFormatError(
                    f"the file is {size} bytes long, too short for a safetensors header"
                )
            (length,) = struct.unpack("<Q", head)
            if length > _MAX_HEADER or 8 + length > size:
                raise SafetensorsFormatError(
                    f"the header claims {length} bytes but the file holds {size} bytes "
                    "(truncated or not a safetensors file)"
                )
            raw = f.read(length)
        try:
            header = json.loads(raw.decode("utf-8"))
        except (UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise SafetensorsFormatError(f"the header is not valid JSON ({exc})") from exc
        if not isinstance(header, dict):
            raise SafetensorsFormatError("the header is not a JSON object")
        meta = header.pop("__metadata__", None) or {}
        if not isinstance(meta, dict):
            raise SafetensorsFormatError("the header's __metadata__ is not a JSON object")
        self.metadata: dict[str, str] = {str(k): str(v) for k, v in meta.items()}
        start = 8 + length
        data_size = size - start
        self._tensors: dict[str, TensorInfo] = {}
        end_max = 0
        for name, entry in header.items():
            self._tensors[name] = self._parse_entry(name, entry, start, data_size)
            end_max = max(end_max, self._tensors[name].offset - start + self._tensors[name].nbytes)
        if end_max != data_size:
            raise SafetensorsFormatError(
                f"the header describes {end_max} bytes of tensor data but the file holds "
                f"{data_size} (file not fully covered)"
            )

    @staticmethod
    def _parse_entry(name: str, entry: object, start: int, data_size: int) -> TensorInfo:
        if not isinstance(entry, dict) or not {"dtype", "shape", "data_offsets"} <= set(entry):
            raise SafetensorsFormatError(f"tensor {name!r} has a malformed header entry")
        code = entry["dtype"]
        if code not in _NUMPY_OF:
            raise SafetensorsFormatError(f"tensor {name!r} has an unsupported dtype {code!r}")
        shape = entry["shape"]
        offsets = entry["data_offsets"]
        if (
            not isinstance(shape, list)
            or not all(isinstance(s, int) and s >= 0 for s in shape)
            or not isinstance(offsets, list)
            or len(offsets) != 2
            or not all(isinstance(o, int) for o in offsets)
        ):
            raise SafetensorsFormatError(f"tensor {name!r} has a malformed shape or offsets")
        begin, end = offsets
        nbytes = math.prod(shape) * _NUMPY_OF[code].itemsize
        if not 0 <= begin <= end or end - begin != nbytes:
            raise SafetensorsFormatError(
                f"tensor {name!r}: offsets {offsets} do not match its shape {shape} ({code})"
            )
        if end > data_size:
            raise SafetensorsFormatError(
                f"tensor {name!r} ends at byte {end} of the data but the file holds only "
                f"{data_size} bytes of data (truncated)"
            )
        return TensorInfo(code, tuple(shape), start + begin, nbytes)

    def keys(self) -> list[str]:
        """Tensor names, sorted."""
        return sorted(self._tensors)

    def __contains__(self, name: object) -> bool:
        return name in self._tensors

    def info(self, name: str) -> TensorInfo:
        """Dtype, shape and position of one tensor."""
        return self._tensors[name]

    def array(self, name: str, *, raw_bf16: bool = False) -> np.ndarray:
        """One tensor, memory-mapped read-only (``BF16`` converted to float32 unless ``raw_bf16``).

        Parameters
        ----------
        name : str
        raw_bf16 : bool, default False
            Return a ``BF16`` tensor as its ``uint16`` bit patterns.
        """
        info = self._tensors[name]
        dtype = _NUMPY_OF[info.dtype]
        if info.nbytes == 0:
            arr: np.ndarray = np.empty(info.shape, dtype=dtype)
        else:
            arr = np.memmap(self.path, dtype=dtype, mode="r", offset=info.offset, shape=info.shape)
        if info.dtype == "BF16" and not raw_bf16:
            return bf16_bits_to_float32(arr)
        return arr


def write_safetensors(
    f: BinaryIO, tensors: Mapping[str, np.ndarray], metadata: Mapping[str, str] | None = None
) -> None:
    """Write ``tensors`` to the open binary file ``f`` in the safetensors format.

    Parameters
    ----------
    f : binary file object
        Anything with ``write(bytes)``.
    tensors : mapping of str to numpy.ndarray
        Arrays of a dtype safetensors knows (floats, integers, bool; not bfloat16: store its
        bits as ``uint16``). Written in name order.
    metadata : mapping of str to str, optional
        The header's ``__metadata__``.
    """
    arrays = {name: np.ascontiguousarray(tensors[name]) for name in sorted(tensors)}
    header: dict[str, object] = {}
    if metadata:
        header["__metadata__"] = {str(k): str(v) for k, v in metadata.items()}
    offset = 0
    for name, arr in arrays.items():
        code = _CODE_OF.get(arr.dtype.newbyteorder("<"))
        if code is None:
            raise TypeError(f"tensor {name!r}: dtype {arr.dtype} cannot be stored in safetensors")
        header[name] = {
            "dtype": code,
            "shape": list(arr.shape),
            "data_offsets": [offset, offset + arr.nbytes],
        }
        offset += arr.nbytes
    raw = json.dumps(header, separators=(",", ":")).encode("utf-8")
    raw += b" " * (-len(raw) % 8)
    f.write(struct.pack("<Q", len(raw)))
    f.write(raw)
    for arr in arrays.values():
        little = arr.astype(arr.dtype.newbyteorder("<"), copy=False)
        if little.nbytes:
            # numpy types ndarray as a Buffer from Python 3.12 only
            f.write(memoryview(np.ascontiguousarray(little)).cast("B"))  # type: ignore[arg-type]
