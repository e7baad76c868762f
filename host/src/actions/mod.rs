//! Executing the actions plugins return, through the Kubernetes API, for any kind: the
//! [pipeline](pipeline::Pipeline) runs a call's actions (policy, dry-run, budget, audit),
//! the [executor](executor::Executor) sends one write, the [writer](writer::ApiWriter) is
//! the API server, and every patch and delete is [fenced](fence) with the object version the
//! plugin decided on.

#[cfg(test)]
mod agreement;
mod event;
mod executor;
#[cfg(test)]
pub(crate) mod fake;
pub mod fence;
pub mod inflight;
mod outcome;
pub mod pipeline;
pub mod target;
pub mod waiting;
pub mod writer;

pub use executor::Executor;
pub use fence::Fence;
pub use inflight::{
    Answers, DEFAULT_MAX_WRITES_IN_FLIGHT, HostWrites, INITIAL_WRITES_IN_FLIGHT, InFlightLimit,
    WritePermit,
};
pub use outcome::{ActionError, Sent};
pub use pipeline::{
    Call, CallFailure, CallOutcome, Change, MAX_KINDS_PER_CALL, MIN_REQUEUE_AFTER, Pipeline, Write,
};
pub use writer::{ApiRequest, ApiWriter, KubeWriter, WriteError, Written};
