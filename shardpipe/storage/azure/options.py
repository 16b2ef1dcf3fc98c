"""Azure ``storage_options`` as adlfs takes them: names checked, a blob client made from them.

The same options open the target with adlfs (for zarr's metadata and reads)
and make the ``azure-storage-blob`` client that shardpipe writes shards
with, so a user spells them once, as adlfs documents them:
``connection_string``; ``account_name`` with ``account_key``,
``sas_token``, ``credential`` or a service principal (``client_id``,
``client_secret``, ``tenant_id``); ``anon``; ``account_host``. Missing ones
are read from the environment variables adlfs reads
(``AZURE_STORAGE_CONNECTION_STRING``, ``AZURE_STORAGE_ACCOUNT_NAME``...).

The names are checked before anything is opened
(:func:`~shardpipe.storage.azure.schemes.check_azure_options`).

The client is made with shardpipe's timeouts and without the SDK's own
retries (:data:`CLIENT_DEFAULTS`): :class:`~shardpipe.storage.retry.RetryingStore`
retries transient faults once, above it, so that the two do not multiply.
"""

from __future__ import annotations

import asyncio
import inspect
import os
from typing import Any

from azure.core.credentials import AccessToken
from azure.storage.blob import BlobServiceClient

from shardpipe.errors import InvalidArgumentError

CLIENT_DEFAULTS: dict[str, Any] = {
    "retry_total": 0,
    "connection_timeout": 5,
    "read_timeout": 30,
}
"""Keywords of the ``BlobServiceClient`` shards are written with.

No retries in the SDK (``retry_total=0``): shardpipe's retry layer tries
each call again on a transient fault, with backoff, up to its own number of
attempts. A 5 s connect timeout and a 30 s read timeout (the longest the
service may stay silent, not a bound on a transfer). ``connection_timeout``
and ``read_timeout`` in ``storage_options`` override them.
"""

POOL_CONNECTIONS = 64
"""Connections the client keeps open: as many as uploads in flight.

See :mod:`shardpipe.storage.uploads`.
"""


def _option(options: dict[str, Any], name: str, variable: str) -> Any:
    value = options.get(name)
    return value if value is not None else os.environ.get(variable)


def _anonymous(options: dict[str, Any]) -> bool:
    if options.get("anon") is not None:
        return bool(options["anon"])
    return os.environ.get("AZURE_STORAGE_ANON", "false").lower() not in ("false", "0", "f", "")


class _SyncToken:
    """A synchronous token credential over an asynchronous one (what adlfs takes).

    Its tokens are fetched on fsspec's event loop, where adlfs's own client
    runs.
    """

    def __init__(self, credential: Any) -> None:
        self.credential = credential

    def get_token(self, *scopes: str, **kwargs: Any) -> AccessToken:
        from fsspec.asyn import get_loop

        future = asyncio.run_coroutine_threadsafe(
            self.credential.get_token(*scopes, **kwargs), get_loop()
        )
        token: AccessToken = future.result()
        return token


def _sync_credential(credential: Any) -> Any:
    get_token = getattr(credential, "get_token", None)
    if get_token is not None and inspect.iscoroutinefunction(get_token):
        return _SyncToken(credential)
    return credential


def _credential(options: dict[str, Any], account_name: str) -> Any:
    """The credential for the account's URL, chosen in adlfs's order."""
    if options.get("credential") is not None:
        return _sync_credential(options["credential"])
    account_key = _option(options, "account_key", "AZURE_STORAGE_ACCOUNT_KEY")
    if account_key is not None:
        return {"account_name": account_name, "account_key": account_key}
    if _option(options, "sas_token", "AZURE_STORAGE_SAS_TOKEN") is not None:
        return None  # in the URL
    client_id = _option(options, "client_id", "AZURE_STORAGE_CLIENT_ID")
    if client_id is not None:
        from azure.identity import ClientSecretCredential

        return ClientSecretCredential(
            tenant_id=_option(options, "tenant_id", "AZURE_STORAGE_TENANT_ID"),
            client_id=client_id,
            client_secret=_option(options, "client_secret", "AZURE_STORAGE_CLIENT_SECRET"),
        )
    if _anonymous(options):
        return None
    from azure.identity import DefaultAzureCredential

    return DefaultAzureCredential()


def _client_keywords(options: dict[str, Any]) -> dict[str, Any]:
    import requests
    from azure.core.pipeline.transport import RequestsTransport

    keywords = dict(CLIENT_DEFAULTS)
    for name in ("connection_timeout", "read_timeout"):
        if options.get(name) is not None:
            keywords[name] = options[name]
    session = requests.Session()
    adapter = requests.adapters.HTTPAdapter(
        pool_connections=POOL_CONNECTIONS, pool_maxsize=POOL_CONNECTIONS
    )
    session.mount("http://", adapter)
    session.mount("https://", adapter)
    keywords["transport"] = RequestsTransport(session=session, session_owner=True)
    return keywords


def service_client(options: dict[str, Any]) -> BlobServiceClient:
    """The blob service client that ``options`` (adlfs's, see the module) describe.

    Parameters
    ----------
    options : dict
        ``storage_options`` of an Azure URL.

    Returns
    -------
    azure.storage.blob.BlobServiceClient
        With :data:`CLIENT_DEFAULTS` and a pool of :data:`POOL_CONNECTIONS`.

    Raises
    ------
    InvalidArgumentError
        If neither a connection string nor an account name is given (or set
        in the environment).
    """
    keywords = _client_keywords(options)
    connection_string = _option(options, "connection_string", "AZURE_STORAGE_CONNECTION_STRING")
    if connection_string is not None:
        return BlobServiceClient.from_connection_string(connection_string, **keywords)
    account_name = _option(options, "account_name", "AZURE_STORAGE_ACCOUNT_NAME")
    if account_name is None:
        raise InvalidArgumentError(
            "storage_options",
            "no Azure account: neither connection_string nor account_name is given, nor "
            "AZURE_STORAGE_CONNECTION_STRING or AZURE_STORAGE_ACCOUNT_NAME set",
            "Pass storage_options={'account_name': ..., 'account_key': ...} (or "
            "'connection_string', 'sas_token', 'credential')",
        )
    host = options.get("account_host") or f"{account_name}.blob.core.windows.net"
    url = f"https://{host}"
    sas_token = _option(options, "sas_token", "AZURE_STORAGE_SAS_TOKEN")
    credential = _credential(options, account_name)
    if credential is None and sas_token is not None:
        url += sas_token if sas_token.startswith("?") else f"?{sas_token}"
    return BlobServiceClient(url, credential=credential, **keywords)
