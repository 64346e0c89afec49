"""``ledgerd``: the command line (``ledgerd = "cli:main"``).

::

    ledgerd serve [--host H] [--port P] [--config FILE]
    ledgerd ledger create [--meta k=v ...]
    ledgerd ledger get|fence|close|delete|offload-status ID
    ledgerd ledger list [--state OPEN|FENCED|CLOSED] [--json]
    ledgerd ledger append ID [DATA | --file F | stdin] [--entry-id N]
    ledgerd ledger append ID --lines|--frames [--first-entry-id N] < input
    ledgerd ledger read ID [ENTRY] [--start S] [--end E] [--limit N] [--format raw|jsonl|frames]
    ledgerd offload ID [--no-wait]
    ledgerd gc [--major | --minor] [--no-wait]
    ledgerd export --output PATH|s3://B/P [--ledgers 3,7,10-20] [--overwrite] [--master M]
    ledgerd verify [--ledgers ...] [--master M]
    ledgerd tail --output DIR --checkpoint DIR [--ledgers 3,7|metadata.K=V] [--once] [--master M]
    ledgerd openapi
    ledgerd bench [--duration S] [--only SUITE ...] [--quick] [--big]

Client commands take ``--url``/``LEDGERD_URL`` and ``--password``/``LEDGERD_PASSWORD``
(``--token``/``LEDGERD_ADMIN_TOKEN`` for admin calls).  They talk to the server
through the generated client (``ledgerd_client``) and import neither the server
nor the engine; ``serve``, ``openapi`` and ``bench`` import the server when run,
``export``, ``verify`` and ``tail`` import Spark when run.

Exit codes: 0 done; 1 the server refused (the problem's detail and code are
printed) or the operation failed (offload FAILED, verify found damage); 2 bad
flags, arguments, settings or input; 3 the server or S3 could not be reached;
70 an internal error (a bug: ``LEDGERD_DEBUG=1`` shows its traceback); 130
interrupted.  Errors are one line on stderr, ``ledgerd: error: ...``.
"""

from ._main import main as main
