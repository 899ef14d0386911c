//! A record's stored key and payload hash: derived from its payload by the key extractor,
//! under the configured prefix and namespace.

use std::borrow::Cow;

use lambda_runtime::Context;

use super::invoke::catch_panic;
use crate::config::{Config, MissingKey};
use crate::error::Error;
use crate::input::Input;
use crate::key::PayloadHash;
use crate::key::{IdempotencyKey, KeyError, KeyExtractor, MAX_KEY_BYTES};

/// The prefix used when neither the configuration nor the Lambda environment names one.
pub const FALLBACK_KEY_PREFIX: &str = "lambda-idempotency";

/// A record's stored key and payload hash, as [`derive()`] gives them.
pub(crate) type Derived = (IdempotencyKey, Option<PayloadHash>);

fn key_prefix<'a>(config: &'a Config, context: &'a Context) -> Cow<'a, str> {
    if let Some(prefix) = config.key_prefix() {
        return Cow::Borrowed(prefix);
    }
    if !context.env_config.function_name.is_empty() {
        return Cow::Borrowed(&context.env_config.function_name);
    }
    std::env::var("AWS_LAMBDA_FUNCTION_NAME")
        .ok()
        .filter(|name| !name.is_empty())
        .map_or(Cow::Borrowed(FALLBACK_KEY_PREFIX), Cow::Owned)
}

/// Why a record has no key.
pub(crate) enum NotDerived {
    /// The key's source is absent and processing without idempotency was chosen.
    Unprotected(KeyError),
    /// The record fails with this error.
    Failed(Error),
}

/// The stored key and payload hash of `payload`, received with `context`.
pub(crate) fn derive<I, K>(
    key: &K,
    config: &Config,
    payload: &I,
    context: &Context,
) -> Result<Derived, NotDerived>
where
    K: KeyExtractor<I>,
    I: Input,
{
    let format = config.powertools.as_ref();
    // Powertools' records are keyed by the key data's JSON under the format's prefix (a
    // function's name after it, unless the function has its own), this crate's by its
    // material under the key prefix (a function's namespace after it).
    let derived = catch_panic(|| match (format, &config.function) {
        (Some(format), Some(function)) if !function.own_prefix => {
            let prefix = format!("{}.{}", format.prefix(), function.name);
            format.key(&prefix, &key.key_json(payload)?)
        }
        (Some(format), _) => format.key(format.prefix(), &key.key_json(payload)?),
        (None, Some(function)) => Ok(IdempotencyKey::derive(
            &format!("{}#fn:{}", key_prefix(config, context), function.name),
            &key.key_material(payload)?,
        )),
        (None, None) => Ok(IdempotencyKey::derive(
            &key_prefix(config, context),
            &key.key_material(payload)?,
        )),
    });
    let key = match derived {
        Ok(Ok(key)) => key,
        Ok(Err(err)) if err.is_absent() && config.missing_key == MissingKey::ProcessUnprotected => {
            return Err(NotDerived::Unprotected(err));
        }
        Ok(Err(err)) => return Err(NotDerived::Failed(Error::Key(err))),
        Err(panic) => return Err(NotDerived::Failed(panic)),
    };
    if key.as_str().len() > MAX_KEY_BYTES {
        let len_bytes = key.as_str().len();
        return Err(NotDerived::Failed(Error::Key(KeyError::KeyTooLong {
            len_bytes,
        })));
    }
    let validation = match format {
        Some(format) => format.payload_hash(&config.validation, payload),
        None => config.validation.hash(payload),
    };
    match validation {
        Ok(validation) => Ok((key, validation)),
        Err(err) => Err(NotDerived::Failed(Error::Key(err))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    #[test]
    fn prefix_comes_from_config_then_function_name() {
        let mut context = Context::default();
        context.env_config = Arc::new(lambda_runtime::Config {
            function_name: "order-consumer-prod".into(),
            ..Default::default()
        });
        assert_eq!(key_prefix(&Config::new(), &context), "order-consumer-prod");
        assert_eq!(
            key_prefix(&Config::new().with_key_prefix("orders-v1"), &context),
            "orders-v1"
        );
    }

    #[test]
    fn the_powertools_format_keys_by_the_prefix_and_the_key_data_alone() {
        use crate::key::{JsonPointer, PayloadValidation};
        use crate::powertools::PowertoolsFormat;
        use aws_lambda_events::sqs::SqsMessage;
        let mut message = SqsMessage::default();
        message.body = Some(r#"{"eventId":"order-1","amount":25}"#.into());
        let mut config = Config::new()
            .with_payload_validation(PayloadValidation::Body)
            .with_powertools_format(PowertoolsFormat::new("orders"));
        // A function with a prefix of its own keys under it exactly.
        config.function = Some(crate::config::FunctionScope {
            name: "charge".into(),
            own_prefix: true,
        });
        let Ok((key, validation)) = derive(
            &JsonPointer::new("/eventId"),
            &config,
            &message,
            &Context::default(),
        ) else {
            panic!("derived");
        };
        // hashlib.md5(json.dumps("order-1").encode()).hexdigest()
        assert_eq!(key.as_str(), "orders#729040816f7330c4cb31f54a56f59a7b");
        // ... and of the parsed body, json.dumps({"amount": 25, "eventId": "order-1"}).
        assert_eq!(
            validation.unwrap().as_str(),
            "a496e96b7fafe9c5e7875cd4ef3722a7"
        );
        // An empty key is missing, as Powertools counts it: the record fails, or runs
        // unprotected when that was chosen.
        message.body = Some(r#"{"eventId":""}"#.into());
        let failed = derive(
            &JsonPointer::new("/eventId"),
            &config,
            &message,
            &Context::default(),
        );
        assert!(matches!(
            failed,
            Err(NotDerived::Failed(Error::Key(KeyError::Empty)))
        ));
        let config = config.with_missing_key(MissingKey::ProcessUnprotected);
        let unprotected = derive(
            &JsonPointer::new("/eventId"),
            &config,
            &message,
            &Context::default(),
        );
        assert!(matches!(
            unprotected,
            Err(NotDerived::Unprotected(KeyError::Empty))
        ));
    }
}
