//! One guarded write alone on both stores.

use super::acct;

use lambda_idempotency::store::{Attr, StoreError, Write};

/// One guarded write alone (`GuardedWrite`, a single conditional `PutItem` or `UpdateItem`):
/// DynamoDB refuses a malformed write first, then checks the condition before it evaluates
/// the update, so a write whose condition fails is refused even when its update could not
/// apply to the item as it is. The embedded store answers the same. (The last three cases
/// were invalid writes on the embedded store before the fix found in review.)
#[tokio::test]
async fn a_single_guarded_write_is_judged_as_dynamodb_judges_it() {
    use lambda_idempotency::store::{Guarded, GuardedWrite};
    let Some((ddb, memory, table)) = super::stores().await else {
        return;
    };
    let summary = |answer: Result<Guarded, StoreError>| match answer {
        Ok(Guarded::Applied) => "Applied".to_string(),
        Ok(Guarded::Refused(Some(_))) => "Refused(item)".to_string(),
        Ok(Guarded::Refused(None)) => "Refused(none)".to_string(),
        Ok(other) => format!("{other:?}"),
        Err(err) => {
            println!("    ({err:?})");
            format!("Err({})", err.is_request_fault())
        }
    };
    // `#b` names the balance (absent), `#n` the note (a string).
    let update = |expression: &str| {
        let write = Write::update(&table, acct("acct-1"), expression);
        if expression.contains("#b") {
            write.name("#b", "balance")
        } else {
            write.name("#n", "note")
        }
    };
    let never = "attribute_not_exists(account)";
    let setup = [Write::put(
        &table,
        [
            ("account", Attr::s("acct-1")),
            ("note", Attr::s("x")),
            ("big", Attr::s("y".repeat(250 * 1024))),
            ("count", Attr::n(5)),
        ],
    )];
    let cases: Vec<(&str, Write, &str)> = vec![
        (
            "unused placeholder, false condition",
            update("SET #n = :v")
                .value(":v", Attr::n(1))
                .value(":w", Attr::n(2))
                .condition(never),
            "Err(true)",
        ),
        (
            "arithmetic on a missing attribute, true condition",
            update("SET #b = #b + :v").value(":v", Attr::n(1)),
            "Err(true)",
        ),
        (
            "arithmetic on a missing attribute, false condition",
            update("SET #b = #b + :v")
                .value(":v", Attr::n(1))
                .condition(never),
            "Refused(item)",
        ),
        (
            "ADD to a string, false condition",
            update("ADD #n :v").value(":v", Attr::n(1)).condition(never),
            "Refused(item)",
        ),
        (
            "a value past 400 KB used only by a true condition",
            update("SET #n = :s")
                .value(":s", Attr::s("y"))
                .value(":big", Attr::s("x".repeat(410 * 1024)))
                .condition("#n <> :big"),
            "Applied",
        ),
        (
            "a value past 400 KB used only by a false condition",
            update("SET #n = :s")
                .value(":s", Attr::s("y"))
                .value(":big", Attr::s("x".repeat(410 * 1024)))
                .condition("#n = :big"),
            "Refused(item)",
        ),
        (
            "a value that fills 400 KB with its attribute's name, a long placeholder",
            update("SET #n = :a_long_placeholder_name")
                .value(
                    ":a_long_placeholder_name",
                    Attr::s("x".repeat(400 * 1024 - 4)),
                )
                .condition(never),
            "Refused(item)",
        ),
        (
            "a value one byte past 400 KB with its attribute's name",
            update("SET #n = :v")
                .value(":v", Attr::s("x".repeat(400 * 1024 - 3)))
                .condition(never),
            "Err(true)",
        ),
        (
            "a value past 400 KB beside arithmetic on a missing attribute, false condition",
            update("SET #b = #b + :one, #c = :v")
                .name("#c", "other")
                .value(":one", Attr::n(1))
                .value(":v", Attr::s("x".repeat(410 * 1024)))
                .condition(never),
            "Err(true)",
        ),
        (
            "a DELETE's set past 400 KB beside arithmetic the item allows, true condition",
            Write::update(&table, acct("acct-1"), "SET #k = #k + :one DELETE #t :v")
                .name("#k", "count")
                .name("#t", "tags")
                .value(":one", Attr::n(1))
                .value(":v", Attr::Ss(vec!["x".repeat(420 * 1024)]))
                .condition("attribute_exists(account)"),
            "Applied",
        ),
        (
            "one 250 KB value set twice beside arithmetic, false condition",
            Write::update(
                &table,
                acct("acct-1"),
                "SET #k = #k + :one, #c = :v, #d = :v",
            )
            .name("#k", "count")
            .name("#c", "c1")
            .name("#d", "d1")
            .value(":one", Attr::n(1))
            .value(":v", Attr::s("x".repeat(250 * 1024)))
            .condition(never),
            "Err(true)",
        ),
        (
            "a value past 400 KB under a missing map, false condition",
            update("SET #b.x = :v")
                .value(":v", Attr::s("x".repeat(410 * 1024)))
                .condition(never),
            "Err(true)",
        ),
        (
            "a value past 400 KB, false condition",
            update("SET #n = :v")
                .value(":v", Attr::s("x".repeat(410 * 1024)))
                .condition(never),
            "Err(true)",
        ),
        (
            "a put past 400 KB, false condition",
            Write::put(
                &table,
                [
                    ("account", Attr::s("acct-1")),
                    ("note", Attr::s("x".repeat(410 * 1024))),
                ],
            )
            .condition(never),
            "Err(true)",
        ),
        (
            "an item grown past 400 KB, false condition",
            Write::update(&table, acct("acct-1"), "SET #o = :v")
                .name("#o", "other")
                .value(":v", Attr::s("x".repeat(250 * 1024)))
                .condition(never),
            "Refused(item)",
        ),
    ];
    for write in &setup {
        assert_eq!(summary(memory.write_guarded(write).await), "Applied");
        assert_eq!(summary(ddb.write_guarded(write).await), "Applied");
    }
    let mut diffs = Vec::new();
    for (name, write, expected) in &cases {
        let m = summary(memory.write_guarded(write).await);
        let d = summary(ddb.write_guarded(write).await);
        println!("{name}\n    memory:   {m}\n    dynamodb: {d}");
        if m != *expected || d != *expected {
            diffs.push(*name);
        }
    }
    assert!(diffs.is_empty(), "not as expected: {diffs:#?}");
}
