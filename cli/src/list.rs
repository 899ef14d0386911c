//! The `list` command: a filtered Scan of the whole table (in a single-table layout, a Query
//! of the records' partition), page by page.

use std::collections::HashMap;
use std::io::Write;
use std::time::{Duration, SystemTime};

use aws_sdk_dynamodb::types::AttributeValue;
use lambda_idempotency::record::Status;
use lambda_idempotency::store::{AttributeNames, DynamoDbStore};

use crate::view::{epoch_ms, record_json, record_line};
use crate::CliError;

/// What `list` shows and how it reports progress.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ListOptions {
    /// Only records with this status.
    pub status: Option<Status>,
    /// Only records whose end time lies at least this far in the past (see [`filter`]).
    pub older_than: Option<Duration>,
    /// Items DynamoDB evaluates per Scan or Query page (`Limit`); `None`: up to 1 MB per page.
    pub page_size: Option<i32>,
    /// A progress line on stderr after every this many scanned items (0: none).
    pub progress_every: u64,
    /// One JSON object per line instead of text.
    pub json: bool,
}

/// A Scan's or Query's filter: the expression and its names and values.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Filter {
    /// The `FilterExpression`, `None` to match every item.
    pub expression: Option<String>,
    /// `ExpressionAttributeNames`.
    pub names: HashMap<String, String>,
    /// `ExpressionAttributeValues`.
    pub values: HashMap<String, AttributeValue>,
}

/// The filter for `status` and `older_than` at `now`.
///
/// "Older than D" means the record's end time lies at least D before `now` (a record's
/// creation time is not stored):
/// - an `INPROGRESS` record: its lease end (`in_progress_expiration`, epoch ms) is at or
///   before `now - D`, a lease elapsed for at least D (or, for one without a lease end, its
///   `expiration` is at or before `now - D`, in epoch seconds);
/// - a `COMPLETED` or `FAILED` record: its `expiration` (epoch seconds) is at or before
///   `now - D`: it expired at least D ago and TTL has not deleted it yet.
pub fn filter(
    names: &AttributeNames,
    status: Option<Status>,
    older_than: Option<Duration>,
    now: SystemTime,
) -> Filter {
    let mut filter = Filter::default();
    let mut clauses = Vec::new();
    if let Some(status) = status {
        clauses.push("#status = :status".to_string());
        filter
            .values
            .insert(":status".into(), AttributeValue::S(status.as_str().into()));
    }
    if let Some(age) = older_than {
        let cut = now.checked_sub(age).unwrap_or(std::time::UNIX_EPOCH);
        let cut_ms = epoch_ms(cut);
        clauses.push(
            "((#status = :inprogress AND (#ipe <= :cut_ms OR \
             (attribute_not_exists(#ipe) AND #exp <= :cut_secs))) \
             OR (#status <> :inprogress AND #exp <= :cut_secs))"
                .to_string(),
        );
        filter
            .names
            .insert("#ipe".into(), names.in_progress_expiration.clone());
        filter.names.insert("#exp".into(), names.expiration.clone());
        let values = [
            (
                ":inprogress",
                AttributeValue::S(Status::InProgress.as_str().into()),
            ),
            (":cut_ms", AttributeValue::N(cut_ms.to_string())),
            (":cut_secs", AttributeValue::N((cut_ms / 1000).to_string())),
        ];
        for (name, value) in values {
            filter.values.insert(name.into(), value);
        }
    }
    if !clauses.is_empty() {
        filter.names.insert("#status".into(), names.status.clone());
        filter.expression = Some(clauses.join(" AND "));
    }
    filter
}

/// What a `list` run saw.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ListSummary {
    /// Items DynamoDB evaluated (`ScannedCount`, summed over pages).
    pub scanned: u64,
    /// Pages read.
    pub pages: u64,
    /// Records printed.
    pub matched: u64,
    /// Items matched by the filter that are not records (reported on stderr, not printed).
    pub malformed: u64,
}

impl ListSummary {
    fn progress(&self) -> String {
        format!(
            "scanned {} items in {} pages, {} matched",
            self.scanned, self.pages, self.matched
        )
    }
}

