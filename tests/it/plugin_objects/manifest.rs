//! Plugin manifests built up field by field, so a test names only what differs: the module
//! (a ConfigMap or an image), the config, and which Deployment fields it may patch.

use std::fmt::Display;

/// The fields image-pinner patches: the containers' names and images.
pub const PINNED_FIELDS: &str =
    "/spec/template/spec/containers/*/name, /spec/template/spec/containers/*/image";

/// The containers' images only.
pub const IMAGE_FIELD: &str = "/spec/template/spec/containers/*/image";

/// A `Plugin` manifest; [`Self::yaml`] writes it.
pub struct PluginYaml {
    ns: String,
    name: String,
    module: String,
    config: Option<String>,
    patches: Option<&'static str>,
}

impl PluginYaml {
    /// Running the module in ConfigMap `config_map` (key plugin.wasm).
    pub fn config_map(ns: &str, name: &str, config_map: &str) -> Self {
        Self::with_module(ns, name, format!("{{configMap: {{name: {config_map}}}}}"))
    }

    /// Running the module of image `tag` (`oci://host/repo:tag`).
    pub fn image(ns: &str, name: &str, tag: impl Display) -> Self {
        Self::with_module(ns, name, format!("{{image: \"{tag}\"}}"))
    }

    fn with_module(ns: &str, name: &str, module: String) -> Self {
        Self {
            ns: ns.into(),
            name: name.into(),
            module,
            config: None,
            patches: None,
        }
    }

    /// With `config`, a YAML flow mapping (`{mode: loop}`).
    pub fn config(mut self, config: &str) -> Self {
        self.config = Some(config.into());
        self
    }

    /// Allowed to patch these fields of Deployments (the items of a YAML flow list).
    pub fn patching(mut self, fields: &'static str) -> Self {
        self.patches = Some(fields);
        self
    }

    /// As image-pinner configured to pin Deployments to `image`, with the rights it needs.
    pub fn pinning(self, image: &str) -> Self {
        self.config(&format!("{{image: \"{image}\"}}"))
            .patching(PINNED_FIELDS)
    }

    /// The manifest.
    pub fn yaml(&self) -> String {
        let mut yaml = format!(
            "apiVersion: kubeplug.dev/v1alpha1\nkind: Plugin\nmetadata: {{name: {}, namespace: {}}}\nspec:\n  module: {}\n",
            self.name, self.ns, self.module
        );
        if let Some(config) = &self.config {
            yaml.push_str(&format!("  config: {config}\n"));
        }
        if let Some(fields) = self.patches {
            yaml.push_str(&format!(
                "  permissions:\n    rules:\n    - apiVersion: apps/v1\n      kind: Deployment\n      verbs: [patch]\n      fields: [{fields}]\n"
            ));
        }
        yaml
    }
}
