"""``python -m cli`` is the ``ledgerd`` command."""

from . import main

main()
