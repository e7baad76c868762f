//! The list merge keys of the built-in kinds we serve (Deployments, Pods and object metadata),
//! shared by strategic merge patch and server-side apply. Custom kinds have none: their lists
//! are atomic, as for a CRD without `x-kubernetes-list-type: map`.

/// How a list field merges.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ListKind {
    /// Replaced as a whole (no merge key).
    Atomic,
    /// Items matched by the value of this field.
    Keyed(&'static str),
    /// A list of scalars merged as a set (`finalizers`).
    Set,
}

/// The merge behaviour of list field `field` in a built-in kind.
pub fn list_kind(field: &str) -> ListKind {
    match field {
        "containers"
        | "initContainers"
        | "ephemeralContainers"
        | "env"
        | "volumes"
        | "imagePullSecrets"
        | "resourceClaims"
        | "schedulingGates" => ListKind::Keyed("name"),
        "ports" => ListKind::Keyed("containerPort"),
        "volumeMounts" => ListKind::Keyed("mountPath"),
        "volumeDevices" => ListKind::Keyed("devicePath"),
        "ownerReferences" => ListKind::Keyed("uid"),
        "conditions" => ListKind::Keyed("type"),
        "hostAliases" => ListKind::Keyed("ip"),
        "topologySpreadConstraints" => ListKind::Keyed("topologyKey"),
        "finalizers" => ListKind::Set,
        _ => ListKind::Atomic,
    }
}

/// The merge behaviour for a kind: built-in kinds use [`list_kind`], custom kinds are atomic
/// except `metadata` lists.
pub fn list_kind_for(builtin: bool, in_metadata: bool, field: &str) -> ListKind {
    if builtin || in_metadata {
        list_kind(field)
    } else {
        ListKind::Atomic
    }
}
