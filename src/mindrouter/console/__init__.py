"""The web console: server-rendered pages for users and administrators, sign-in with a password
or OpenID Connect, and the public status page, mounted at /console in the gateway's app."""

from mindrouter.console.app import build_console

__all__ = ["build_console"]
