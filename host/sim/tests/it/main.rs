//! The embedded API server's end-to-end tests, one binary: its REST protocol through a real
//! kube client (`api`) and through kubectl (`kubectl`); authentication, RBAC, impersonation
//! and access reviews through kube clients (`rbac`) and kubectl (`kubectl_rbac`); HTTPS with
//! the sim's own CA (`tls`); fault schedules (`faults_schedule`); shared helpers (`support`).

mod api;
mod faults_schedule;
mod kubectl;
mod kubectl_rbac;
mod rbac;
mod support;
mod tls;
