//! The RBAC objects a sim with authorization on starts with, the real server's bootstrap
//! policy for what the sim serves: `cluster-admin` bound to `system:masters`; discovery,
//! health and version paths (`system:discovery`, `system:public-info-viewer`) and the self
//! reviews (`system:basic-user`) for every authenticated user; and the user-facing
//! `admin`, `edit` and `view` ClusterRoles (written out flat: the sim does not aggregate).

/// Multi-document YAML of the bootstrap ClusterRoles and ClusterRoleBindings.
pub const YAML: &str = r#"
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata: {name: cluster-admin, labels: {kubernetes.io/bootstrapping: rbac-defaults}}
rules:
- {apiGroups: ["*"], resources: ["*"], verbs: ["*"]}
- {nonResourceURLs: ["*"], verbs: ["*"]}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata: {name: cluster-admin, labels: {kubernetes.io/bootstrapping: rbac-defaults}}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: cluster-admin}
subjects:
- {apiGroup: rbac.authorization.k8s.io, kind: Group, name: "system:masters"}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata: {name: "system:discovery", labels: {kubernetes.io/bootstrapping: rbac-defaults}}
rules:
- nonResourceURLs: [/api, /api/*, /apis, /apis/*, /healthz, /livez, /openapi, /openapi/*, /readyz, /version, /version/]
  verbs: [get]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata: {name: "system:discovery", labels: {kubernetes.io/bootstrapping: rbac-defaults}}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: "system:discovery"}
subjects:
- {apiGroup: rbac.authorization.k8s.io, kind: Group, name: "system:authenticated"}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata: {name: "system:public-info-viewer", labels: {kubernetes.io/bootstrapping: rbac-defaults}}
rules:
- nonResourceURLs: [/healthz, /livez, /readyz, /version, /version/]
  verbs: [get]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata: {name: "system:public-info-viewer", labels: {kubernetes.io/bootstrapping: rbac-defaults}}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: "system:public-info-viewer"}
subjects:
- {apiGroup: rbac.authorization.k8s.io, kind: Group, name: "system:authenticated"}
- {apiGroup: rbac.authorization.k8s.io, kind: Group, name: "system:unauthenticated"}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata: {name: "system:basic-user", labels: {kubernetes.io/bootstrapping: rbac-defaults}}
rules:
- apiGroups: [authorization.k8s.io]
  resources: [selfsubjectaccessreviews, selfsubjectrulesreviews]
  verbs: [create]
- apiGroups: [authentication.k8s.io]
  resources: [selfsubjectreviews]
  verbs: [create]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata: {name: "system:basic-user", labels: {kubernetes.io/bootstrapping: rbac-defaults}}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: "system:basic-user"}
subjects:
- {apiGroup: rbac.authorization.k8s.io, kind: Group, name: "system:authenticated"}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata: {name: view, labels: {kubernetes.io/bootstrapping: rbac-defaults}}
rules:
- apiGroups: [""]
  resources: [configmaps, events, pods, pods/status, serviceaccounts, namespaces, namespaces/status]
  verbs: [get, list, watch]
- apiGroups: [apps]
  resources: [deployments, deployments/status, deployments/scale]
  verbs: [get, list, watch]
- apiGroups: [events.k8s.io]
  resources: [events]
  verbs: [get, list, watch]
- apiGroups: [coordination.k8s.io]
  resources: [leases]
  verbs: [get, list, watch]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata: {name: edit, labels: {kubernetes.io/bootstrapping: rbac-defaults}}
rules:
- apiGroups: [""]
  resources: [configmaps, events, pods, pods/status, serviceaccounts, namespaces, namespaces/status, secrets]
  verbs: [get, list, watch]
- apiGroups: [""]
  resources: [configmaps, pods, secrets, serviceaccounts]
  verbs: [create, delete, deletecollection, patch, update]
- apiGroups: [apps]
  resources: [deployments, deployments/status, deployments/scale]
  verbs: [get, list, watch]
- apiGroups: [apps]
  resources: [deployments, deployments/scale]
  verbs: [create, delete, deletecollection, patch, update]
- apiGroups: [events.k8s.io]
  resources: [events]
  verbs: [get, list, watch]
- apiGroups: [coordination.k8s.io]
  resources: [leases]
  verbs: [get, list, watch]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata: {name: admin, labels: {kubernetes.io/bootstrapping: rbac-defaults}}
rules:
- apiGroups: [""]
  resources: [configmaps, events, pods, pods/status, serviceaccounts, namespaces, namespaces/status, secrets]
  verbs: [get, list, watch]
- apiGroups: [""]
  resources: [configmaps, pods, secrets, serviceaccounts]
  verbs: [create, delete, deletecollection, patch, update]
- apiGroups: [apps]
  resources: [deployments, deployments/status, deployments/scale]
  verbs: [get, list, watch]
- apiGroups: [apps]
  resources: [deployments, deployments/scale]
  verbs: [create, delete, deletecollection, patch, update]
- apiGroups: [events.k8s.io]
  resources: [events]
  verbs: [get, list, watch]
- apiGroups: [coordination.k8s.io]
  resources: [leases]
  verbs: [get, list, watch]
- apiGroups: [rbac.authorization.k8s.io]
  resources: [roles, rolebindings]
  verbs: [create, delete, deletecollection, get, list, patch, update, watch]
- apiGroups: [authorization.k8s.io]
  resources: [localsubjectaccessreviews]
  verbs: [create]
"#;
