"""Errors a user meets on the hardware path; each prints as one line (exit status 2)."""

from __future__ import annotations

from ..errors import ConfigError, EmuError


class HwError(EmuError):
    """Something about the interface, the permissions or the device on the other end."""


class NoInterface(HwError):
    """The interface does not exist (in this network namespace)."""


class NoPermission(HwError):
    """Raw sockets need root or CAP_NET_RAW."""


class InterfaceDown(HwError):
    """The interface exists but is administratively down."""


class MtuTooSmall(HwError):
    """A frame is larger than the interface's MTU allows."""


class NoAnswer(HwError):
    """The device never answered within the timeout."""


__all__ = ["ConfigError", "HwError", "InterfaceDown", "MtuTooSmall", "NoAnswer", "NoInterface", "NoPermission"]
