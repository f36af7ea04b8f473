"""Connections and schema for the dreaming database (embedded pgserver or any DSN with pgvector).

``Database.ensure_schema(spec)`` applies pending migrations under an advisory lock (so processes starting
together migrate once) and checks that the configured embedder matches the model and dimension the
database was created with. ``Database.connect()`` hands out psycopg 3 connections with the pgvector
type registered.
"""

from __future__ import annotations

import atexit
import hashlib
import threading
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass

import psycopg
from pgvector.psycopg import register_vector
from psycopg.rows import dict_row

from dreaming_dagster.config.settings import DreamingSettings
from dreaming_dagster.sql import load_sql, migration_files
from dreaming_dagster.storage import embedded
from dreaming_dagster.storage.embedding_spec import EmbeddingSpec

# Any fixed 64-bit number: serialises schema changes across every process using this database.
SCHEMA_LOCK_KEY = 7_243_001_118
CONFIG_EMBEDDING_MODEL = "embedding_model"
CONFIG_EMBEDDING_DIMENSION = "embedding_dimension"
# How long a graph lock waits for one of the lock pool's connections before opening its own.
LOCK_POOL_WAIT_S = 0.05
DIMENSION_PLACEHOLDER = "{{ embedding_dimension }}"
# Databases record a migration's whole-file hash until apply_migrations rewrites it as the statements' hash;
# these migrations' comments changed since, so their earlier whole-file hashes are still accepted.
WHOLE_FILE_CHECKSUMS_BEFORE_COMMENT_EDITS = {
    "0023": "00614acbe89262dec8a9e82ae64cda53f0cdfbbadcf9872556b70045b2335fc9",
    "0024": "99edb06ad6ce335cc38becd6e72bc94d51588d6d6c8f2cca777d95fb60c2190b",
    "0025": "facc8613a1137a7fa5c69546a1f9876a2f53f21626c4030060a01e8991222e1f",
}


class EmbeddingMismatchError(RuntimeError):
    """The configured embedder differs from the one the database's vectors were written with."""

    def __init__(self, recorded: EmbeddingSpec, configured: EmbeddingSpec):
        self.recorded, self.configured = recorded, configured
        super().__init__(
            f"This database holds {recorded.dimension}-dimensional embeddings from {recorded.model!r}, "
            f"but the configured embedder is {configured.model!r} ({configured.dimension} dimensions). "
            f"Vectors from different models cannot be compared. Run `dreaming reembed` to re-embed every "
            f"pair and subject with {configured.model!r}, or set the DREAMING_EMBEDDING_* settings back "
            f"to {recorded.model!r}."
        )


class MigrationChecksumError(RuntimeError):
    pass


@dataclass(frozen=True)
class Migration:
    version: str
    name: str
    template: str

    @property
    def checksum(self) -> str:
        """The hash of the migration's statements: full-line comments and blank lines are not part of it,
        so the comment that explains a migration can be corrected after it has been applied."""
        statements = [line.rstrip() for line in self.template.splitlines()]
        kept = [line for line in statements if line and not line.lstrip().startswith("--")]
        return hashlib.sha256("\n".join(kept).encode()).hexdigest()

    def accepts(self, recorded: str) -> bool:
        """Whether ``recorded`` is this migration's checksum, or a whole-file hash from before checksums
        left comments out (of this text, or of the text before its comment was corrected)."""
        whole_file = hashlib.sha256(self.template.encode()).hexdigest()
        return recorded in {self.checksum, whole_file, WHOLE_FILE_CHECKSUMS_BEFORE_COMMENT_EDITS.get(self.version)}

    def render(self, dimension: int) -> str:
        return render_dimension(self.template, dimension)


def render_dimension(template: str, dimension: int) -> str:
    """Fill the vector dimension into a SQL template (the only templated value; always an int)."""
    return template.replace(DIMENSION_PLACEHOLDER, str(int(dimension)))


def load_migrations() -> list[Migration]:
    migrations = []
    for path in migration_files():
        version, _, name = path.stem.partition("_")
        migrations.append(Migration(version=version, name=name, template=path.read_text(encoding="utf-8")))
    return migrations


def read_config(conn: psycopg.Connection) -> dict[str, str]:
    return {row[0]: row[1] for row in conn.execute(load_sql("schema/read_config")).fetchall()}


def write_config(conn: psycopg.Connection, key: str, value: str) -> None:
    conn.execute(load_sql("schema/write_config"), {"key": key, "value": value})


