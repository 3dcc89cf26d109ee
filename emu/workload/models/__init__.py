"""Model profiles (TOML data files); read them with ``emu.workload.profiles``."""
