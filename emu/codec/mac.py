"""The Ethernet II header of MCF frames: its length and the boards' MAC addresses.

Values only, importing nothing: the board I/O (raw sockets) and the capture tools read them
without loading scapy. The scapy layer (``layer``) and the batch codec build frames from them.
"""

MAC_LEN = 6
DST_MAC, SRC_MAC = 0, MAC_LEN  # where each MAC starts in a frame
ETH_LEN = 2 * MAC_LEN + 2  # destination MAC, source MAC, EtherType

# Locally administered MACs spelling "MCF": 02:4d:43:46:hi:lo for board hi:lo;
# group (multicast bit set) 03:4d:43:46:hi:lo for route / multicast group hi:lo.
MAC_PREFIX = b"\x02MCF"
GROUP_MAC_PREFIX = b"\x03MCF"
BOARD_AT = len(MAC_PREFIX)  # the board's (or group's) number, big-endian, closes the MAC
BOARD_LEN = MAC_LEN - BOARD_AT


def mac_board(mac) -> int | None:
    """Board id of an MCF board MAC (02:4d:43:46:HH:LL), else None."""
    mac = bytes(mac)
    return int.from_bytes(mac[BOARD_AT:], "big") if mac[:BOARD_AT] == MAC_PREFIX else None
