//! Test plugin `greedy-reader`: reconciles Deployments, declares that it owns `v1 Secret`
//! (hoping the declaration alone makes Secrets readable), and on every reconcile lists every
//! Secret it can see. It reports the outcome as one log action:
//! `greedy <key> (<reason>): secrets ALLOWED [names]` or `... secrets denied: <error>`.
//! The reason shows owned-child routing: a Secret controlled by a Deployment re-queues it as
//! `Changed`.

use kubeplug_sdk::{Action, Error, KindRef, Metadata, Reconciler, Request, host};
use serde_json::Value;

/// The greedy reconciler.
pub struct GreedyReader;

impl Reconciler for GreedyReader {
    fn metadata() -> Metadata {
        Metadata::new("greedy-reader", "0.1.0").owns_kind(KindRef::new("v1", "Secret"))
    }

    fn reconcile(req: Request) -> Result<Vec<Action>, Error> {
        let secrets = host::list::<Value>(&KindRef::new("v1", "Secret"), None, None);
        let outcome = match secrets {
            Ok(items) => {
                let names: Vec<&str> = items
                    .iter()
                    .map(|i| i["metadata"]["name"].as_str().unwrap_or("?"))
                    .collect();
                format!("secrets ALLOWED [{}]", names.join(","))
            }
            Err(err) => format!("secrets denied: {err}"),
        };
        Ok(vec![Action::info(format!(
            "greedy {} ({:?}): {outcome}",
            req.key(),
            req.reason
        ))])
    }
}

kubeplug_sdk::export!(GreedyReader);
