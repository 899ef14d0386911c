//! The FIFO queue keeps what SQS FIFO promises, and counts as SQS does.

use super::*;

fn bodies(event: Option<Value>) -> Vec<String> {
    event.map_or_else(Vec::new, |event| {
        event["Records"]
            .as_array()
            .unwrap()
            .iter()
            .map(|r| r["body"].as_str().unwrap().to_string())
            .collect()
    })
}

#[test]
fn a_fifo_group_comes_in_order_and_not_while_in_flight() {
    let queue = Queue::fifo(Duration::from_secs(60), 6);
    queue.send_to_group("a1", None, "a");
    queue.send_to_group("b1", None, "b");
    queue.send_to_group("a2", None, "a");
    queue.send_to_group("b2", None, "b");
    // As many of one group as fit, then the next group; never one in flight again.
    assert_eq!(bodies(queue.receive(3, true)), ["a1", "a2", "b1"]);
    assert_eq!(bodies(queue.receive(10, true)), Vec::<String>::new());
    let queue = Queue::fifo(Duration::from_secs(60), 6);
    let a1 = queue.send_to_group("a1", None, "a");
    queue.send_to_group("a2", None, "a");
    queue.send_to_group("b1", None, "b");
    assert_eq!(bodies(queue.receive(1, false)), ["a1"]);
    assert_eq!(bodies(queue.receive(1, false)), ["b1"]);
    assert_eq!(bodies(queue.receive(1, false)), Vec::<String>::new());
    queue.ack([a1.as_str()]);
    assert_eq!(bodies(queue.receive(1, false)), ["a2"]);
}

#[test]
fn a_dead_letter_unblocks_its_group_and_every_receive_counts() {
    // Visible again at once; dead after 2 receives.
    let queue = Queue::fifo(Duration::ZERO, 2);
    let poison = queue.send_to_group("poison", None, "g");
    queue.send_to_group("behind", None, "g");
    assert_eq!(bodies(queue.receive(1, false)), ["poison"]);
    assert_eq!(bodies(queue.receive(1, false)), ["poison"]);
    // Dead-lettered by this receive, which goes on with the group's next message.
    assert_eq!(bodies(queue.receive(1, false)), ["behind"]);
    assert_eq!(queue.dead_letters(), [poison]);
    // Returned behind a failing message, a message counts as received too.
    let queue = Queue::fifo(Duration::ZERO, 1);
    queue.send_to_group("poison", None, "g");
    queue.send_to_group("behind", None, "g");
    assert_eq!(bodies(queue.receive(10, false)), ["poison", "behind"]);
    assert_eq!(bodies(queue.receive(10, false)), Vec::<String>::new());
    assert_eq!(queue.stats().dead, 2);
}

#[test]
fn fifo_records_carry_what_sqs_fifo_gives() {
    let queue = Queue::fifo(Duration::from_secs(60), 6);
    queue.send_to_group("one", None, "acct-1");
    queue.send_to_group("two", None, "acct-1");
    let event = queue.receive(10, false).unwrap();
    let records = event["Records"].as_array().unwrap();
    let number = |r: &Value| {
        r["attributes"]["SequenceNumber"]
            .as_str()
            .unwrap()
            .parse::<u128>()
            .unwrap()
    };
    for record in records {
        assert_eq!(record["attributes"]["MessageGroupId"], "acct-1");
        assert_eq!(record["attributes"]["ApproximateReceiveCount"], "1");
        assert!(record["eventSourceARN"]
            .as_str()
            .unwrap()
            .ends_with(".fifo"));
    }
    assert!(number(&records[0]) < number(&records[1]));
    let standard = Queue::new(Duration::from_secs(60), 6);
    standard.send("one", None);
    let event = standard.receive(10, false).unwrap();
    assert!(event["Records"][0]["attributes"]
        .get("MessageGroupId")
        .is_none());
}
