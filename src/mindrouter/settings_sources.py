"""Where settings come from besides the YAML's own values: the environment, secret files, and
paths relative to the configuration file.

Kept apart from the parsing in `settings.py`: these are the rules an operator deploys by (which
variables win, where a relative path points, what counts as a placeholder secret).
"""

from __future__ import annotations

from pathlib import Path

from sqlalchemy.engine import make_url

DEFAULT_SECRET_KEY = "change-me"
# The values shipped in the examples: a gateway started with one of them warns.
PLACEHOLDER_SECRET_KEYS = frozenset({DEFAULT_SECRET_KEY, "replace-with-a-long-random-string"})
MIN_SECRET_KEY_LENGTH = 16
# Environment variables that win over the file.
ENVIRONMENT = {
    "MINDROUTER_DATABASE_URL": "database_url",
    "MINDROUTER_REDIS_URL": "redis_url",
    "MINDROUTER_SECRET_KEY": "secret_key",
    "MINDROUTER_METRICS_TOKEN": "metrics_token",
}


def read_secret_file(path: str, base: Path | None) -> str:
    """The file's contents without the one trailing newline `echo` leaves. Raises OSError when it
    cannot be read and ValueError when it is empty."""
    file = _resolve(Path(path).expanduser(), base)
    try:
        value = file.read_text().removesuffix("\n")
    except OSError as exc:
        raise OSError(f"cannot read {file}: {exc.strerror}") from None
    if not value:
        raise ValueError(f"{file} is empty")
    return value


def _resolve(path: Path, base: Path | None) -> Path:
    return path if path.is_absolute() or base is None else base / path


def resolve_database_url(url: str, base: Path | None) -> str:
    """A SQLite URL with a relative path, made absolute against `base` (the config's folder)."""
    if base is None or not url.startswith("sqlite"):
        return url
    parsed = make_url(url)
    database = parsed.database
    if not database or database == ":memory:" or database.startswith("file:"):
        return url
    path = Path(database).expanduser()
    if path.is_absolute():
        return url
    return parsed.set(database=str((base / path).resolve())).render_as_string(hide_password=False)


def secret_key_problem(secret_key: str) -> str | None:
    """Why a secret key is not fit for production, or None."""
    if secret_key in PLACEHOLDER_SECRET_KEYS:
        return "secret_key is the example's placeholder"
    if len(secret_key) < MIN_SECRET_KEY_LENGTH:
        return f"secret_key is shorter than {MIN_SECRET_KEY_LENGTH} characters"
    return None
