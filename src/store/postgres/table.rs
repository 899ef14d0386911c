//! The table of a [`PostgresStore`](super::PostgresStore): its name, its DDL, and the SQL of
//! each transition, written once for that name.

use tokio_postgres::types::ToSql;

use super::to_sql;
use crate::clock::{epoch_ms, epoch_secs};
use crate::store::AcquireRequest;

/// The default table name.
pub const DEFAULT_TABLE: &str = "idempotency_records";

/// PostgreSQL's longest identifier; longer ones are cut.
const MAX_IDENTIFIER_BYTES: usize = 63;

/// The columns a record is read from, in this order.
pub(super) const COLUMNS: &str =
    "status, expiration, in_progress_expiration, lease_owner, data, validation";

/// The values of [`Table::acquire_sql`]'s parameters for one acquire, in their order.
pub(super) struct AcquireArgs<'a> {
    key: &'a str,
    expiration: i64,
    lease_expiration: i64,
    owner: &'a str,
    validation: &'a Option<String>,
    now_secs: i64,
    now_ms: i64,
}

impl<'a> AcquireArgs<'a> {
    /// The values of `request`.
    pub(super) fn new(request: &'a AcquireRequest) -> Self {
        Self {
            key: request.key.as_str(),
            expiration: to_sql(request.expiration_secs),
            lease_expiration: to_sql(request.lease_expiration_ms),
            owner: request.owner.as_str(),
            validation: &request.validation,
            now_secs: to_sql(epoch_secs(request.now)),
            now_ms: to_sql(epoch_ms(request.now)),
        }
    }

    /// The parameters, `$1` to `$7`.
    pub(super) fn params(&self) -> [&(dyn ToSql + Sync); 7] {
        [
            &self.key,
            &self.expiration,
            &self.lease_expiration,
            &self.owner,
            &self.validation,
            &self.now_secs,
            &self.now_ms,
        ]
    }
}

/// A validated table name (`table` or `schema.table`) and the statements on it.
#[derive(Debug, Clone)]
pub(super) struct Table {
    /// As given.
    pub(super) name: String,
    /// Quoted for SQL.
    quoted: String,
}

impl Table {
    /// `name` checked: one or two dot-separated identifiers of ASCII letters, digits and
    /// underscores, not starting with a digit.
    pub(super) fn new(name: &str) -> Option<Self> {
        let parts: Vec<&str> = name.split('.').collect();
        let valid = |part: &str| {
            !part.is_empty()
                && part.len() <= MAX_IDENTIFIER_BYTES
                && !part.starts_with(|c: char| c.is_ascii_digit())
                && part.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
        };
        if parts.len() > 2 || !parts.iter().all(|part| valid(part)) {
            return None;
        }
        let quoted = parts
            .iter()
            .map(|part| format!("\"{part}\""))
            .collect::<Vec<_>>()
            .join(".");
        Some(Self {
            name: name.to_string(),
            quoted,
        })
    }

    /// The DDL: the table and its cleanup index (`IF NOT EXISTS`, so running it again is
    /// harmless).
    pub(super) fn schema_sql(&self) -> String {
        let t = &self.quoted;
        let index = format!("\"{}\"", self.index_name());
        format!(
            "CREATE TABLE IF NOT EXISTS {t} (\n    id text PRIMARY KEY,\n    status text NOT NULL,\n    expiration bigint NOT NULL,\n    in_progress_expiration bigint,\n    lease_owner text,\n    data text,\n    validation text\n);\nCREATE INDEX IF NOT EXISTS {index} ON {t} (expiration);\n"
        )
    }

    /// The cleanup index's name: `<name>_expiration` (a dot as `_`), cut to PostgreSQL's 63
    /// bytes as PostgreSQL itself cuts it (so an index created before keeps its name). Only
    /// when the cut name would be the table's own (a 63-byte table name, whose index
    /// `IF NOT EXISTS` would skip) is it cut shorter and told apart by a hash of the name.
    fn index_name(&self) -> String {
        let plain = format!("{}_expiration", self.name.replace('.', "_"));
        // ASCII only (checked in `new`), so any byte is a character boundary.
        let cut = &plain[..plain.len().min(MAX_IDENTIFIER_BYTES)];
        let table = self.name.rsplit('.').next().unwrap_or(&self.name);
        if cut != table {
            return cut.to_string();
        }
        let digest = crate::key::hashing::sha256_hex(self.name.as_bytes());
        let kept = MAX_IDENTIFIER_BYTES - "_12345678_expiration".len();
        format!("{}_{}_expiration", &plain[..kept], &digest[..8])
    }

