"""sluice - the Python client of sluiced: leases before model calls, the estimator, action
limits and the task graph. Standard library only; typed (py.typed).

    with client.lease_for(body) as lease:            # sized by sluiced's exact count
        lease.record(anthropic_client.messages.create(**body).usage)

Client (blocking, thread-safe) and AsyncClient (native asyncio: its own HTTP/1.1
connection pool, no threads) share one protocol (protocol.py): the lease loop, checkpoint
before a wait, fail-open to a local share when sluiced is unreachable, full-jitter backoff
after a 429 - the semantics and defaults of libsluice-client (docs/client.md).
"""
from .aio import AsyncClient
from .answers import Estimate, Lease, LimitAnswer, Settled
from .checkpoint import save_checkpoint
from .client import Client, default_client, lease, limit, limited
from .errors import (Conflict, Error, ExceedsCapacity, Forbidden, InvalidRequest,
                     LimitExceeded, MaxWaitExceeded, NotFound, Rejected, Suspended,
                     Unavailable, Unreachable)
from .failopen import Options, backoff_delay_s
from .scopes import LeaseScope, LimitScope
from .usage import Usage, usage_from

__all__ = ["AsyncClient", "Client", "Conflict", "Error", "Estimate", "ExceedsCapacity",
           "Forbidden", "InvalidRequest", "Lease", "LeaseScope", "LimitAnswer",
           "LimitExceeded", "LimitScope", "MaxWaitExceeded", "NotFound", "Options",
           "Rejected", "Settled", "Suspended", "Unavailable", "Unreachable", "Usage",
           "backoff_delay_s", "default_client", "lease", "limit", "limited",
           "save_checkpoint", "usage_from"]
__version__ = "0.2.0"
