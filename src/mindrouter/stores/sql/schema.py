"""The tables. Alembic migrations (in `migrations/versions`) create exactly these; a test compares
the migrated database with this metadata on every supported engine.

Audit records deliberately carry no foreign keys: the trail must outlive the users, keys and
models it mentions, so it copies the user's name and the key's prefix at write time.
"""

from __future__ import annotations

from sqlalchemy import (
    JSON,
    BigInteger,
    Boolean,
    Column,
    Float,
    ForeignKey,
    Index,
    Integer,
    MetaData,
    String,
    Table,
    Text,
    false,
)

from mindrouter.stores.sql.columns import (
    UtcDateTime,
    big_id,
    long_text,
    name_type,
    token_type,
)

# Explicit constraint names, so that later migrations can refer to them on every engine.
NAMING = {
    "ix": "ix_%(column_0_label)s",
    "uq": "uq_%(table_name)s_%(column_0_name)s",
    "ck": "ck_%(table_name)s_%(constraint_name)s",
    "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
    "pk": "pk_%(table_name)s",
}
metadata = MetaData(naming_convention=NAMING)

groups = Table(
    "groups",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("name", name_type(), nullable=False, unique=True),
    Column("scheduler_weight", Float, nullable=False),
    Column("token_budget", BigInteger, nullable=False),
    Column("rpm", Integer, nullable=False),
    Column("max_concurrent", Integer, nullable=False),
    Column("budget_period_days", Integer, nullable=False),
    Column("created_at", UtcDateTime, nullable=False),
    Column("updated_at", UtcDateTime, nullable=False),
    # The models the group may use: name patterns, or NULL for every model.
    Column("models", JSON(none_as_null=True), nullable=True),
)

users = Table(
    "users",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("name", name_type(), nullable=False, unique=True),
    Column(
        "group_id",
        Integer,
        ForeignKey("groups.id", ondelete="RESTRICT"),
        nullable=False,
        index=True,
    ),
    Column("active", Boolean, nullable=False),
    # Per-user overrides of the group's limits; NULL means "as the group".
    Column("scheduler_weight", Float, nullable=True),
    Column("token_budget", BigInteger, nullable=True),
    Column("rpm", Integer, nullable=True),
    Column("max_concurrent", Integer, nullable=True),
    Column("budget_period_days", Integer, nullable=True),
    Column("created_at", UtcDateTime, nullable=False),
    Column("updated_at", UtcDateTime, nullable=False),
)

api_keys = Table(
    "api_keys",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column(
        "user_id", Integer, ForeignKey("users.id", ondelete="CASCADE"), nullable=False, index=True
    ),
    Column("prefix", token_type(8), nullable=False, index=True),
    Column("digest", token_type(64), nullable=False, unique=True),
    Column("secret_hash", String(255), nullable=False),
    Column("is_admin", Boolean, nullable=False),
    Column("name", String(100), nullable=True),
    Column("created_at", UtcDateTime, nullable=False),
    Column("expires_at", UtcDateTime, nullable=True),
    Column("revoked_at", UtcDateTime, nullable=True),
    Column("last_used_at", UtcDateTime, nullable=True),
)

backends = Table(
    "backends",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("name", name_type(), nullable=False, unique=True),
    Column("engine", String(20), nullable=False),
    Column("url", String(500), nullable=False),
    Column("gpu", String(50), nullable=True),
    Column("max_concurrent", Integer, nullable=False),
    Column("priority", Integer, nullable=False),
    Column("enabled", Boolean, nullable=False),
    Column(
        "models", JSON(none_as_null=True), nullable=True
    ),  # [{"name", "upstream"}] or NULL: discovered
    # Set by an admin: every process finishes what runs there and sends nothing new.
    Column("draining", Boolean, nullable=False, server_default=false()),
    Column("created_at", UtcDateTime, nullable=False),
    Column("updated_at", UtcDateTime, nullable=False),
)

models = Table(
    "models",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("name", name_type(200), nullable=False, unique=True),
    Column("context_length", Integer, nullable=False),
    Column("capabilities", JSON, nullable=False),
    Column("aliases", JSON, nullable=False),
    Column("enabled", Boolean, nullable=False),
    Column("created_at", UtcDateTime, nullable=False),
    Column("updated_at", UtcDateTime, nullable=False),
)