/// Reads the records page by page through the SDK's paginator, printing each matching
/// record on `out` (one line, or one JSON object per line) and progress on `err`: a line
/// after every [`ListOptions::progress_every`] items read, and a last line when done.
///
/// With the library's layout (the stored id as partition key) this is a Scan of the whole
/// table. In a single-table layout it is a Query of the records' one partition key value,
/// so the table's other items are not read (nor paid for).
pub async fn list(
    store: &DynamoDbStore,
    options: &ListOptions,
    now: SystemTime,
    out: &mut dyn Write,
    err: &mut dyn Write,
) -> Result<ListSummary, CliError> {
    let names = store.attribute_names();
    let mut filter = filter(names, options.status, options.older_than, now);
    let mut printer = Printer {
        store,
        options,
        now,
        summary: ListSummary::default(),
        next_progress: options.progress_every,
    };
    if names.sort_key.is_none() {
        let mut pages = store
            .client()
            .scan()
            .table_name(store.table())
            .set_filter_expression(filter.expression)
            .set_expression_attribute_names((!filter.names.is_empty()).then_some(filter.names))
            .set_expression_attribute_values((!filter.values.is_empty()).then_some(filter.values))
            .set_limit(options.page_size)
            .into_paginator()
            .send();
        while let Some(page) = pages.next().await {
            let page = page.map_err(|e| CliError::aws("Scan", e))?;
            printer.page(page.items(), page.scanned_count(), out, err)?;
        }
    } else {
        // Placeholders of their own: the filter names none of its own so.
        filter.names.insert("#layout_pk".into(), names.key.clone());
        filter.values.insert(
            ":layout_pk".into(),
            AttributeValue::S(names.static_partition_key.clone()),
        );
        let mut pages = store
            .client()
            .query()
            .table_name(store.table())
            .key_condition_expression("#layout_pk = :layout_pk")
            .set_filter_expression(filter.expression)
            .set_expression_attribute_names(Some(filter.names))
            .set_expression_attribute_values(Some(filter.values))
            .set_limit(options.page_size)
            .into_paginator()
            .send();
        while let Some(page) = pages.next().await {
            let page = page.map_err(|e| CliError::aws("Query", e))?;
            printer.page(page.items(), page.scanned_count(), out, err)?;
        }
    }
    let summary = printer.summary;
    writeln!(err, "done: {}", summary.progress())?;
    Ok(summary)
}

/// Prints the records of each page read, and progress.
struct Printer<'a> {
    store: &'a DynamoDbStore,
    options: &'a ListOptions,
    now: SystemTime,
    summary: ListSummary,
    next_progress: u64,
}

impl Printer<'_> {
    /// One page: its `items` (matched by the filter) out of `scanned` items read.
    fn page(
        &mut self,
        items: &[HashMap<String, AttributeValue>],
        scanned: i32,
        out: &mut dyn Write,
        err: &mut dyn Write,
    ) -> Result<(), CliError> {
        let (summary, options) = (&mut self.summary, self.options);
        summary.pages += 1;
        summary.scanned += u64::try_from(scanned).unwrap_or(0);
        for item in items {
            match self.store.record_from_item(item).map_err(CliError::from) {
                Ok(record) => {
                    summary.matched += 1;
                    if options.json {
                        writeln!(out, "{}", record_json(&record, self.now))?;
                    } else {
                        writeln!(out, "{}", record_line(&record, self.now))?;
                    }
                }
                Err(e) => {
                    summary.malformed += 1;
                    writeln!(err, "skipped: {e}")?;
                }
            }
        }
        if options.progress_every > 0 && summary.scanned >= self.next_progress {
            writeln!(err, "{}", summary.progress())?;
            self.next_progress =
                (summary.scanned / options.progress_every + 1) * options.progress_every;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::view::from_epoch_secs;

    #[test]
    fn no_option_is_no_filter() {
        let f = filter(&AttributeNames::default(), None, None, SystemTime::now());
        assert_eq!(f, Filter::default());
    }

    #[test]
    fn older_than_cuts_leases_in_ms_and_expiry_in_secs() {
        let now = from_epoch_secs(10_000);
        let f = filter(
            &AttributeNames::default(),
            Some(Status::InProgress),
            Some(Duration::from_secs(900)),
            now,
        );
        let expression = f.expression.unwrap();
        assert!(expression.starts_with("#status = :status AND (("));
        assert_eq!(f.values[":cut_ms"], AttributeValue::N("9100000".into()));
        assert_eq!(f.values[":cut_secs"], AttributeValue::N("9100".into()));
        assert_eq!(f.names["#ipe"], "in_progress_expiration");
    }
}
