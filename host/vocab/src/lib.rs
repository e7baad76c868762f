//! The Kubernetes vocabulary that both sides of kubeplug speak: the host, which checks what
//! plugins send, and the embedded API server, which answers like Kubernetes does. One
//! definition each, so that a plugin, `kubectl` and the embedded API server agree:
//! label selectors ([`selector`]), patch types ([`PatchType`]) and DNS-1123 names
//! ([`names`]). Small and free of I/O, so that the host's library does not need the
//! embedded API server to build.

pub mod names;
mod patch_type;
pub mod selector;

pub use patch_type::PatchType;