audit_records = Table(
    "audit_records",
    metadata,
    Column("id", big_id(), primary_key=True, autoincrement=True),
    Column("uuid", token_type(36), nullable=False, unique=True),
    Column("request_id", String(64), nullable=True),
    Column("created_at", UtcDateTime, nullable=False, index=True),
    Column("user_id", Integer, nullable=True, index=True),
    Column("user_name", name_type(), nullable=True, index=True),
    Column("key_id", Integer, nullable=True, index=True),
    Column("key_prefix", token_type(12), nullable=True),
    Column("model", String(200), nullable=False, index=True),
    Column("endpoint", String(200), nullable=False),
    Column("messages", JSON(none_as_null=True), nullable=True),  # NULL once purged
    Column("stream", Boolean, nullable=False),
    Column("client_ip", String(64), nullable=True),
    Column("user_agent", String(500), nullable=True),
    Column("status", String(16), nullable=False),
    Column("output", long_text(), nullable=True),  # NULL once purged
    Column("error_message", Text, nullable=True),
    Column("input_tokens", Integer, nullable=True),
    Column("output_tokens", Integer, nullable=True),
    Column("backend", String(100), nullable=True),
    Column("attempts", Integer, nullable=False),
    Column("queued_ms", Float, nullable=True),
    Column("first_token_ms", Float, nullable=True),
    Column("total_ms", Float, nullable=True),
    Column("completed_at", UtcDateTime, nullable=True),
    Column("purged", Boolean, nullable=False),
    # The gateway process that wrote it (`instances.id`); NULL for records older than 0003.
    Column("instance_id", token_type(32), nullable=True),
    # A sweeper looks up the records still `pending` of one dead process.
    Index("ix_audit_records_instance_status", "instance_id", "status"),
)

# One row per running gateway process, its heartbeat renewed every `heartbeat_s`; a row whose
# heartbeat is older than `instance_stale_s` belongs to a process that died (or stopped), and
# any other process closes its `pending` audit records, then deletes the row.
instances = Table(
    "instances",
    metadata,
    Column("id", token_type(32), primary_key=True),
    Column("host", String(200), nullable=False),
    Column("pid", Integer, nullable=False),
    Column("started_at", UtcDateTime, nullable=False),
    Column("heartbeat_at", UtcDateTime, nullable=False),
)

usage = Table(
    "usage",
    metadata,
    Column("user_id", Integer, ForeignKey("users.id", ondelete="CASCADE"), primary_key=True),
    Column("period_start", UtcDateTime, nullable=False),
    Column("period_tokens", BigInteger, nullable=False),
    # Never reset, not by a new period and not by audit retention.
    Column("lifetime_tokens", BigInteger, nullable=False),
    Column("updated_at", UtcDateTime, nullable=False),
)

# Responses kept for `previous_response_id` chains and `GET /v1/responses/{id}`, per owner.
# `context` is every item the model saw before this response's own output (the chain's earlier
# items and this request's input, instructions excepted), so a follow-up needs one read.
stored_responses = Table(
    "stored_responses",
    metadata,
    Column("id", token_type(40), primary_key=True),
    Column("user_id", Integer, nullable=False, index=True),
    Column("created_at", UtcDateTime, nullable=False, index=True),
    Column("model", String(200), nullable=False),
    Column("input_items", JSON, nullable=False),
    Column("context", JSON, nullable=False),
    Column("response", JSON, nullable=False),
)

# Row 1, the auth epoch: bumped in the same transaction as any change that can invalidate a key
# cached by a gateway process. Row 2, the catalog epoch: bumped with any change to backends,
# models or groups that routing reads. Every process polls both.
auth_epoch = Table(
    "auth_epoch",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=False),
    Column("epoch", BigInteger, nullable=False),
)

# How a user signs in to the web console: a local password (Argon2), or an OpenID Connect
# subject (issuer and `sub`, which the provider never reassigns), and whether the console
# treats them as an administrator. Users without a row here use the API with keys only.
console_accounts = Table(
    "console_accounts",
    metadata,
    Column("user_id", Integer, ForeignKey("users.id", ondelete="CASCADE"), primary_key=True),
    Column("password_hash", String(255), nullable=True),
    Column("oidc_subject", String(500), nullable=True, unique=True),
    Column("is_admin", Boolean, nullable=False),
    Column("updated_at", UtcDateTime, nullable=False),
)
