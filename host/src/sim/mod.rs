//! The embedded Kubernetes API server (see issue 3).
