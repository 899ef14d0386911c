//! Sequence-guarded handlers: natural idempotency, the cheapest exactly-once. When each
//! event carries its entity's sequence number (an order's version, an account's event
//! number), the handler's one write on that entity is its own guard: the toolkit adds a
//! condition on the entity's sequence attribute and sets it to the event's number in the
//! same write. No idempotency record, no lease: one conditional write per fresh event. A
//! repeated or late event finds the entity at or past its number and changes nothing
//! (replayed, acknowledged); with [`SequenceRule::Next`], an event that arrives before the
//! ones ahead of it changes nothing either and is reported for retry ([`Outcome::OutOfOrder`](crate::Outcome::OutOfOrder)).

use std::sync::Arc;

use lambda_runtime::LambdaEvent;
use tower::{BoxError, Service};

use super::completion::Completion;
use super::invoke::{call_handler, catch_panic, is_permanent};
use super::protocol::Protocol;
use super::store_call::within_deadline;
use crate::clock::{Clock, Deadline};
use crate::error::Error;
use crate::input::Input;
use crate::key::{IdempotencyKey, KeyError};
use crate::outcome::Processed;
use crate::store::{Attr, Guarded, GuardedWrite, Item, StoreError, Write, WriteKind};

/// Where an event stands: its entity (the item its write changes) and its number in that
/// entity's sequence.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Position {
    /// The entity's table.
    pub table: String,
    /// The entity's key attributes.
    pub key: Item,
    /// The event's number in the entity's sequence (the first event is 1).
    pub sequence: u64,
}

/// Finds an event's [`Position`]. Implemented for closures `Fn(&I) -> Result<Position,
/// KeyError>`.
pub trait PositionOf<I>: Send + Sync + 'static {
    /// The event's entity and sequence number; an error fails the record
    /// ([`Outcome::Rejected`](crate::Outcome::Rejected)).
    fn position(&self, input: &I) -> Result<Position, KeyError>;
}

impl<I, F> PositionOf<I> for F
where
    F: Fn(&I) -> Result<Position, KeyError> + Send + Sync + 'static,
{
    fn position(&self, input: &I) -> Result<Position, KeyError> {
        self(input)
    }
}

/// When an event's write may apply.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum SequenceRule {
    /// Only in turn: event `n` applies when the entity is at `n - 1` (an entity without the
    /// attribute is at 0). An event at or behind the entity is already applied (replayed);
    /// one further ahead is out of order (reported for retry, so the events in between go
    /// first: use it on FIFO queues and streams, which redeliver in order).
    Next,
    /// Any newer event: event `n` applies when the entity is behind `n` (gaps allowed, as
    /// for "last state wins" updates). An event at or behind the entity is stale (replayed).
    Newer,
}

/// The sequence guard of a layer built with
/// [`SequencedLayer::new`](crate::SequencedLayer::new): how events are
/// placed ([`PositionOf`]), the entity attribute holding the sequence, and the rule.
#[derive(Debug, Clone)]
pub struct Sequence<P> {
    position: P,
    attribute: String,
    rule: SequenceRule,
    read_redelivered: bool,
}

impl<P> Sequence<P> {
    /// Events apply in turn ([`SequenceRule::Next`]); the entity keeps its sequence in
    /// `attribute`.
    pub fn next(attribute: impl Into<String>, position: P) -> Self {
        Self::with_rule(SequenceRule::Next, attribute, position)
    }

    /// Newer events apply, gaps allowed ([`SequenceRule::Newer`]).
    pub fn newer(attribute: impl Into<String>, position: P) -> Self {
        Self::with_rule(SequenceRule::Newer, attribute, position)
    }

    fn with_rule(rule: SequenceRule, attribute: impl Into<String>, position: P) -> Self {
        Self {
            position,
            attribute: attribute.into(),
            rule,
            read_redelivered: true,
        }
    }

