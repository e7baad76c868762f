//! Executing the actions plugins return, through the Kubernetes API, for any kind.

#[cfg(test)]
mod agreement;
mod event;
mod executor;
mod outcome;
pub mod target;

pub use executor::Executor;
pub use outcome::{ActionRecord, ActionResult, ApiFailure, Execution};
