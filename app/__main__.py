"""``python -m app`` is the ``ledgerd`` command."""

from .cli import main

main()