    /// Whether a redelivered event is checked first with a read of its entity (default: yes).
    ///
    /// An event its source delivered before ([`Input::delivered_before`]) is read with one
    /// strongly consistent read, so that a duplicate changes nothing without running the
    /// handler or a refused write.
    pub fn with_redelivered_read(mut self, read: bool) -> Self {
        self.read_redelivered = read;
        self
    }

    /// The rule.
    pub fn rule(&self) -> SequenceRule {
        self.rule
    }
}

/// The handler kind of sequence-guarded handlers: the handler answers a
/// [`Completion`] with exactly one write (a put or an update) on the event's entity.
#[derive(Debug, Clone, Copy)]
pub struct Sequenced;

const SEQ_NAME: &str = "#lambda_idempotency_seq";
const SEQ_VALUE: &str = ":lambda_idempotency_seq";
const PREVIOUS: &str = ":lambda_idempotency_prev";

fn entity(position: &Position) -> String {
    let key: Vec<String> = position
        .key
        .iter()
        .map(|(k, v)| format!("{k}={v:?}"))
        .collect();
    format!("{}[{}]", position.table, key.join(","))
}

fn invalid(reason: impl Into<String>) -> Error {
    Error::Store(StoreError::InvalidWrite {
        write_index: 0,
        reason: reason.into(),
    })
}

/// The entity's sequence number in `item`, if it has one.
fn stored_sequence(
    item: &Item,
    attribute: &str,
    position: &Position,
) -> Result<Option<u64>, Error> {
    match item.get(attribute) {
        None => Ok(None),
        Some(Attr::N(n)) => n
            .parse()
            .map(Some)
            .map_err(|_| malformed(position, attribute)),
        Some(_) => Err(malformed(position, attribute)),
    }
}

fn malformed(position: &Position, attribute: &str) -> Error {
    Error::Store(StoreError::Malformed {
        key: entity(position),
        reason: format!("{attribute} is not a whole number"),
    })
}

/// Whether the event at `sequence` is done already (the entity is at or past it).
fn already_applied(stored: Option<u64>, sequence: u64) -> bool {
    stored.is_some_and(|stored| stored >= sequence)
}

impl<P> Sequence<P> {
    /// `write` with the guard added: its condition (and the handler's own, if any) and the
    /// entity's new sequence number.
    fn guard(&self, mut write: Write, position: &Position) -> Result<Write, Error> {
        if write.table != position.table
            || position
                .key
                .iter()
                .any(|(k, v)| write.item.get(k) != Some(v))
        {
            return Err(invalid(format!(
                "a sequence-guarded write must change the event's entity {}",
                entity(position)
            )));
        }
        if [SEQ_NAME, SEQ_VALUE, PREVIOUS]
            .iter()
            .any(|p| write.names.contains_key(*p) || write.values.contains_key(*p))
        {
            return Err(invalid(
                "the write uses a placeholder the sequence guard needs",
            ));
        }
        let sequence = position.sequence;
        if sequence == 0 && self.rule == SequenceRule::Next {
            return Err(invalid("sequence numbers start at 1"));
        }
        let guard = match self.rule {
            SequenceRule::Next if sequence == 1 => {
                format!("(attribute_not_exists({SEQ_NAME}) OR {SEQ_NAME} = {PREVIOUS})")
            }
            SequenceRule::Next => format!("{SEQ_NAME} = {PREVIOUS}"),
            SequenceRule::Newer => {
                format!("(attribute_not_exists({SEQ_NAME}) OR {SEQ_NAME} < {SEQ_VALUE})")
            }
        };
        write.condition_expression = Some(match write.condition_expression.take() {
            Some(own) => format!("({own}) AND {guard}"),
            None => guard,
        });
        write.names.insert(SEQ_NAME.into(), self.attribute.clone());
        // DynamoDB refuses a value no expression uses: a put under the in-turn rule sets the
        // sequence in its item, not through an expression.
        if self.rule == SequenceRule::Newer || write.kind == WriteKind::Update {
            write.values.insert(SEQ_VALUE.into(), Attr::n(sequence));
        }
        if self.rule == SequenceRule::Next {
            write
                .values
                .insert(PREVIOUS.into(), Attr::n(sequence.saturating_sub(1)));
        }
        match write.kind {
            WriteKind::Put => {
                write.item.insert(self.attribute.clone(), Attr::n(sequence));
            }
            WriteKind::Update => {
                let expression = write.update_expression.take().unwrap_or_default();
                write.update_expression = Some(with_sequence_set(&expression));
            }
            _ => return Err(invalid("a sequence-guarded write is a put or an update")),
        }
        Ok(write)
    }
}

