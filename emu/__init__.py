"""mcf-emu: a trace-driven emulator of an FPGA compute-NIC cluster for long-context LLM inference."""

__version__ = "0.1.0"
