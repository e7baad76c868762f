//! The live stream of what the plugins do: every plugin log line, Event, audited action
//! decision, plugin lifecycle change and reconcile outcome, as one JSON record each, served
//! at `GET /api/wds/logs` (WebSocket or Server-Sent Events) by the status server.
//!
//! One source for every client: the host's own structured log events are turned into
//! records by a `tracing` layer ([`StreamLayer`]) and published on one [`StreamHub`] (a
//! bounded ring for replay plus a bounded broadcast), so a client costs no watch, no
//! extra API traffic and at most the broadcast buffer of memory, however slowly it reads.

mod filter;
mod hub;
mod layer;
mod record;

pub use filter::{Filter, FilterError, Format, MAX_PARAMETERS, MAX_VALUES, is_instance_name};
pub use hub::{HUB_CAPACITY, REPLAY_CAPACITY, StreamHub, Subscription, global};
pub use layer::StreamLayer;
pub use record::{Level, Record, RecordType};
