//! The privacy-budget ledger as the search drivers see it: where a release's receipt is
//! recorded before the request that carries it is handed out ([`super::frame_search`],
//! [`super::block_driver`]). Each client keeps its own ledger — the CLI a receipts file, the
//! page `localStorage` — and composes it with [`dp::budget::compose`]; the drivers only
//! need to know that a record either happened or failed.

use dp::mechanism::Receipt;

/// Why a receipt could not be recorded (the client's own words: a file it could not write, a
/// store that is full, a limit the person set). The request is then never handed out.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct LedgerError(pub String);

/// A durable list of what this client has spent.
pub trait Ledger {
    /// Records `receipt` as spent. `Ok` means it is recorded and will be counted whatever
    /// happens to the request afterwards (a crash, an error answer, no answer at all); an error
    /// means it was not, and the driver hands out no request for it.
    fn record(&mut self, receipt: &Receipt) -> Result<(), LedgerError>;
}

/// A ledger in memory: the receipts in the order they were recorded. For tests, and for a
/// caller that persists them itself before it sends anything.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct Receipts(pub Vec<Receipt>);

impl Ledger for Receipts {
    fn record(&mut self, receipt: &Receipt) -> Result<(), LedgerError> {
        self.0.push(*receipt);
        Ok(())
    }
}

impl<L: Ledger + ?Sized> Ledger for &mut L {
    fn record(&mut self, receipt: &Receipt) -> Result<(), LedgerError> {
        (**self).record(receipt)
    }
}

/// A ledger that refuses every record (tests: nothing may be handed out).
#[cfg(test)]
pub(crate) struct Full;

#[cfg(test)]
impl Ledger for Full {
    fn record(&mut self, _: &Receipt) -> Result<(), LedgerError> {
        Err(LedgerError("the store is full".into()))
    }
}
