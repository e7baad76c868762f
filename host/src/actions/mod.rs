//! Executing the actions plugins return, through the Kubernetes API, for any kind.

mod event;
mod executor;
mod outcome;

pub use executor::Executor;
pub use outcome::{ActionRecord, ActionResult, ApiFailure, Execution};
