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
    let material = match catch_panic(|| key.key_material(payload)) {
        Ok(Ok(material)) => material,
        Ok(Err(err)) if err.is_absent() && config.missing_key == MissingKey::ProcessUnprotected => {
            return Err(NotDerived::Unprotected(err));
        }
        Ok(Err(err)) => return Err(NotDerived::Failed(Error::Key(err))),
        Err(panic) => return Err(NotDerived::Failed(panic)),
    };
    let prefix = key_prefix(config, context);
    let key = match &config.key_namespace {
        Some(namespace) => IdempotencyKey::derive(&format!("{prefix}#{namespace}"), &material),
        None => IdempotencyKey::derive(&prefix, &material),
    };
    if key.as_str().len() > MAX_KEY_BYTES {
        let len_bytes = key.as_str().len();
        return Err(NotDerived::Failed(Error::Key(KeyError::KeyTooLong {
            len_bytes,
        })));
    }
    match config.validation.hash(payload) {
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
}
