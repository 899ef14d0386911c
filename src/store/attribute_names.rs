//! [`AttributeNames`]: how a record's fields are named as item attributes.

/// The table's attribute names. The defaults are Powertools for AWS Lambda's, so one table
/// layout serves both; `lease_owner` is this crate's addition (fencing).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct AttributeNames {
    /// Partition key (S). Default `id`.
    pub key: String,
    /// `INPROGRESS` or `COMPLETED` (S). Default `status`.
    pub status: String,
    /// Record expiry in epoch seconds (N), the table's TTL attribute. Default `expiration`.
    pub expiration: String,
    /// Lease end in epoch milliseconds (N). Default `in_progress_expiration`.
    pub in_progress_expiration: String,
    /// Stored result as JSON (S). Default `data`.
    pub data: String,
    /// Payload hash (S). Default `validation`.
    pub validation: String,
    /// Lease owner token (S). Default `lease_owner`.
    pub owner: String,
    /// Single-table layout: the sort key attribute (S) that holds the idempotency key, under
    /// one static partition key value. `None` (the default): the partition key holds it.
    pub sort_key: Option<String>,
    /// Single-table layout: the partition key value of every record (with
    /// [`sort_key`](Self::sort_key)).
    pub static_partition_key: String,
}

impl Default for AttributeNames {
    fn default() -> Self {
        Self {
            key: "id".into(),
            status: "status".into(),
            expiration: "expiration".into(),
            in_progress_expiration: "in_progress_expiration".into(),
            data: "data".into(),
            validation: "validation".into(),
            owner: "lease_owner".into(),
            sort_key: None,
            static_partition_key: String::new(),
        }
    }
}

impl AttributeNames {
    /// Sets the partition key attribute name.
    pub fn with_key(mut self, name: impl Into<String>) -> Self {
        self.key = name.into();
        self
    }

    /// Sets the status attribute name.
    pub fn with_status(mut self, name: impl Into<String>) -> Self {
        self.status = name.into();
        self
    }

    /// Sets the expiration (TTL) attribute name.
    pub fn with_expiration(mut self, name: impl Into<String>) -> Self {
        self.expiration = name.into();
        self
    }

    /// Sets the lease-end attribute name.
    pub fn with_in_progress_expiration(mut self, name: impl Into<String>) -> Self {
        self.in_progress_expiration = name.into();
        self
    }

    /// Sets the result attribute name.
    pub fn with_data(mut self, name: impl Into<String>) -> Self {
        self.data = name.into();
        self
    }

    /// Sets the payload hash attribute name.
    pub fn with_validation(mut self, name: impl Into<String>) -> Self {
        self.validation = name.into();
        self
    }

    /// Sets the lease owner attribute name.
    pub fn with_owner(mut self, name: impl Into<String>) -> Self {
        self.owner = name.into();
        self
    }

    /// A single-table layout, as Powertools offers: every record under the partition key
    /// value `static_partition_key` (in the [`key`](Self::key) attribute), the idempotency
    /// key in the sort key attribute `sort_key`, so the records can live in a table you
    /// already have (with a string partition and sort key). All records then share one
    /// partition: its write rate caps theirs (DynamoDB's per-partition limits, about 1,000
    /// write units a second).
    pub fn with_sort_key(
        mut self,
        sort_key: impl Into<String>,
        static_partition_key: impl Into<String>,
    ) -> Self {
        self.sort_key = Some(sort_key.into());
        self.static_partition_key = static_partition_key.into();
        self
    }

    /// The key attributes of the record stored under `stored_key`, as (name, value): the
    /// partition key alone, or the static partition key and the sort key.
    pub fn item_key<'a>(&'a self, stored_key: &'a str) -> Vec<(&'a str, &'a str)> {
        match &self.sort_key {
            None => vec![(self.key.as_str(), stored_key)],
            Some(sort_key) => vec![
                (self.key.as_str(), self.static_partition_key.as_str()),
                (sort_key.as_str(), stored_key),
            ],
        }
    }

    /// The attribute that holds the idempotency key: the sort key in a single-table layout,
    /// else the partition key.
    pub fn stored_key_attribute(&self) -> &str {
        self.sort_key.as_deref().unwrap_or(&self.key)
    }
}
