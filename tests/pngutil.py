"""A small PNG decoder for the tests (pure Python, zlib only; Pillow is not needed): the
browser and lab tests use it to check that a screenshot or an exported chart is not blank."""

from __future__ import annotations

import os
import struct
import zlib
from dataclasses import dataclass
from pathlib import Path


@dataclass
class PngImage:
    """Decoded 8-bit PNG: ``pixels`` holds ``height`` rows of ``width * channels`` bytes."""

    width: int
    height: int
    channels: int
    rows: list[bytes]

    def rgb(self, x: int, y: int) -> tuple[int, int, int]:
        row, i = self.rows[y], x * self.channels
        if self.channels >= 3:
            return row[i], row[i + 1], row[i + 2]
        return row[i], row[i], row[i]

    def colours(self, step: int = 4) -> dict[tuple[int, int, int], int]:
        """Histogram of RGB colours over every ``step``-th pixel of every ``step``-th row."""
        hist: dict[tuple[int, int, int], int] = {}
        for y in range(0, self.height, step):
            for x in range(0, self.width, step):
                c = self.rgb(x, y)
                hist[c] = hist.get(c, 0) + 1
        return hist

    def count_near(self, rgb: tuple[int, int, int], tol: int = 40, step: int = 2) -> int:
        """Sampled pixels within ``tol`` (per channel) of ``rgb``."""
        n = 0
        for y in range(0, self.height, step):
            for x in range(0, self.width, step):
                c = self.rgb(x, y)
                if all(abs(a - b) <= tol for a, b in zip(c, rgb)):
                    n += 1
        return n


def read_png(source: str | os.PathLike[str] | bytes) -> PngImage:
    """Decode an 8-bit grey/RGB/RGBA (non-interlaced) PNG with zlib alone."""
    data = source if isinstance(source, bytes) else Path(source).read_bytes()
    if data[:8] != b"\x89PNG\r\n\x1a\n":
        raise ValueError("not a PNG file")
    pos, idat = 8, []
    width = height = depth = ctype = interlace = 0
    while pos < len(data):
        (length,) = struct.unpack(">I", data[pos:pos + 4])
        kind = data[pos + 4:pos + 8]
        body = data[pos + 8:pos + 8 + length]
        pos += 12 + length
        if kind == b"IHDR":
            width, height, depth, ctype, _, _, interlace = struct.unpack(">IIBBBBB", body)
        elif kind == b"IDAT":
            idat.append(body)
        elif kind == b"IEND":
            break
    channels = {0: 1, 2: 3, 4: 2, 6: 4}.get(ctype)
    if depth != 8 or channels is None or interlace:
        raise ValueError(f"unsupported PNG (bit depth {depth}, colour type {ctype}, "
                         f"interlace {interlace})")
    raw = zlib.decompress(b"".join(idat))
    stride = width * channels
    rows: list[bytes] = []
    prev = bytearray(stride)
    p = 0
    for _ in range(height):
        ftype, line = raw[p], bytearray(raw[p + 1:p + 1 + stride])
        p += 1 + stride
        if ftype == 1:
            for i in range(channels, stride):
                line[i] = (line[i] + line[i - channels]) & 0xFF
        elif ftype == 2:
            for i in range(stride):
                line[i] = (line[i] + prev[i]) & 0xFF
        elif ftype == 3:
            for i in range(stride):
                left = line[i - channels] if i >= channels else 0
                line[i] = (line[i] + ((left + prev[i]) >> 1)) & 0xFF
        elif ftype == 4:
            for i in range(stride):
                a = line[i - channels] if i >= channels else 0
                b = prev[i]
                c = prev[i - channels] if i >= channels else 0
                pa, pb, pc = abs(b - c), abs(a - c), abs(a + b - 2 * c)
                pred = a if pa <= pb and pa <= pc else (b if pb <= pc else c)
                line[i] = (line[i] + pred) & 0xFF
        elif ftype != 0:
            raise ValueError(f"bad PNG filter type {ftype}")
        rows.append(bytes(line))
        prev = line
    return PngImage(width, height, channels, rows)
