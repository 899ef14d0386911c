//! Transactions over the in-memory tables: the ledger pattern, conditions, refusals.

use super::TransactionRefusal::ConditionFailed;
use super::*;
use crate::store::Attr;

/// A ledger keyed by account, and events keyed by stream and sequence.
fn tables() -> Tables {
    let mut tables = Tables::default();
    tables.define("ledger", "account", None);
    tables.define("events", "stream", Some("sequence"));
    tables
}

/// The ledger key of `account`.
fn key(account: &str) -> [(&'static str, Attr); 1] {
    [("account", Attr::s(account))]
}

/// The key of event `sequence` of stream `s`.
fn event(sequence: &str) -> [(&'static str, Attr); 2] {
    [("stream", Attr::s("s")), ("sequence", Attr::n(sequence))]
}

/// An item of `attributes`.
fn item<const N: usize>(attributes: [(&str, Attr); N]) -> Item {
    attributes.map(|(name, value)| (name.into(), value)).into()
}

/// The project's ledger credit: `ADD #b :a` on the account's balance.
fn credit(account: &str, amount: i64) -> Write {
    let credit = Write::update("ledger", key(account), "ADD #b :a");
    credit.name("#b", "balance").value(":a", Attr::n(amount))
}

/// The account's balance.
fn balance<'a>(tables: &'a Tables, account: &str) -> Option<&'a Attr> {
    tables.item("ledger", &item(key(account)))?.get("balance")
}

/// Validates, then applies, as the store does.
fn commit(tables: &mut Tables, writes: &[Write]) -> Result<(), TransactionRefusal> {
    tables.validate(writes)?;
    tables.apply(writes)
}

/// Asserts that `result` refuses the write at `index` with a reason containing `fragment`.
fn assert_invalid(result: Result<(), TransactionRefusal>, index: usize, fragment: &str) {
    let refusal = format!("{:?}", result.expect_err(fragment));
    let at_index = refusal.starts_with(&format!("Invalid {{ write_index: Some({index}),"));
    assert!(
        at_index && refusal.contains(fragment),
        "{fragment}: {refusal}"
    );
}

#[test]
fn two_ledger_credits_of_25_make_a_balance_of_50() {
    let mut tables = tables();
    commit(&mut tables, &[credit("acct-1", 25)]).unwrap();
    commit(&mut tables, &[credit("acct-1", 25)]).unwrap();
    assert_eq!(balance(&tables, "acct-1"), Some(&Attr::N("50".into())));
    assert_eq!(tables.items("ledger").len(), 1);
    assert!(tables.items("nothing").is_empty());
}

#[test]
fn a_condition_on_a_missing_item_fails_and_creates_nothing() {
    let mut tables = tables();
    let guarded = [credit("acct-1", 25).condition("attribute_exists(account)")];
    let refused = commit(&mut tables, &guarded);
    assert_eq!(refused, Err(ConditionFailed { write_index: 0 }));
    assert!(tables.items("ledger").is_empty());
    commit(&mut tables, &[Write::put("ledger", key("acct-1"))]).unwrap();
    commit(&mut tables, &guarded).unwrap();
    assert_eq!(balance(&tables, "acct-1"), Some(&Attr::n(25)));
}

#[test]
fn a_failing_condition_or_update_anywhere_applies_no_write() {
    let mut tables = tables();
    let check = Write::condition_check("ledger", key("b"), "attribute_exists(account)");
    let writes = [credit("a", 10), check, Write::put("events", event("1"))];
    let refused = commit(&mut tables, &writes);
    assert_eq!(refused, Err(ConditionFailed { write_index: 1 }));
    assert!(tables.items("ledger").is_empty() && tables.items("events").is_empty());
    let text = Write::put("ledger", key("b")).value(":unused", Attr::Null);
    assert_invalid(commit(&mut tables, &[text]), 0, "unused");
    let mut text_balance = Write::put("ledger", key("b"));
    text_balance.item.insert("balance".into(), Attr::s("x"));
    commit(&mut tables, &[text_balance]).unwrap();
    let writes = [Write::put("events", event("1")), credit("b", 1)];
    assert_invalid(commit(&mut tables, &writes), 1, "incorrect data type");
    assert!(tables.items("events").is_empty());
}

