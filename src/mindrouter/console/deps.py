"""What the console's pages work with, built once with the app."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

from mindrouter.http.routing_admin_routes import SetDraining
from mindrouter.identity.attempts import FailedAttempts
from mindrouter.identity.authenticate import Authenticator
from mindrouter.identity.passwords import Passwords
from mindrouter.pipeline.gateway import Gateway
from mindrouter.settings import Settings
from mindrouter.stores.sql.bundle import SqlStores


@dataclass(slots=True)
class Console:
    settings: Settings
    stores: SqlStores
    gateway: Gateway
    authenticator: Authenticator
    set_draining: SetDraining  # drains a backend in every process
    passwords: Passwords = field(default_factory=Passwords)
    sign_in_failures: FailedAttempts = field(
        default_factory=lambda: FailedAttempts(10, time.monotonic)
    )
    # The OpenID Connect client (Authlib's), when `oidc:` is configured.
    oidc: Any = None
