"""Errors a user can cause. The CLI prints them as one line and exits with status 2."""


class EmuError(Exception):
    """Base of every error that names a problem in the user's input."""


class ConfigError(EmuError):
    """A bad option, profile override, topology or scenario."""


class DecodeError(EmuError):
    """A frame, capture or message that does not decode; the message names the field."""


class TraceError(EmuError):
    """A malformed trace; the message names the JSON path."""
