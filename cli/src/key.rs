//! The `key` command: the stored id of a message, derived by the library's own extractors.

use aws_lambda_events::sqs::{SqsMessage, SqsMessageAttribute};
use lambda_idempotency::key::KeyError;
use lambda_idempotency::key::{
    BodyHash, IdempotencyKey, JsonPointer, KeyExtractor, MessageAttribute, MessageId, MAX_KEY_BYTES,
};

use crate::CliError;

/// The attribute name the CLI puts `--attribute`'s value under. The material of a string
/// attribute is its text whatever its name, so the name does not change the key.
pub const ATTRIBUTE_NAME: &str = "Idempotency-Key";

/// Where the key material comes from: one of the library's four extractors.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum KeySource {
    /// [`MessageId`]: the SQS `messageId`.
    MessageId(String),
    /// [`MessageAttribute`]: a string message attribute with this value.
    Attribute(String),
    /// [`JsonPointer`]: the value this pointer selects in the body.
    Field {
        /// The RFC 6901 pointer, e.g. `/eventId`.
        pointer: String,
        /// The message body.
        body: String,
    },
    /// [`BodyHash`]: the whole body, byte for byte.
    BodyHash {
        /// The message body.
        body: String,
    },
}

/// The SQS message the library's extractor reads for `source`.
pub fn message(source: &KeySource) -> SqsMessage {
    let mut message = SqsMessage::default();
    match source {
        KeySource::MessageId(id) => message.message_id = Some(id.clone()),
        KeySource::Attribute(value) => {
            let mut attribute = SqsMessageAttribute::default();
            attribute.data_type = Some("String".into());
            attribute.string_value = Some(value.clone());
            message
                .message_attributes
                .insert(ATTRIBUTE_NAME.into(), attribute);
        }
        KeySource::Field { body, .. } | KeySource::BodyHash { body } => {
            message.body = Some(body.clone());
        }
    }
    message
}

/// The raw key material the library's extractor derives for `source`.
pub fn material(source: &KeySource) -> Result<Vec<u8>, KeyError> {
    let message = message(source);
    match source {
        KeySource::MessageId(_) => MessageId.key_material(&message),
        KeySource::Attribute(_) => MessageAttribute::new(ATTRIBUTE_NAME).key_material(&message),
        KeySource::Field { pointer, .. } => JsonPointer::new(pointer).key_material(&message),
        KeySource::BodyHash { .. } => BodyHash.key_material(&message),
    }
}

/// The stored id (`<prefix>#<sha256 hex>`) of `source` under `prefix`, as the library derives
/// it; a key over DynamoDB's limit is refused as the library refuses it.
pub fn derive(prefix: &str, source: &KeySource) -> Result<IdempotencyKey, CliError> {
    let material = material(source).map_err(CliError::Key)?;
    let key = IdempotencyKey::derive(prefix, &material);
    if key.as_str().len() > MAX_KEY_BYTES {
        return Err(CliError::Key(KeyError::KeyTooLong {
            len_bytes: key.as_str().len(),
        }));
    }
    Ok(key)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_source_gives_the_library_key() {
        let body = r#"{"eventId":"evt-1","n":1}"#;
        let cases = [
            (KeySource::MessageId("m-1".into()), b"m-1".to_vec()),
            (KeySource::Attribute("k-9".into()), b"k-9".to_vec()),
            (
                KeySource::Field {
                    pointer: "/eventId".into(),
                    body: body.into(),
                },
                b"evt-1".to_vec(),
            ),
            (
                KeySource::BodyHash { body: body.into() },
                body.as_bytes().to_vec(),
            ),
        ];
        for (source, material) in cases {
            assert_eq!(
                derive("p", &source).unwrap(),
                IdempotencyKey::derive("p", &material)
            );
        }
    }

    #[test]
    fn an_attribute_and_a_string_field_with_the_same_text_are_one_key() {
        let field = KeySource::Field {
            pointer: "/id".into(),
            body: r#"{"id":"evt-1"}"#.into(),
        };
        let attribute = KeySource::Attribute("evt-1".into());
        assert_eq!(
            derive("p", &field).unwrap(),
            derive("p", &attribute).unwrap()
        );
    }

    #[test]
    fn absent_material_is_a_key_error() {
        let missing = KeySource::Field {
            pointer: "/nope".into(),
            body: "{}".into(),
        };
        assert!(matches!(derive("p", &missing), Err(CliError::Key(_))));
        assert!(matches!(
            derive("p", &KeySource::Attribute(String::new())),
            Err(CliError::Key(_))
        ));
        let long = "p".repeat(MAX_KEY_BYTES);
        assert!(matches!(
            derive(&long, &KeySource::MessageId("m".into())),
            Err(CliError::Key(KeyError::KeyTooLong { .. }))
        ));
    }
}
