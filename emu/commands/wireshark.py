"""`emu wireshark`: where the MCF Lua dissector is and how to load it."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

from ..errors import EmuError


def register(subparsers) -> None:
    p = subparsers.add_parser("wireshark", epilog="example: emu wireshark", help="show how to load the MCF Wireshark dissector",
                              description="Print the path of the MCF Lua dissector shipped with the package "
                                          "and how to load it in Wireshark or tshark.")
    p.add_argument("--install", action="store_true",
                   help="copy the dissector into your personal Wireshark Lua plugins folder")
    p.add_argument("--json", action="store_true",
                   help="print the dissector's file, protocol, EtherType and the plugins folder as one JSON object")
    p.set_defaults(func=run)


def personal_plugins_dir() -> Path:
    """Wireshark's personal Lua plugins folder, as tshark reports it when installed."""
    tshark = shutil.which("tshark")
    if tshark:
        try:
            out = subprocess.run([tshark, "-G", "folders"], capture_output=True, text=True, timeout=30).stdout
        except (OSError, subprocess.SubprocessError):
            out = ""
        for line in out.splitlines():
            name, _, value = line.partition(":")
            if name.strip() == "Personal Lua Plugins" and value.strip():
                return Path(value.strip())
    if sys.platform == "win32":
        return Path(os.environ.get("APPDATA", "~")) / "Wireshark" / "plugins"
    return Path("~/.local/lib/wireshark/plugins").expanduser()


def run(args) -> int:
    from ..atomic import atomic_file
    from ..codec.dissector import ETHERTYPE, LUA_FILE, PROTO

    if not LUA_FILE.exists():
        raise EmuError(f"dissector missing from the installed package: {LUA_FILE}")
    plugins = personal_plugins_dir()
    if args.install:
        target = plugins / LUA_FILE.name
        try:
            with atomic_file(target, "wb") as fh:
                fh.write(LUA_FILE.read_bytes())
        except OSError as exc:
            raise EmuError(f"cannot write {target}: {exc.strerror or exc}") from None
    facts = {"dissector": str(LUA_FILE), "protocol": PROTO, "ethertype": ETHERTYPE,
             "personal_plugins": str(plugins), "installed": str(target) if args.install else None,
             "load": f"tshark -X lua_script:{LUA_FILE} -r CAPTURE.pcap"}
    if args.json:
        print(json.dumps(facts, indent=2))
        return 0
    if args.install:
        print(f"installed {target}; Wireshark and tshark load it at start-up")
        return 0
    print(f"""MCF Wireshark dissector: protocol "{PROTO}" on EtherType 0x{ETHERTYPE:04X}, display-filter prefix "{PROTO}."
  file: {LUA_FILE}

Load it for one run:
  wireshark -X lua_script:{LUA_FILE} CAPTURE.pcap
  tshark -X lua_script:{LUA_FILE} -r CAPTURE.pcap -Y '{PROTO}.op == "kv_replica"'
  tshark -X lua_script:{LUA_FILE} -r CAPTURE.pcap -T fields -e {PROTO}.src_node -e {PROTO}.op -e {PROTO}.kv_id

Load it always: copy it into your personal Lua plugins folder
  {plugins}/
  (or run `emu wireshark --install`; Wireshark shows the folder under Help > About > Folders)""")
    return 0
