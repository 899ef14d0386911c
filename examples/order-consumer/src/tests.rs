//! The wiring's unit tests (moved from the binary with it).

use super::*;

fn message(body: &str) -> SqsMessage {
    let mut m = SqsMessage::default();
    m.body = Some(body.into());
    m
}

#[test]
fn orders_must_have_every_field_with_its_type() {
    assert!(parse_order(&message(r#"{"eventId":"e","account":"a","amount":5}"#)).is_ok());
    for bad in [
        "not json",
        r#"{"eventId":"e","account":"a"}"#,
        r#"{"eventId":"e","account":"a","amount":"5"}"#,
        r#"{"eventId":"e","account":"a","amount":5.5}"#,
        r#"{"eventId":"","account":"a","amount":5}"#,
        r#"{"eventId":"e","account":"","amount":5}"#,
    ] {
        assert!(parse_order(&message(bad)).is_err(), "{bad}");
    }
    assert!(matches!(
        parse_order(&SqsMessage::default()),
        Err(OrderError::NoBody)
    ));
}

#[test]
fn the_window_outlives_a_dead_letter_redrive_by_default() {
    assert_eq!(expires_after(None).unwrap(), DEFAULT_EXPIRES_AFTER);
    assert!(DEFAULT_EXPIRES_AFTER.as_secs() > TEMPLATE_QUEUES_SECS);
    assert_eq!(expires_after(Some("")).unwrap(), DEFAULT_EXPIRES_AFTER);
    assert_eq!(
        expires_after(Some("1987200")).unwrap(),
        Duration::from_secs(1_987_200)
    );
    assert!(expires_after(Some("1h")).is_err());
}

#[test]
fn records_start_with_the_library_s_margin_unless_told_otherwise() {
    assert_eq!(deadline_margin(None).unwrap(), Duration::from_secs(1));
    assert_eq!(deadline_margin(Some("")).unwrap(), Duration::from_secs(1));
    assert_eq!(
        deadline_margin(Some("1500")).unwrap(),
        Duration::from_millis(1500)
    );
    assert!(deadline_margin(Some("1s")).is_err());
}

#[tokio::test]
async fn an_order_becomes_one_ledger_credit() {
    let completion = apply_order(
        "ledger".into(),
        message(r#"{"eventId":"e","account":"acct-1","amount":-7}"#),
    )
    .await
    .unwrap();
    assert_eq!(completion.result().amount, -7);
    assert_eq!(completion.writes().len(), 1);
    assert_eq!(completion.writes()[0].table(), "ledger");
}