#[test]
fn two_writes_on_one_item_are_refused() {
    let mut tables = tables();
    let check = Write::condition_check("ledger", key("a"), "attribute_not_exists(account)");
    let refused = commit(&mut tables, &[credit("a", 1), check]);
    assert_invalid(refused, 1, "multiple operations on one item");
    let put = Write::put("events", event("1"));
    let refused = commit(&mut tables, &[put, Write::delete("events", event("1.0"))]);
    assert_invalid(refused, 1, "multiple operations on one item");
    assert!(tables.items("ledger").is_empty() && tables.items("events").is_empty());
}

#[test]
fn malformed_writes_are_refused_before_anything_is_read() {
    let tables = tables();
    let refused = |write: Write, fragment: &str| {
        let writes = [Write::put("events", event("1")), write];
        assert_invalid(tables.validate(&writes), 1, fragment);
    };
    let delete = || Write::delete("ledger", key("a"));
    let update = |expression: &str| Write::update("ledger", key("a"), expression);
    let put = |name: &str, value: Attr| {
        let mut put = Write::put("ledger", key("a"));
        put.item.insert(name.to_owned(), value);
        put
    };
    // A table never defined is the store's setup, not a malformed write.
    let missing = Write::put("missing", key("a"));
    assert_eq!(
        tables.validate(&[credit("acct-1", 1), missing]),
        Err(TransactionRefusal::NoSuchTable {
            table: "missing".into()
        })
    );
    refused(
        Write::put("ledger", [("other", Attr::Null)]),
        "Missing the key account",
    );
    let partial_key = Write::delete("events", [("stream", Attr::s("s"))]);
    refused(partial_key, "Missing the key sequence");
    let mut extra = delete();
    extra.item.insert("b".into(), Attr::Null);
    refused(extra, "does not match the schema");
    let boolean_key = Write::delete("ledger", [("account", Attr::Bool(true))]);
    refused(boolean_key, "Type mismatch for key");
    refused(Write::delete("ledger", key("")), "empty string key");
    refused(
        update("SET account = :a").value(":a", Attr::s("b")),
        "part of the key",
    );
    refused(update("REMOVE #k").name("#k", "account"), "part of the key");
    refused(
        update("SET b = :a")
            .value(":a", Attr::Null)
            .value(":c", Attr::Null),
        "unused",
    );
    refused(delete().value(":a", Attr::Null), "unused");
    refused(delete().condition("b = :a"), "not defined");
    refused(delete().condition("b = "), "Invalid ConditionExpression");
    refused(update("SET b = :a b"), "Invalid UpdateExpression");
    refused(put("n", Attr::n("abc")), "cannot be converted");
    let mut check = Write::condition_check("ledger", key("a"), "x");
    check.condition_expression = None;
    refused(check, "needs a condition");
    let mut put_update = Write::put("ledger", key("a"));
    put_update.update_expression = Some("REMOVE b".into());
    refused(put_update, "Only an Update");
    assert_eq!(tables.validate(&[]), Ok(()));
}