    /// Acquire: $1 id, $2 expiration, $3 lease end, $4 owner, $5 validation, $6 now (secs),
    /// $7 now (ms). Answers one row: `acquired`, then the record as it was before (none
    /// when it did not exist).
    pub(super) fn acquire_sql(&self) -> String {
        let t = &self.quoted;
        format!(
            "WITH taken AS (\
               INSERT INTO {t} AS r (id, status, expiration, in_progress_expiration, lease_owner, data, validation) \
               VALUES ($1, 'INPROGRESS', $2, $3, $4, NULL, $5) \
               ON CONFLICT (id) DO UPDATE SET status = 'INPROGRESS', expiration = EXCLUDED.expiration, \
                 in_progress_expiration = EXCLUDED.in_progress_expiration, \
                 lease_owner = EXCLUDED.lease_owner, data = NULL, validation = EXCLUDED.validation \
               WHERE r.expiration < $6 OR (r.status = 'INPROGRESS' AND r.in_progress_expiration < $7) \
               RETURNING 1) \
             SELECT EXISTS (SELECT 1 FROM taken) AS done, {COLUMNS} \
             FROM (SELECT 1) AS one LEFT JOIN {t} ON id = $1"
        )
    }

    /// Complete: $1 id, $2 owner, $3 status, $4 data, $5 expiration. Answers one row:
    /// `done`, then the record as it was before.
    pub(super) fn complete_sql(&self) -> String {
        let t = &self.quoted;
        format!(
            "WITH done AS (\
               UPDATE {t} SET status = $3, data = $4, expiration = $5, in_progress_expiration = NULL \
               WHERE id = $1 AND status = 'INPROGRESS' AND lease_owner = $2 RETURNING 1) \
             SELECT EXISTS (SELECT 1 FROM done) AS done, {COLUMNS} \
             FROM (SELECT 1) AS one LEFT JOIN {t} ON id = $1"
        )
    }

    /// Extend: $1 id, $2 owner, $3 lease end, $4 expiration.
    pub(super) fn extend_sql(&self) -> String {
        format!(
            "UPDATE {} SET in_progress_expiration = $3, expiration = $4 \
             WHERE id = $1 AND status = 'INPROGRESS' AND lease_owner = $2",
            self.quoted
        )
    }

    /// Release: $1 id, $2 owner.
    pub(super) fn release_sql(&self) -> String {
        format!(
            "DELETE FROM {} WHERE id = $1 AND status = 'INPROGRESS' AND lease_owner = $2",
            self.quoted
        )
    }

    /// Get: $1 id.
    pub(super) fn get_sql(&self) -> String {
        format!("SELECT {COLUMNS} FROM {} WHERE id = $1", self.quoted)
    }

    /// Get many: $1 the ids (`text[]`). Answers the id, then the record's columns.
    pub(super) fn get_many_sql(&self) -> String {
        format!(
            "SELECT id, {COLUMNS} FROM {} WHERE id = ANY($1)",
            self.quoted
        )
    }

    /// Cleanup: $1 expired before (epoch seconds), $2 at most this many rows. The outer
    /// condition is checked again on a row a takeover changed meanwhile, so a record taken
    /// over after it expired is never deleted.
    pub(super) fn delete_expired_sql(&self) -> String {
        let t = &self.quoted;
        format!(
            "DELETE FROM {t} WHERE expiration < $1 AND id IN \
             (SELECT id FROM {t} WHERE expiration < $1 LIMIT $2)"
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_shipped_ddl_is_the_one_the_store_runs() {
        let shipped: String = include_str!("schema.sql")
            .lines()
            .filter(|line| !line.starts_with("--"))
            .map(|line| format!("{line}\n"))
            .collect();
        assert_eq!(Table::new(DEFAULT_TABLE).unwrap().schema_sql(), shipped);
    }

    #[test]
    fn index_names_fit_and_stay_apart() {
        let named = |name: &str| Table::new(name).unwrap().index_name();
        assert_eq!(named("records"), "records_expiration");
        assert_eq!(named("app.records"), "app_records_expiration");
        // Past 63 bytes, cut as PostgreSQL cuts it: an existing index keeps its name.
        let long = "r".repeat(55);
        assert_eq!(named(&long), format!("{long}_expirat"));
        // A 63-byte name would be cut to the table's own: hashed instead, apart.
        let stem = "r".repeat(62);
        let (a, b) = (named(&format!("{stem}a")), named(&format!("{stem}b")));
        assert_ne!(a, b);
        for long in [&a, &b] {
            assert_eq!(long.len(), MAX_IDENTIFIER_BYTES, "{long}");
            assert!(long.ends_with("_expiration"), "{long}");
        }
        assert_eq!(
            named(&format!("{stem}s.{stem}t")).len(),
            MAX_IDENTIFIER_BYTES
        );
    }

    #[test]
    fn table_names_are_identifiers() {
        assert!(Table::new("records").is_some());
        assert!(Table::new("app.records_2").is_some());
        for bad in ["", "a.b.c", "1x", "x-y", "x\"; DROP TABLE y; --", "a.", "ä"] {
            assert!(Table::new(bad).is_none(), "{bad}");
        }
    }
}
