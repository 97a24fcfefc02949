"""An uploaded .npz read with every allocation bounded before it happens: the zip's central
directory before zipfile parses it, each member's compression (stored or deflate, which
zipfile inflates only as far as it is asked), each .npy header through a capped stream, and
each array's true size from its header before numpy allocates it. Never with pickle.
"""

from __future__ import annotations

import io
import math
import zipfile
from typing import BinaryIO

import numpy as np

from app.domain.upload_rules import ARRAYS, ArrayRule, Plan, UploadError, array_rules

# bzip2 and LZMA members decompress a whole block per read, uncapped (640 bytes of bzip2
# became 256 MiB reading one header): refused.
COMPRESSIONS = (zipfile.ZIP_STORED, zipfile.ZIP_DEFLATED)
ENCRYPTED = 0x1  # general purpose flag bit 0
# The central directory, before zipfile parses it (an object per entry, so its memory and time
# grow with the entries an upload claims): far above what four arrays need, so a wrong member
# is still named below.
MAX_ENTRIES = 16
MAX_DIRECTORY_BYTES = 64 * 1024
MAX_NPY_HEADER_BYTES = 10_000  # magic, length and header together; numpy writes ~128 bytes
HEADER_READERS = {
    (1, 0): np.lib.format.read_array_header_1_0,
    (2, 0): np.lib.format.read_array_header_2_0,
}
READ_ERRORS = (ValueError, OSError, EOFError, zipfile.BadZipFile, RuntimeError)


class _Capped(io.RawIOBase):
    """A member's stream that ends after `cap` bytes: numpy reads a header's length (up to
    4 GiB in format 2.0) before it checks it, and zipfile inflates as much as it is asked."""

    def __init__(self, raw: BinaryIO, cap: int) -> None:
        super().__init__()
        self.raw, self.left = raw, cap

    def readable(self) -> bool:
        return True

    def read(self, size: int | None = -1) -> bytes:
        wanted = self.left if size is None or size < 0 else min(size, self.left)
        data = self.raw.read(wanted) if wanted else b""
        self.left -= len(data)
        return data

    def close(self) -> None:
        self.raw.close()
        super().close()


def _open_member(archive: zipfile.ZipFile, info: zipfile.ZipInfo, cap: int) -> _Capped:
    return _Capped(archive.open(info), cap)  # type: ignore[arg-type]


def _directory_bounded(file: BinaryIO) -> None:
    """Refuse a central directory larger than four arrays need, before it is parsed."""
    # The end record zipfile itself will use (zip64 included): both read the same numbers.
    end = zipfile._EndRecData(file)  # type: ignore[attr-defined]
    file.seek(0)
    if end is None:
        raise UploadError(422, "not a readable .npz (zip) archive: no end of central directory")
    entries = end[zipfile._ECD_ENTRIES_TOTAL]  # type: ignore[attr-defined]
    size = end[zipfile._ECD_SIZE]  # type: ignore[attr-defined]
    if entries > MAX_ENTRIES or size > MAX_DIRECTORY_BYTES:
        raise UploadError(
            422,
            f"the archive lists {entries} entries in {size} bytes; an upload holds at most "
            f"{len(ARRAYS)} arrays: {', '.join(ARRAYS)}",
        )


def _members(archive: zipfile.ZipFile) -> list[zipfile.ZipInfo]:
    """The archive's .npy members, checked to be x, y[, x_test, y_test], stored or deflated."""
    infos = archive.infolist()
    members = [i.filename for i in infos]
    names = [m.removesuffix(".npy") for m in members]
    unknown = sorted(set(names) - set(ARRAYS))
    if unknown or len(set(names)) != len(members) or not all(m.endswith(".npy") for m in members):
        raise UploadError(
            422,
            f"unexpected entries {unknown or members}; an upload holds the arrays "
            "x and y, and optionally x_test and y_test",
        )
    for required in ("x", "y"):
        if required not in names:
            raise UploadError(422, f"the archive has no array {required!r}")
    if ("x_test" in names) != ("y_test" in names):
        raise UploadError(422, "x_test and y_test come together: give both or neither")
    for info in infos:
        if info.compress_type not in COMPRESSIONS or info.flag_bits & ENCRYPTED:
            raise UploadError(
                422,
                f"{info.filename} is encrypted or compressed with method {info.compress_type}; "
                "only stored and deflated members are read (numpy.savez, savez_compressed)",
            )
    return infos


def _declared(
    archive: zipfile.ZipFile, info: zipfile.ZipInfo
) -> tuple[tuple[int, ...], np.dtype, int]:
    """Shape and dtype the .npy header promises, and the header's own length in bytes."""
    with _open_member(archive, info, MAX_NPY_HEADER_BYTES) as f:
        version = np.lib.format.read_magic(f)
        reader = HEADER_READERS.get(version)
        if reader is None:
            raise ValueError(f".npy format version {version} is not supported")
        shape, _, dtype = reader(f, max_header_size=MAX_NPY_HEADER_BYTES)
        header_bytes = MAX_NPY_HEADER_BYTES - f.left
    return tuple(int(n) for n in shape), dtype, header_bytes


def _member_cost(archive: zipfile.ZipFile, info: zipfile.ZipInfo, rule: ArrayRule) -> Plan:
    """One member's bytes as sent and once stored, after its header passed `rule`."""
    name = info.filename.removesuffix(".npy")
    try:
        shape, dtype, header_bytes = _declared(archive, info)
    except READ_ERRORS as exc:
        raise UploadError(422, f"not a valid .npz archive: {info.filename}: {exc}") from exc
    rule.check(name, shape, dtype)
    values = math.prod(shape)
    if info.file_size != header_bytes + values * dtype.itemsize:  # read_npz inflates this much
        raise UploadError(
            422,
            f"{info.filename} holds {info.file_size} bytes; its header promises "
            f"{header_bytes + values * dtype.itemsize}",
        )
    return Plan(values * dtype.itemsize, values * rule.stored_itemsize(dtype), (info,))


def plan_npz(file: BinaryIO, task: str, kind: str = "values") -> Plan:
    """What the arrays cost as sent and once stored, from the zip directory and the .npy
    headers alone: a small compressed file that would expand to gigabytes, or a dtype whose
    items are megabytes each, is refused before anything is loaded."""
    file.seek(0)
    _directory_bounded(file)
    try:
        archive = zipfile.ZipFile(file)
    except (zipfile.BadZipFile, OSError, ValueError) as exc:
        raise UploadError(422, f"not a readable .npz (zip) archive: {exc}") from exc
    rules = array_rules(task, kind)
    with archive:
        costs = [
            _member_cost(archive, info, rules[info.filename.removesuffix(".npy")])
            for info in _members(archive)
        ]
    return Plan(
        sum(c.loaded_bytes for c in costs),
        sum(c.stored_bytes for c in costs),
        tuple(c.members[0] for c in costs),
    )


def read_npz(file: BinaryIO, plan: Plan) -> dict[str, np.ndarray]:
    """The arrays of an .npz that plan_npz checked (and its Plan the limits): each member
    inflated only as far as its header promised."""
    file.seek(0)
    loaded = {}
    try:
        with zipfile.ZipFile(file) as archive:
            for info in plan.members:
                with _open_member(archive, info, info.file_size) as f:
                    array = np.lib.format.read_array(
                        f, allow_pickle=False, max_header_size=MAX_NPY_HEADER_BYTES
                    )
                loaded[info.filename.removesuffix(".npy")] = np.asarray(array)
    except READ_ERRORS as exc:
        raise UploadError(422, f"the .npz archive cannot be read: {exc}") from exc
    return loaded
