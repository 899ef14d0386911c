//! Calling user code, and catching its panics: the one implementation, used at two depths.
//! - The handler runs through [`call_handler`]: its panic is the record's failure
//!   ([`Error::Panic`]), so the lease is released as for any failure. Closure key extractors
//!   run through [`catch_panic`] (the record fails with the panic); a result's `Serialize`
//!   that panics counts as a result that cannot be serialized (the record completes without
//!   it), and a `Deserialize` that panics as a stored result that no longer decodes.
//! - Anything else that panics on a record's path (a user's store or clock, the handler
//!   service's `poll_ready` or `Clone`) is caught per record by the batch processor through
//!   [`catch_panic_async`]: the record fails alone, and its lease, if it took one, ends at the
//!   deadline.

use std::any::Any;
use std::future::Future;
use std::panic::AssertUnwindSafe;

use futures_util::FutureExt;
use tower::{BoxError, Service};

use crate::clock::Clock;
use crate::error::{Error, Permanent};

/// The text of a panic's payload.
pub(crate) fn panic_message(payload: &(dyn Any + Send)) -> String {
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

/// Runs `future`, turning a panic into [`Error::Panic`].
///
/// A combinator, not an `async fn`: an `async fn` would hold `future` twice (as its argument
/// and as the future it awaits), and every record's future holds this one.
pub(crate) fn catch_panic_async<T>(
    future: impl Future<Output = Result<T, Error>>,
) -> impl Future<Output = Result<T, Error>> {
    AssertUnwindSafe(future)
        .catch_unwind()
        .map(|caught| match caught {
            Ok(result) => result,
            Err(panic) => Err(Error::Panic {
                message: panic_message(panic.as_ref()),
            }),
        })
}

/// Runs the inner handler on `request` (the event, or the event with a transaction),
/// turning its error or panic into [`Error`].
pub(crate) async fn call_handler<S, R, C: Clock>(
    inner: S,
    request: R,
    clock: &C,
) -> Result<S::Response, Error>
where
    S: Service<R>,
    S::Error: Into<BoxError>,
{
    let mut inner = inner;
    let started = clock.now();
    let result = catch_panic_async(async move {
        inner
            .call(request)
            .await
            .map_err(|e| Error::Handler(e.into()))
    })
    .await;
    crate::metrics::handler_latency(clock.now().duration_since(started).unwrap_or_default());
    result
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