def recorded_spec(conn: psycopg.Connection) -> EmbeddingSpec | None:
    config = read_config(conn)
    if CONFIG_EMBEDDING_DIMENSION not in config:
        return None
    return EmbeddingSpec(model=config[CONFIG_EMBEDDING_MODEL], dimension=int(config[CONFIG_EMBEDDING_DIMENSION]))


def lock_schema(conn: psycopg.Connection) -> None:
    """Take the schema lock for the rest of the current transaction."""
    conn.execute("SELECT pg_advisory_xact_lock(%s)", (SCHEMA_LOCK_KEY,))


def apply_migrations(conn: psycopg.Connection, spec: EmbeddingSpec) -> list[str]:
    """Apply pending migrations in one transaction; return the versions applied (empty when current).

    The first run records ``spec`` as the database's embedding model. Later runs refuse a different
    embedder with :class:`EmbeddingMismatchError` before touching anything.
    """
    with conn.transaction():
        lock_schema(conn)
        conn.execute(load_sql("schema/bootstrap"))
        recorded = recorded_spec(conn)
        if recorded is not None and recorded != spec:
            raise EmbeddingMismatchError(recorded, spec)
        dimension = recorded.dimension if recorded else spec.dimension
        applied = dict(conn.execute(load_sql("schema/applied_migrations")).fetchall())
        newly_applied = []
        for migration in load_migrations():
            if migration.version in applied:
                recorded_checksum = applied[migration.version]
                if not migration.accepts(recorded_checksum):
                    raise MigrationChecksumError(
                        f"migration {migration.version}_{migration.name} was edited after it was applied; "
                        "add a new migration instead of changing an applied one"
                    )
                if recorded_checksum != migration.checksum:
                    conn.execute(load_sql("schema/update_migration_checksum"), {
                        "version": migration.version, "checksum": migration.checksum})
                continue
            conn.execute(migration.render(dimension))
            conn.execute(load_sql("schema/record_migration"), {
                "version": migration.version, "name": migration.name, "checksum": migration.checksum})
            newly_applied.append(migration.version)
        if recorded is None:
            write_config(conn, CONFIG_EMBEDDING_MODEL, spec.model)
            write_config(conn, CONFIG_EMBEDDING_DIMENSION, str(spec.dimension))
    return newly_applied


