//! A test plugin whose metadata misbehaves. `metadata()` is called once at load, with no
//! configuration, so the misbehaviour is chosen by a marker in the data section: the bytes
//! after `KUBEPLUG-META-VARIANT:` (26 bytes, space-padded) name the variant, and tests
//! rewrite them in a copy of the built `.wasm` (same length, so the component stays valid).
//!
//! Variants: `behave` (as built), `huge-name` (a 10 MiB name), `huge-version` (a 40 MiB
//! version), `many-owns` (100,000 owned kinds), `flood-log` (300 `log` calls of 1 MiB, then
//! valid metadata), `forged-kind` (a reconciled kind with a newline and ANSI escapes).

use kubeplug_sdk::{Action, Error, KindRef, LogLevel, Metadata, Reconciler, Request, host};

/// The marker and the variant it selects.
static VARIANT: [u8; 48] = *b"KUBEPLUG-META-VARIANT:behave                    ";

fn variant() -> String {
    let marker = std::hint::black_box(&VARIANT);
    String::from_utf8_lossy(&marker[22..]).trim().to_string()
}

/// The hostile-metadata reconciler.
pub struct HostileMeta;

impl Reconciler for HostileMeta {
    fn metadata() -> Metadata {
        let ok = || Metadata::new("hostile-meta", "0.1.0");
        match variant().as_str() {
            "huge-name" => Metadata {
                name: "a".repeat(10 << 20),
                ..ok()
            },
            "huge-version" => Metadata {
                version: "1".repeat(40 << 20),
                ..ok()
            },
            "many-owns" => {
                (0..100_000).fold(ok(), |m, _| m.owns_kind(KindRef::new("v1", "ConfigMap")))
            }
            "flood-log" => {
                let line = "x".repeat(1 << 20);
                for _ in 0..300 {
                    host::log(LogLevel::Info, &line);
                }
                ok()
            }
            // Never answers: the load's metadata time limit ends it.
            "spin" => loop {
                std::hint::black_box(0u64);
            },
            "forged-kind" => ok().reconciles_kind(KindRef::new(
                "v1",
                "Pod\n2026-11-23T00:00:00Z ERROR kubeplug: forged\u{1b}[31m",
            )),
            _ => ok(),
        }
    }

    fn reconcile(req: Request) -> Result<Vec<Action>, Error> {
        Ok(vec![Action::info(format!("reconciled {}", req.key()))])
    }
}

kubeplug_sdk::export!(HostileMeta);
