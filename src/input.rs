//! [`Input`]: what key extractors and payload validation read from an event.

use std::borrow::Cow;

/// An [`Input`] whose [`id`](Input::id) is unique per event, as its source assigns it.
///
/// These are the batch records (SQS messages, Kinesis records, DynamoDB stream records),
/// which [`MessageId`](crate::key::MessageId) keys on. A whole invocation, an HTTP request or a
/// function's arguments have no such id, so `MessageId` does not compile there. Implement it
/// for a record type of your own (with a [`BatchEvent`](crate::batch::BatchEvent) of yours)
/// whose `id` is unique per event, to key it with `MessageId`.
pub trait Identified: Input {}

/// A value of a named attribute (an SQS message attribute, an HTTP header).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum AttributeValue<'a> {
    /// A text value.
    Text(&'a str),
    /// A binary value.
    Binary(&'a [u8]),
}

/// An event (or one record of a batch) that idempotency keys and payload hashes are derived
/// from: its own id, its body, and its named attributes.
///
/// Implemented for SQS messages, Kinesis records and DynamoDB stream records (and for whole
/// invocations, HTTP requests and a function's arguments, which this crate wraps). The key
/// extractors [`MessageAttribute`](crate::key::MessageAttribute),
/// [`JsonPointer`](crate::key::JsonPointer) and [`BodyHash`](crate::key::BodyHash), and
/// [`PayloadValidation`](crate::key::PayloadValidation), work on any `Input`;
/// [`MessageId`](crate::key::MessageId) on those that are also [`Identified`].
pub trait Input {
    /// The event's own id, unique per event as its source sees it (SQS `messageId`).
    fn id(&self) -> Option<&str>;

    /// The body, as its bytes (SQS: the message body, which is text).
    fn body(&self) -> Option<Cow<'_, [u8]>>;

    /// The attribute called `name`, if the event has it with a value.
    fn attribute(&self, name: &str) -> Option<AttributeValue<'_>>;

    /// The body as it was written, when [`body`](Self::body) gives another form of it: what
    /// the [Powertools format](crate::powertools) reads, since Python tells `25` from
    /// `25.0`. The same as `body` (the default) for every input but a function's arguments
    /// and a whole invocation's event, whose `body` is their canonical JSON.
    fn written_body(&self) -> Option<Cow<'_, [u8]>> {
        self.body()
    }

    /// The query string that [payload validation](crate::key::PayloadValidation)
    /// covers beside the body: an HTTP request's, empty when it has none. `None` (the
    /// default) for events that have no query string at all (batch records, invocations).
    fn query(&self) -> Option<Cow<'_, str>> {
        None
    }

    /// Whether the source says it delivered this event before (SQS:
    /// `ApproximateReceiveCount` above 1), which makes it likely a duplicate: the batch
    /// [pre-check](crate::batch::Precheck) and sequence-guarded handlers look such events up
    /// before they run. Sources that do not say (streams, whole invocations): `false`.
    fn delivered_before(&self) -> bool {
        false
    }

    /// Whether `other` is this very event, field for field. The batch
    /// [pre-check](crate::batch::Precheck) derives the keys of the records it looks up in one
    /// pass; a record that is the same as one it derived reuses that key and payload hash
    /// instead of deriving them again. The default, `false`, always derives again; the
    /// batch records (SQS, Kinesis, DynamoDB Streams) compare every field.
    fn same_event(&self, other: &Self) -> bool
    where
        Self: Sized,
    {
        let _ = other;
        false
    }
}

/// A value with its canonical JSON: the [`Input`] of an event that is not a record of a batch
/// (a whole Lambda event, a function's arguments).
///
/// Its body is canonical JSON (object keys sorted, numbers by their exact value): for a
/// whole invocation, of the event's text as received
/// ([`Received`](crate::invocation::Received)); for a function's arguments ([`new`]), of the
/// value serialized, a `HashSet`'s elements sorted, so equal values have equal bodies
/// whatever the order of a map's entries or of a hash set's elements (the
/// [`function`](crate::function) module docs list the types this holds for).
/// [`BodyHash`](crate::key::BodyHash) keys on the whole value,
/// [`JsonPointer`](crate::key::JsonPointer) on a field, and a closure reads the value through
/// `Deref`. It has no id and no attributes.
///
/// [`new`]: Serialized::new
pub struct Serialized<T> {
    value: T,
    json: Vec<u8>,
    /// The JSON text before its canonical form (serde_json's, or the event as received):
    /// what the Powertools format reads.
    text: Box<str>,
}

impl<T: serde::Serialize> Serialized<T> {
    /// Serializes `value`. Fails when it cannot be serialized as JSON (a map with keys that
    /// are not strings, a serializer error) or is nested deeper than 128 levels.
    pub fn new(value: T) -> Result<Self, serde_json::Error> {
        let text = crate::canonical::serialized_text(&value)?;
        let json = crate::canonical::canonical(&text)?;
        Ok(Self {
            value,
            json: json.into_bytes(),
            text: text.into_boxed_str(),
        })
    }
}

impl<T> Serialized<T> {
    /// `value` with the canonical form of `json`, the JSON text it was deserialized from (a
    /// whole invocation's event as received), or that text itself when it has no canonical
    /// form (a string with a lone surrogate escape, which a producer that cut an emoji in half
    /// writes, or nesting deeper than 128 levels): a redelivery carries the same bytes, so it
    /// still finds its record.
    pub(crate) fn from_json(value: T, json: &str) -> Self {
        let text = json.into();
        let json = match crate::canonical::canonical(json) {
            Ok(canonical) => canonical.into_bytes(),
            Err(_) => json.as_bytes().to_vec(),
        };
        Self { value, json, text }
    }

    /// The value.
    pub fn get(&self) -> &T {
        &self.value
    }

    /// The value, consuming the wrapper.
    pub fn into_inner(self) -> T {
        self.value
    }

    /// The canonical JSON.
    pub fn json(&self) -> &[u8] {
        &self.json
    }
}

impl<T> std::ops::Deref for Serialized<T> {
    type Target = T;

    fn deref(&self) -> &T {
        &self.value
    }
}

impl<T> std::fmt::Debug for Serialized<T> {
    // The value stays out of debug output: it may hold what the logs must not.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Serialized")
            .field("json_bytes", &self.json.len())
            .finish_non_exhaustive()
    }
}

impl<T> Input for Serialized<T> {
    fn id(&self) -> Option<&str> {
        None
    }

    fn body(&self) -> Option<Cow<'_, [u8]>> {
        Some(Cow::Borrowed(&self.json))
    }

    fn written_body(&self) -> Option<Cow<'_, [u8]>> {
        Some(Cow::Borrowed(self.text.as_bytes()))
    }

    fn attribute(&self, _name: &str) -> Option<AttributeValue<'_>> {
        None
    }
}
