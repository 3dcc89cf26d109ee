"""One module per `emu` subcommand.

Each module defines ``register(subparsers)``, which adds its parser and sets
``func`` to a callable taking the parsed arguments and returning an exit status.
The CLI discovers the modules here, so adding a command touches no other file.
"""
