//! Calling user code: the one place where panics are caught. The handler runs through
//! [`call_handler`]; other user code on a record's path (a closure key extractor, a
//! result's `Serialize` or `Deserialize`) runs through [`catch_panic`]. Either way a panic
//! fails its record alone and, under a lease, the lease is released as for any failure.

use std::any::Any;
use std::panic::AssertUnwindSafe;

use futures_util::FutureExt;
use lambda_runtime::LambdaEvent;
use tower::{BoxError, Service};

use crate::error::{Error, Permanent};

/// The text of a panic's payload.
fn panic_message(payload: &(dyn Any + Send)) -> String {
    if let Some(text) = payload.downcast_ref::<&str>() {
        (*text).to_string()
    } else if let Some(text) = payload.downcast_ref::<String>() {
        text.clone()
    } else {
        "non-string panic payload".to_string()
    }
}

/// Runs `f`, turning a panic into [`Error::Panic`].
pub(crate) fn catch_panic<R>(f: impl FnOnce() -> R) -> Result<R, Error> {
    std::panic::catch_unwind(AssertUnwindSafe(f)).map_err(|panic| Error::Panic {
        message: panic_message(panic.as_ref()),
    })
}

/// Runs the inner handler, turning its error or panic into [`Error`].
pub(crate) async fn call_handler<S, I>(
    inner: S,
    event: LambdaEvent<I>,
) -> Result<S::Response, Error>
where
    S: Service<LambdaEvent<I>>,
    S::Error: Into<BoxError>,
{
    let mut inner = inner;
    match AssertUnwindSafe(async move { inner.call(event).await })
        .catch_unwind()
        .await
    {
        Ok(Ok(value)) => Ok(value),
        Ok(Err(err)) => Err(Error::Handler(err.into())),
        Err(panic) => Err(Error::Panic {
            message: panic_message(panic.as_ref()),
        }),
    }
}

/// The handler's error was marked [`Permanent`].
pub(crate) fn is_permanent(err: &Error) -> bool {
    matches!(err, Error::Handler(inner) if inner.is::<Permanent>())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn panics_become_errors_with_their_message() {
        let caught = catch_panic(|| -> u32 { panic!("boom {}", 7) });
        assert!(matches!(caught, Err(Error::Panic { message }) if message == "boom 7"));
        assert_eq!(catch_panic(|| 3).unwrap(), 3);
    }
}
