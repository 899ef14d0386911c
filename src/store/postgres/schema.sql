-- The idempotency records of lambda-idempotency's PostgresStore (table `idempotency_records`;
-- `PostgresStore::create_table` runs this for the store's own table name).
CREATE TABLE IF NOT EXISTS "idempotency_records" (
    id text PRIMARY KEY,
    status text NOT NULL,
    expiration bigint NOT NULL,
    in_progress_expiration bigint,
    lease_owner text,
    data text,
    validation text
);
-- For the cleanup of expired records (PostgreSQL has no TTL).
CREATE INDEX IF NOT EXISTS "idempotency_records_expiration" ON "idempotency_records" (expiration);
