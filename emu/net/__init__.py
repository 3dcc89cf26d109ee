"""The packet-level network: links with queues, loss and failures, driven by the event core."""

from .network import Loss, Message, Network

__all__ = ["Loss", "Message", "Network"]
