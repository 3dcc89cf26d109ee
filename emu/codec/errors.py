"""Codec errors: user-facing (EmuError), so the CLI prints them as one line."""

from __future__ import annotations

from ..errors import DecodeError, EmuError


class FrameError(DecodeError):
    """A frame or header row that breaks the wire format; names the field and the frame."""

    def __init__(self, message: str, *, field: str, index: int):
        super().__init__(message)
        self.field = field
        self.index = index


class EncodeError(EmuError):
    """Input that cannot be put on the wire (lengths, timestamps, sizes out of range)."""
