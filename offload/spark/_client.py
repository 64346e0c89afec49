"""The object store the Spark source reads through, on driver and executors.

Executors get only the picklable :class:`~offload.spark.Connection` (inside
the pickled reader) and build their client from it here, with
:func:`offload.make_s3_client` and :class:`offload.S3ObjectStore`: the same
client configuration, retries, backoff and error translation as the offload
path.  Explicit keys (the ``access_key``/``secret_key`` options) go to
``make_s3_client``; without them boto3's standard chain applies (env,
profiles, instance roles).

One store per connection per Python process: executors reuse Python workers
(``spark.python.worker.reuse``), and a boto3 client keeps a connection pool.
The cache holds clients only, never anything derived from a query.  It is
keyed by process id too: a process forked after building a client (a
``multiprocessing`` pool in a user's job) must not share its sockets.
"""

from __future__ import annotations

import os
import threading

from .. import OffloadSettings, S3ObjectStore, make_s3_client
from ._options import Connection

_POOL_SIZE = 32
_lock = threading.Lock()
_stores: dict[tuple[int, Connection], S3ObjectStore] = {}


def settings_for(connection: Connection) -> OffloadSettings:
    settings = OffloadSettings(bucket=connection.bucket, prefix=connection.prefix,
                               endpoint_url=connection.endpoint_url, region=connection.region)
    settings.check()
    return settings


def store_for(connection: Connection) -> S3ObjectStore:
    key = (os.getpid(), connection)
    with _lock:
        store = _stores.get(key)
        if store is None:
            settings = settings_for(connection)
            client = make_s3_client(settings, pool_size=_POOL_SIZE,
                                    access_key=connection.access_key,
                                    secret_key=connection.secret_key)
            store = _stores[key] = S3ObjectStore(client, settings)
        return store
