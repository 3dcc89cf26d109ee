"""Per-op work of the transformer: flops and DRAM bytes for the replay's roofline.

Counts are exact integers: 2 ops per multiply-add; attention counts 4 * H_q * d per
(query, key) pair it computes (QK^T and PV, paper eq. 6), causal masking included.
Bytes are what the op streams through DRAM: its weights, the KV it reads or writes,
its input and output activations. Norms, RoPE, softmax and residuals are small against
these and are folded into the per-op overhead of the hardware profile.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

from .profiles import dtype_bytes


@dataclass(frozen=True)
class Model:
    layers: int
    hidden: int
    heads: int
    kv_heads: int
    head_dim: int
    intermediate: int
    vocab: int
    weight_dtype: str
    kv_dtype: str
    act_dtype: str

    @classmethod
    def from_profile(cls, p: dict) -> "Model":
        return cls(**{k: p[k] for k in cls.__dataclass_fields__})

    # ---- sizes
    @cached_property
    def q_dim(self) -> int:
        return self.heads * self.head_dim

    @cached_property
    def kv_dim(self) -> int:
        return self.kv_heads * self.head_dim

    @cached_property
    def m(self) -> int:
        """KV bytes per token per layer: 2 * H_kv * d * b_kv (schemes.md's m)."""
        return dtype_bytes(2 * self.kv_dim, self.kv_dtype)

    @cached_property
    def m_token(self) -> int:
        """KV bytes per token over all layers (paper eq. 1)."""
        return self.m * self.layers

    def kv_bytes(self, tokens: int) -> int:
        """KV bytes of ``tokens`` tokens of one layer."""
        return tokens * self.m

    def act(self, elems: int) -> int:
        return dtype_bytes(elems, self.act_dtype)

    def w(self, elems: int) -> int:
        return dtype_bytes(elems, self.weight_dtype)

    @cached_property
    def qkv_params(self) -> int:
        return self.hidden * (self.q_dim + 2 * self.kv_dim)

    @cached_property
    def mlp_params(self) -> int:
        # output projection + gate, up and down projections (SwiGLU)
        return self.q_dim * self.hidden + 3 * self.hidden * self.intermediate

    @cached_property
    def head_params(self) -> int:
        return self.vocab * self.hidden

    @cached_property
    def query_bytes(self) -> int:
        """One token's query vector (H_q * d activations), what decode multicasts."""
        return self.act(self.q_dim)

    @cached_property
    def state_bytes(self) -> int:
        """One node's decode partial state per layer: (m, l, o~) per head, in fp32."""
        return 4 * self.heads * (self.head_dim + 2)

    @cached_property
    def hidden_bytes(self) -> int:
        return self.act(self.hidden)

    # ---- prefill ops over q query tokens of one layer
    def qkv(self, q: int) -> tuple[int, int]:
        flops = 2 * q * self.qkv_params
        mem = self.w(self.qkv_params) + self.act(q * self.hidden) + self.act(q * self.q_dim) + self.kv_bytes(q)
        return flops, mem

    def kv_head_bytes(self, tokens: int, kv_heads: int) -> int:
        """KV bytes of ``tokens`` tokens of one layer for ``kv_heads`` of the KV heads."""
        return dtype_bytes(2 * tokens * kv_heads * self.head_dim, self.kv_dtype)

    def attn(self, q: int, kv_tokens: int, pairs: int, heads: int | None = None,
             kv_heads: int | None = None) -> tuple[int, int]:
        """Attention of q queries over kv_tokens keys of which ``pairs`` (query, key) pairs
        are unmasked: reads the keys/values and the queries, writes a partial output.
        ``heads``/``kv_heads``: a head shard (Ulysses); default all heads."""
        heads = self.heads if heads is None else heads
        kv_heads = self.kv_heads if kv_heads is None else kv_heads
        flops = 4 * heads * self.head_dim * pairs
        mem = self.kv_head_bytes(kv_tokens, kv_heads) + 2 * self.act(q * heads * self.head_dim)
        return flops, mem

    def mlp(self, q: int) -> tuple[int, int]:
        flops = 2 * q * self.mlp_params
        mem = self.w(self.mlp_params) + 2 * self.act(q * self.hidden) + self.act(q * self.q_dim)
        return flops, mem

    def lm_head(self, q: int = 1) -> tuple[int, int]:
        flops = 2 * q * self.head_params
        mem = self.w(self.head_params) + self.act(q * self.hidden)
        return flops, mem