#[test]
fn items_are_stored_and_found_by_canonical_numbers() {
    let mut tables = tables();
    let mut put = Write::put("events", event("01.50"));
    put.item.insert("n".into(), Attr::n("-0"));
    commit(&mut tables, &[put]).unwrap();
    let key = item(event("1.5E0"));
    let stored = tables.item("events", &key).unwrap();
    assert_eq!(stored.get("sequence"), Some(&Attr::n("1.5")));
    assert_eq!(stored.get("n"), Some(&Attr::n(0)));
    let check = Write::condition_check("events", event("1.5"), "n = :z");
    commit(&mut tables, &[check.value(":z", Attr::n("0.0"))]).unwrap();
    let remove = Write::update("events", event("1.5"), "REMOVE n");
    commit(&mut tables, &[remove]).unwrap();
    assert_eq!(tables.item("events", &key).map(Item::len), Some(2));
    commit(&mut tables, &[Write::delete("events", event("1.5"))]).unwrap();
    assert_eq!(tables.item("events", &key), None);
    let create = Write::update("events", event("2"), "REMOVE nothing");
    commit(&mut tables, &[create]).unwrap();
    assert_eq!(tables.items("events"), [&item(event("2"))]);
}

#[test]
fn redefining_a_table_keeps_or_replaces_it() {
    let mut tables = tables();
    commit(&mut tables, &[credit("a", 5)]).unwrap();
    tables.define("ledger", "account", None);
    assert_eq!(tables.items("ledger").len(), 1);
    tables.define("ledger", "account", Some("day"));
    assert!(tables.items("ledger").is_empty());
}

#[test]
fn an_inapplicable_update_is_refused_before_any_condition() {
    let mut tables = tables();
    commit(
        &mut tables,
        &[Write::put(
            "ledger",
            [("account", Attr::s("text")), ("balance", Attr::s("x"))],
        )],
    )
    .unwrap();
    // Write 0's condition fails, write 1 cannot be applied: DynamoDB reports the latter.
    let writes = [
        credit("acct-1", 1).condition("attribute_exists(account)"),
        credit("text", 1),
    ];
    assert_invalid(commit(&mut tables, &writes), 1, "");
    assert_eq!(balance(&tables, "acct-1"), None);
}

#[test]
fn items_over_400_kb_or_nested_too_deep_are_refused() {
    let mut tables = tables();
    let big = Attr::s("x".repeat(410 * 1024));
    let put = Write::put("ledger", [("account", Attr::s("big")), ("blob", big)]);
    assert_invalid(commit(&mut tables, &[put]), 0, "Item size");
    let grow = Write::update("ledger", key("acct-1"), "SET #b = :v")
        .name("#b", "blob")
        .value(":v", Attr::s("y".repeat(410 * 1024)));
    assert_invalid(commit(&mut tables, &[grow]), 0, "Item size");
    let mut deep = Attr::n(1);
    for _ in 0..=MAX_NESTING {
        deep = Attr::L(vec![deep]);
    }
    let nested = Write::put("ledger", [("account", Attr::s("deep")), ("v", deep)]);
    assert_invalid(commit(&mut tables, &[nested]), 0, "Nesting");
    let empty_name = Write::put("ledger", [("account", Attr::s("e")), ("", Attr::n(1))]);
    assert_invalid(
        commit(&mut tables, &[empty_name]),
        0,
        "Empty attribute name",
    );
    assert!(tables.items("ledger").is_empty());
}

#[test]
fn set_updates_take_linear_time() {
    let mut tables = tables();
    let numbers = |from: usize| Attr::Ns((from..from + 20_000).map(|n| n.to_string()).collect());
    let add = |from| {
        Write::update("ledger", key("acct-1"), "ADD #s :v")
            .name("#s", "set")
            .value(":v", numbers(from))
    };
    let started = std::time::Instant::now();
    commit(&mut tables, &[add(0)]).unwrap();
    commit(&mut tables, &[add(10_000)]).unwrap();
    let remove = Write::update("ledger", key("acct-1"), "DELETE #s :v")
        .name("#s", "set")
        .value(":v", numbers(5_000));
    commit(&mut tables, &[remove]).unwrap();
    assert!(
        started.elapsed() < std::time::Duration::from_secs(5),
        "{:?}",
        started.elapsed()
    );
    let Some(Attr::Ns(left)) = tables
        .item("ledger", &item(key("acct-1")))
        .and_then(|i| i.get("set"))
    else {
        panic!("a number set remains")
    };
    assert_eq!(left.len(), 10_000);
}
