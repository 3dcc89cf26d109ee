"""The compute-NIC model: packetizer, forwarding, multicast, reductions, all-to-all, directory, reliability."""

from .cluster import AllToAll, Cluster, NicConfig, Reduction, Transfer
from .directory import Directory, State

__all__ = ["AllToAll", "Cluster", "Directory", "NicConfig", "Reduction", "State", "Transfer"]
