"""The compute-NIC model: its protocol (reliability, reductions, directory), configuration and routes."""

from .config import NicConfig, Nics
from .directory import Directory, State

__all__ = ["Directory", "NicConfig", "Nics", "State"]