class Database:
    """A dreaming database reachable through one URL.

    ``pool_size`` > 0 serves ``connect()`` from a ``psycopg_pool.ConnectionPool`` of at most that many
    connections (opened on first use; a long-lived process — the HTTP service, a companion backend — saves
    and reads through it concurrently instead of opening a connection per call). ``close()`` closes it.
    """

    def __init__(self, url: str, *, pool_size: int = 0):
        if pool_size < 0:
            raise ValueError(f"pool_size must be ≥ 0, got {pool_size}")
        self.url, self.pool_size = url, pool_size
        self._ready: set[EmbeddingSpec] = set()
        self._lock = threading.Lock()
        self._pool = None
        self._lock_pool = None

    @classmethod
    def from_settings(cls, settings: DreamingSettings, *, pool_size: int | None = None) -> Database:
        """The settings' database with a pool of ``pool_size`` connections (None: DREAMING_DATABASE_CONNECTIONS;
        the service passes its own)."""
        url = settings.database_url or embedded.embedded_url(settings.pgdata_dir,
                                                              shared_buffers=settings.embedded_shared_buffers)
        return cls(url, pool_size=settings.database_connections if pool_size is None else pool_size)

    def ensure_schema(self, spec: EmbeddingSpec) -> None:
        """Migrate once per process and check the embedder against the database's recorded model."""
        if spec in self._ready:
            return
        with self._lock:
            if spec in self._ready:
                return
            with psycopg.connect(self.url) as conn:
                apply_migrations(conn, spec)
            self._ready.add(spec)

    def ensure_schema_as_recorded(self) -> bool:
        """Migrate with the embedding model the database already records, checking no embedder against it
        (forgetting, inspecting and exporting compute no vector). False when the database records none yet."""
        if self._ready:
            return True
        with psycopg.connect(self.url) as conn:
            try:
                spec = recorded_spec(conn)
            except psycopg.errors.UndefinedTable:  # a database no migration has touched
                return False
        if spec is None:
            return False
        self.ensure_schema(spec)
        return True

    @contextmanager
    def connect(self, *, vectors: bool = True) -> Iterator[psycopg.Connection]:
        """An autocommit connection with dict rows and (unless ``vectors=False``) the vector type.

        ``vectors=False`` suits read-only callers such as sensors that may run before any migration. With a
        pool, a connection comes from it unless the schema has not been ensured in this process yet (the pool's
        connections need the vector type). A connection held for a long time while others work — the graph
        lock's — comes from :meth:`lock_connection` instead: held pool connections waiting for free ones could
        starve the pool.

        Autocommit on purpose: every multi-statement write says ``with conn.transaction():`` and so is
        a real transaction (in a non-autocommit connection it would silently become a savepoint of an
        implicit transaction opened by an earlier read).
        """
        if self.pool_size and (vectors or self._ready):
            with self.pool().connection() as conn:
                yield conn
            return
        with connect(self.url, vectors=vectors) as conn:
            yield conn

    @contextmanager
    def lock_connection(self) -> Iterator[psycopg.Connection]:
        """A connection to hold a session advisory lock on while other connections do the work (the graph
        lock: storage/user_graphs.user_graph_lock). With a pool it comes from a second, separate pool, so a lock holder never
        waits for the connections its own work needs, and a sync no longer opens a connection for its lock
        (a new backend: ~5-11 ms of a one-pair sync here). A connection goes back with every session advisory
        lock released (the pool's reset), whatever its holder did. Should that pool be exhausted, a new
        connection is opened, as without a pool: a lock is never refused for want of a connection."""
        from psycopg_pool import PoolTimeout

        pool, conn = (self.lock_pool() if self.pool_size else None), None
        if pool is not None:
            with suppress(PoolTimeout):  # the pool is busy: this lock opens its own connection
                conn = pool.getconn(timeout=LOCK_POOL_WAIT_S)
        if conn is None:
            with connect(self.url, vectors=False) as own:
                yield own
            return
        try:
            yield conn
        finally:
            pool.putconn(conn)

    def lock_pool(self):
        """The lock connections' pool (``pool_size`` > 0), opened on first use; see :meth:`lock_connection`."""
        return self._published_pool("_lock_pool", name="dreaming-locks", reset=_release_advisory_locks)

    def pool(self):
        """The connection pool (``pool_size`` > 0), opened on first use: autocommit connections with dict
        rows and the vector type, checked before they are handed out."""
        return self._published_pool("_pool", name="dreaming", configure=register_vector)

    def _published_pool(self, attribute: str, **options):
        """The pool kept in ``attribute``, opened on first use and published only once it holds its first
        connection: a thread that took that connection while the pool was still filling would leave
        ``wait()`` nothing to count (a 60 s stall on first use under concurrency). Nothing is then left
        filling a pool that is dropped, as with Recaller's."""
        pool = getattr(self, attribute)
        if pool is None:
            from psycopg_pool import ConnectionPool

            with self._lock:
                pool = getattr(self, attribute)
                if pool is None:
                    pool = ConnectionPool(self.url, min_size=1, max_size=self.pool_size, open=True,
                                          kwargs={"autocommit": True, "row_factory": dict_row},
                                          check=ConnectionPool.check_connection, **options)
                    pool.wait(timeout=60)
                    setattr(self, attribute, pool)
                    atexit.register(self.close)  # its worker threads stop before the interpreter does
        return pool

    def close(self) -> None:
        """Close the pool, if one was opened (connections in use are closed as they come back)."""
        with self._lock:
            pools, self._pool, self._lock_pool = (self._pool, self._lock_pool), None, None
        for pool in pools:
            if pool is not None:
                pool.close()

    def __repr__(self) -> str:
        return f"Database({redact(self.url)!r})"


def _release_advisory_locks(conn: psycopg.Connection) -> None:
    """A lock connection's reset on its way back to the pool: no session advisory lock outlives its holder."""
    conn.execute("SELECT pg_advisory_unlock_all()")


def connect(url: str, *, vectors: bool = True) -> psycopg.Connection:
    """An autocommit connection with dict rows and, optionally, the pgvector type registered."""
    conn = psycopg.connect(url, autocommit=True, row_factory=dict_row)
    if vectors:
        register_vector(conn)
    return conn


def redact(url: str) -> str:
    """The URL with any password replaced, for logs and metadata."""
    try:
        info = psycopg.conninfo.conninfo_to_dict(url)
    except psycopg.ProgrammingError:
        return "<unparseable database url>"
    if info.get("password"):
        info["password"] = "***"
    return psycopg.conninfo.make_conninfo(**{k: v for k, v in info.items() if v not in (None, "")})
