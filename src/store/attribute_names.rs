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
}
