"""sluice - the Python client of sluiced: leases before model calls and action-limit checks.

Standard library only. Client (blocking) and AsyncClient (asyncio; each call runs the
blocking one in the loop's default executor, so a held check never blocks the loop).
The HTTP contract is docs/api.md; the lease loop follows libsluice-client
(docs/client.md): the checkpoint is saved before the first wait, queued leases
long-poll their ticket, rejected ones sleep until retry_at, one request_id per request.
"""
from .client import (AsyncClient, Client, Error, Lease, LimitAnswer, LimitExceeded,
                     MaxWaitExceeded, Rejected, Unreachable, default_client, limit, limited,
                     save_checkpoint)

__all__ = ["AsyncClient", "Client", "Error", "Lease", "LimitAnswer", "LimitExceeded",
           "MaxWaitExceeded", "Rejected", "Unreachable", "default_client", "limit", "limited",
           "save_checkpoint"]
__version__ = "0.1.0"
