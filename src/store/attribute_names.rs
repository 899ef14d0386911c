//! [`AttributeNames`]: how a record's fields are named as item attributes.

use super::StoreError;

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

    /// A single-table layout, as Powertools offers. Every record is under the partition key
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

    /// Checks that these names are usable: every name non-empty and distinct (the sort
    /// key's included), and a single-table layout's static partition key value non-empty.
    ///
    /// A `DynamoDbStore` given names that are not refuses every request for a record with
    /// [`StoreError::Misconfigured`], so each delivery fails and is retried until they are
    /// fixed. Call this where the names are built (say, from the environment) to fail at
    /// start-up instead.
    ///
    /// ```
    /// use lambda_idempotency::store::{AttributeNames, StoreError};
    ///
    /// let names = AttributeNames::default().with_key("pk").with_owner("pk");
    /// let Err(StoreError::Misconfigured(fault)) = names.check() else {
    ///     panic!("two fields under one name are refused");
    /// };
    /// assert_eq!(fault.code, "InvalidAttributeNames");
    /// assert_eq!(fault.reason, r#"the key and owner attributes are both named "pk""#);
    ///
    /// let names = AttributeNames::default().with_sort_key("sk", "idempotency#orders");
    /// assert!(names.check().is_ok());
    /// ```
    pub fn check(&self) -> Result<(), StoreError> {
        match self.fault() {
            None => Ok(()),
            Some(reason) => Err(invalid_names(String::new(), reason)),
        }
    }

    /// What makes these names unusable, if anything: an empty name or static partition key
    /// value, or two of a record's fields under one name. A record written with such names
    /// would put one field's value where the other's goes (the owner token in the key's
    /// place: each delivery's lease under a key of its own, so every delivery runs the
    /// handler).
    pub(crate) fn fault(&self) -> Option<String> {
        let mut named = vec![
            ("key", self.key.as_str()),
            ("status", self.status.as_str()),
            ("expiration", self.expiration.as_str()),
            (
                "in_progress_expiration",
                self.in_progress_expiration.as_str(),
            ),
            ("data", self.data.as_str()),
            ("validation", self.validation.as_str()),
            ("owner", self.owner.as_str()),
        ];
        if let Some(sort_key) = &self.sort_key {
            if self.static_partition_key.is_empty() {
                // DynamoDB refuses an empty key value.
                return Some("the static partition key value is empty".into());
            }
            named.push(("sort_key", sort_key.as_str()));
        }
        named.iter().enumerate().find_map(|(i, &(field, name))| {
            if name.is_empty() {
                return Some(format!("the {field} attribute name is empty"));
            }
            named[..i]
                .iter()
                .find(|&&(_, earlier)| earlier == name)
                .map(|(earlier, _)| {
                    format!("the {earlier} and {field} attributes are both named {name:?}")
                })
        })
    }
}

/// The misconfiguration of a store whose attribute names are unusable (`reason`), on `table`.
pub(crate) fn invalid_names(table: String, reason: String) -> StoreError {
    StoreError::Misconfigured(crate::store::Misconfiguration::new(
        "DynamoDB",
        table,
        "InvalidAttributeNames",
        reason,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_default_names_and_a_single_table_layout_are_usable() {
        assert_eq!(AttributeNames::default().fault(), None);
        let single = AttributeNames::default()
            .with_key("pk")
            .with_sort_key("sk", "idempotency#orders");
        assert_eq!(single.fault(), None);
    }

    #[test]
    fn every_pair_of_fields_under_one_name_is_a_fault() {
        type Rename = fn(AttributeNames, &str) -> AttributeNames;
        let fields: [(&str, Rename); 8] = [
            ("key", |n, v| n.with_key(v)),
            ("status", |n, v| n.with_status(v)),
            ("expiration", |n, v| n.with_expiration(v)),
            ("in_progress_expiration", |n, v| {
                n.with_in_progress_expiration(v)
            }),
            ("data", |n, v| n.with_data(v)),
            ("validation", |n, v| n.with_validation(v)),
            ("owner", |n, v| n.with_owner(v)),
            ("sort_key", |n, v| n.with_sort_key(v, "static")),
        ];
        for (i, (earlier, rename_earlier)) in fields.iter().enumerate() {
            for (field, rename) in &fields[i + 1..] {
                let names = rename(rename_earlier(AttributeNames::default(), "x"), "x");
                assert_eq!(
                    names.fault().as_deref(),
                    Some(
                        format!("the {earlier} and {field} attributes are both named \"x\"")
                            .as_str()
                    ),
                );
            }
        }
    }

    #[test]
    fn an_empty_name_is_a_fault() {
        let names = AttributeNames::default().with_data("");
        assert_eq!(
            names.fault().as_deref(),
            Some("the data attribute name is empty")
        );
        let names = AttributeNames::default().with_sort_key("", "static");
        assert_eq!(
            names.fault().as_deref(),
            Some("the sort_key attribute name is empty")
        );
        let names = AttributeNames::default().with_sort_key("sk", "");
        assert_eq!(
            names.fault().as_deref(),
            Some("the static partition key value is empty")
        );
    }
}
