"""Alembic environment: runs on the connection handed over by memory.store.db.migrate()."""

from alembic import context

from memory.store.schema import metadata

connection = context.config.attributes.get("connection")
if connection is None:
    raise RuntimeError("run migrations through `clawgate` (memory.store.db.migrate), not the alembic CLI")

context.configure(
    connection=connection,
    target_metadata=metadata,
    render_as_batch=connection.dialect.name == "sqlite",
    compare_type=True,
)
with context.begin_transaction():
    context.run_migrations()
