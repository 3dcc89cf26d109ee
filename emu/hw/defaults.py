"""Defaults and names shared by the `emu hw` commands; imports nothing heavy (the CLI reads it at start-up)."""

DEFAULT_TOPOLOGY = "bring:4"
DEFAULT_HEADS = 8
DEFAULT_HEAD_DIM = 128
DEFAULT_TTL = 16

DEFAULT_RATES = ("10Mbps", "100Mbps", "1Gbps")  # emu hw bringup --rates: the rate ramp

# name -> what it breaks (serve --break-rule NAME, hidden: for tests; emu.hw.rehearsal.break_rule)
BROKEN_RULES = {"ttl": "forwarded copies keep the ttl they came with (the rule: ttl - 1)",
                "ack-msg-id": "acks name the message after the one acknowledged (the rule: its msg_id)"}

SCENARIOS = {
    "reduce-merge": "a reduction of partial softmax states (merge): own and children's contributions in, the "
                    "merged state out to the parent (or multicast as reduce_result by the root of an all_reduce)",
    "reduce-max": "the same with an element-wise max",
    "reduce-sum": "the same with an element-wise sum",
    "multicast": "a KV block (kv_replica) multicast to every board: forwarded copies down the tree and an ack",
    "invalidate": "a replica pushed, drained and invalidated: forwarded copies and an ack for each",
    "forward": "a unicast KV transfer between two other boards whose route crosses the device: one copy on",
    "probe": "reliability: a message with a fragment missing, a probe (nack expected), the missing fragment "
             "as a retransmission (ack expected), a second probe (ack expected)",
}
