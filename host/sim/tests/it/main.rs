//! The embedded API server's end-to-end tests, one binary: its REST protocol through a real
//! kube client (`api`) and through kubectl (`kubectl`).

mod api;
mod kubectl;
