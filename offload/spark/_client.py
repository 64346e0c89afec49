"""The object store the Spark source reads through, on driver and executors.

:class:`offload.S3ObjectStore` brings the retries, backoff and error
translation of the offload path; this module only adds explicit credentials
(the ``access_key``/``secret_key`` options), which ``make_s3_client`` does not
take: the client is built from the same botocore ``Config`` that
``make_s3_client`` would use, on a session holding the keys.  Without keys,
boto3's standard chain applies (env, profiles, instance roles).

One store per connection per Python process: executors reuse Python workers
(``spark.python.worker.reuse``), and a boto3 client keeps a connection pool.
The cache holds clients only, never anything derived from a query.
"""

from __future__ import annotations

import threading
from typing import Any

import boto3

from .. import OffloadSettings, S3ObjectStore, make_s3_client
from ._options import Connection

_POOL_SIZE = 32
_lock = threading.Lock()
_stores: dict[Connection, S3ObjectStore] = {}


def settings_for(connection: Connection) -> OffloadSettings:
    settings = OffloadSettings(bucket=connection.bucket, prefix=connection.prefix,
                               endpoint_url=connection.endpoint_url, region=connection.region)
    settings.check()
    return settings


def _client(connection: Connection, settings: OffloadSettings) -> Any:
    client = make_s3_client(settings, pool_size=_POOL_SIZE)
    if connection.access_key is None:
        return client
    session = boto3.session.Session(aws_access_key_id=connection.access_key,
                                    aws_secret_access_key=connection.secret_key)
    return session.client("s3", endpoint_url=connection.endpoint_url,
                          config=client.meta.config)


def store_for(connection: Connection) -> S3ObjectStore:
    with _lock:
        store = _stores.get(connection)
        if store is None:
            settings = settings_for(connection)
            store = _stores[connection] = S3ObjectStore(_client(connection, settings), settings)
        return store