/// `expression` that also sets the sequence: into its `SET` clause (the keyword in any
/// case, at the start or after whitespace, a list index's `]` or a function's `)`, and
/// followed by whitespace or by a `#name` placeholder, as DynamoDB reads it), or as a new
/// one.
fn with_sequence_set(expression: &str) -> String {
    let set = format!("{SEQ_NAME} = {SEQ_VALUE}");
    let bytes = expression.as_bytes();
    // Bytes only: "set" and the bytes around it that count are ASCII, so the match starts
    // and ends on character boundaries whatever else the expression holds.
    let at = (0..bytes.len().saturating_sub(2)).find(|&i| {
        bytes[i..i + 3].eq_ignore_ascii_case(b"set")
            && (i == 0 || matches!(bytes[i - 1], b']' | b')') || bytes[i - 1].is_ascii_whitespace())
            && bytes
                .get(i + 3)
                .is_some_and(|&b| b.is_ascii_whitespace() || b == b'#')
    });
    match at {
        Some(i) => format!("{} {set},{}", &expression[..i + 3], &expression[i + 3..]),
        None if expression.trim().is_empty() => format!("SET {set}"),
        None => format!("{expression} SET {set}"),
    }
}

/// Runs one sequence-guarded event: place it, skip it if a read shows it applied (for a
/// redelivered event), run the handler, and apply its write under the guard.
pub(crate) async fn run<S, St, P, C, I, T>(
    protocol: Arc<Protocol<St, Sequence<P>, C>>,
    inner: S,
    event: LambdaEvent<I>,
) -> Result<Processed<T>, Error>
where
    S: Service<LambdaEvent<I>, Response = Completion<T>>,
    S::Error: Into<BoxError>,
    St: GuardedWrite,
    P: PositionOf<I>,
    C: Clock,
    I: Input,
{
    let guard = &protocol.key;
    let position = catch_panic(|| guard.position.position(&event.payload))??;
    // Refused before anything reads the entity: an event the rule can never apply must not
    // look applied on a redelivery.
    if position.sequence == 0 && guard.rule == SequenceRule::Next {
        return Err(invalid("sequence numbers start at 1"));
    }
    let (store, clock) = (&protocol.store, &protocol.clock);
    let deadline = Deadline::of(event.context.deadline, clock.now());
    let read = || store.read_item(&position.table, &position.key);
    if guard.read_redelivered && event.payload.delivered_before() {
        match within_deadline(clock, deadline, read).await {
            Ok(Some(item)) => {
                let stored = stored_sequence(&item, &guard.attribute, &position)?;
                if already_applied(stored, position.sequence) {
                    return Ok(Processed::ReplayedWithoutResult);
                }
            }
            Ok(None) => {}
            // The guarded write decides anyway; the read only saves calls.
            Err(err) => tracing::warn!(error = %err, "entity read failed; writing under the guard"),
        }
    }
    let completion = match call_handler(inner, event, &protocol.clock).await {
        Ok(completion) => completion,
        // Nothing is stored in this mode, so a permanent failure cannot be remembered. Under
        // the newer rule the event may be skipped: acknowledged. In turn, the entity cannot
        // move past an event that never applied, so acknowledging it would drop the event
        // and leave every later event of the entity out of order for good: reported, as any
        // failure (its retries end in the queue's dead-letter queue), unless the entity is
        // already past it.
        Err(err) if is_permanent(&err) && guard.rule == SequenceRule::Newer => {
            return Err(Error::Permanent {
                message: "the handler failed permanently".into(),
                replayed: false,
            })
        }
        Err(err) if is_permanent(&err) => {
            // A late duplicate's handler may refuse what it did before ("already done"):
            // answered by the entity, read once, when it is at or past the event.
            let read = within_deadline(clock, deadline, read).await;
            // An entity that cannot be read, or whose sequence is malformed, answers nothing:
            // the handler's error stands.
            let stored = match read {
                Ok(Some(item)) => stored_sequence(&item, &guard.attribute, &position).ok(),
                _ => None,
            };
            if stored.is_some_and(|stored| already_applied(stored, position.sequence)) {
                return Ok(Processed::ReplayedWithoutResult);
            }
            tracing::warn!(
                entity = %entity(&position),
                sequence = position.sequence,
                "a permanent failure in turn is reported, not acknowledged: the entity's \
                 later events wait for this one"
            );
            return Err(err);
        }
        Err(err) => return Err(err),
    };
    let Completion { result, mut writes } = completion;
    if writes.len() != 1 {
        return Err(invalid(format!(
            "a sequence-guarded handler answers exactly one write, not {}",
            writes.len()
        )));
    }
    let write = guard.guard(writes.remove(0), &position)?;
    match within_deadline(clock, deadline, || store.write_guarded(&write)).await? {
        Guarded::Applied => Ok(Processed::Executed(result)),
        Guarded::Refused(old) => {
            let stored = match &old {
                Some(item) => stored_sequence(item, &guard.attribute, &position)?,
                None => None,
            };
            if already_applied(stored, position.sequence) {
                return Ok(Processed::ReplayedWithoutResult);
            }
            let in_turn = match guard.rule {
                SequenceRule::Next => position.sequence.checked_sub(1) == Some(stored.unwrap_or(0)),
                SequenceRule::Newer => true,
            };
            if in_turn {
                // The guard held: the handler's own condition failed.
                Err(Error::ConditionFailed {
                    key: IdempotencyKey::from_stored(entity(&position)),
                    write_index: 0,
                })
            } else {
                Err(Error::OutOfOrder {
                    entity: entity(&position),
                    stored,
                    sequence: position.sequence,
                })
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_sequence_joins_the_set_clause_or_starts_one() {
        let set = format!("{SEQ_NAME} = {SEQ_VALUE}");
        assert_eq!(
            with_sequence_set("ADD #b :a"),
            format!("ADD #b :a SET {set}")
        );
        assert_eq!(
            with_sequence_set("SET #b = :a REMOVE #c"),
            format!("SET {set}, #b = :a REMOVE #c")
        );
        assert_eq!(
            with_sequence_set("add settings :x set #b = :a"),
            format!("add settings :x set {set}, #b = :a")
        );
        assert_eq!(with_sequence_set(""), format!("SET {set}"));
        // DynamoDB takes a placeholder right after the keyword.
        assert_eq!(
            with_sequence_set("SET#b = :a"),
            format!("SET {set},#b = :a")
        );
        assert_eq!(
            with_sequence_set("ADD #set :a"),
            format!("ADD #set :a SET {set}")
        );
        assert_eq!(
            with_sequence_set("ADD #é :a"),
            format!("ADD #é :a SET {set}")
        );
    }

    #[test]
    fn an_entity_at_or_past_the_event_has_applied_it() {
        assert!(already_applied(Some(5), 5));
        assert!(already_applied(Some(6), 5));
        assert!(!already_applied(Some(4), 5));
        assert!(!already_applied(None, 1));
    }
}
