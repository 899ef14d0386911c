//! [`Completion`]: a handler's result together with the writes to commit with its record.

use crate::store::Write;

/// What a transactional handler returns: its result, and the DynamoDB writes to commit in
/// one transaction with the completion marker.
///
/// The writes are applied exactly once: together with the record that says the message is
/// done, or not at all.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Completion<T> {
    pub(crate) result: T,
    pub(crate) writes: Vec<Write>,
}

impl<T> Completion<T> {
    /// A completion with `result` and no writes yet.
    pub fn new(result: T) -> Self {
        Self {
            result,
            writes: Vec::new(),
        }
    }

    /// Adds a write to the transaction.
    pub fn with_write(mut self, write: Write) -> Self {
        self.writes.push(write);
        self
    }

    /// The result.
    pub fn result(&self) -> &T {
        &self.result
    }

    /// The writes.
    pub fn writes(&self) -> &[Write] {
        &self.writes
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::Attr;

    #[test]
    fn completion_collects_writes() {
        let c = Completion::new(7)
            .with_write(Write::delete("t", [("id", Attr::s("x"))]))
            .with_write(Write::put("t", [("id", Attr::s("y"))]));
        assert_eq!(*c.result(), 7);
        assert_eq!(c.writes().len(), 2);
    }
}
