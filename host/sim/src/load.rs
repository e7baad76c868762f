//! Start-up content: multi-document YAML manifests (files or a directory) and CRD files.

use serde_json::Value;
use std::path::{Path, PathBuf};

/// Why manifests could not be read.
#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    /// A file or directory could not be read.
    #[error("reading {path}: {source}")]
    Io {
        /// The path.
        path: PathBuf,
        /// The cause.
        source: std::io::Error,
    },
    /// A document is not valid YAML.
    #[error("parsing {origin}: {message}")]
    Yaml {
        /// File name or `<text>`.
        origin: String,
        /// Parser message.
        message: String,
    },
}

/// Parses multi-document YAML (or JSON) into objects; empty documents are skipped and `List`
/// kinds are flattened into their items.
pub fn parse_documents(text: &str, origin: &str) -> Result<Vec<Value>, LoadError> {
    let documents: Vec<Value> = serde_saphyr::from_multiple(text).map_err(|e| LoadError::Yaml {
        origin: origin.to_string(),
        message: e.to_string(),
    })?;
    let mut out = Vec::new();
    for doc in documents {
        match doc {
            Value::Null => {}
            Value::Object(ref m)
                if m.get("kind")
                    .and_then(Value::as_str)
                    .is_some_and(|k| k.ends_with("List")) =>
            {
                if let Some(items) = m.get("items").and_then(Value::as_array) {
                    out.extend(items.iter().cloned());
                }
            }
            other => out.push(other),
        }
    }
    Ok(out)
}

/// Reads one manifest file.
pub fn read_file(path: &Path) -> Result<Vec<Value>, LoadError> {
    let text = std::fs::read_to_string(path).map_err(|source| LoadError::Io {
        path: path.into(),
        source,
    })?;
    parse_documents(&text, &path.display().to_string())
}

/// Reads every `*.yaml`, `*.yml` and `*.json` file of a directory (sorted by name, not
/// recursive) into `seeds`, one file at a time.
pub fn read_dir(dir: &Path, seeds: &mut Seeds) -> Result<(), LoadError> {
    let io = |source| LoadError::Io {
        path: dir.into(),
        source,
    };
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .map_err(io)?
        .filter_map(Result::ok)
        .map(|e| e.path())
        .filter(|p| {
            p.is_file()
                && p.extension()
                    .and_then(|e| e.to_str())
                    .is_some_and(|e| matches!(e, "yaml" | "yml" | "json"))
        })
        .collect();
    files.sort();
    for file in files {
        seeds.add(read_file(&file)?);
    }
    Ok(())
}

/// The objects to create at start, in creation order: CRDs, then namespaces, then the rest,
/// each in the order read. The rest wait as JSON text: a parsed Deployment of 6 KB takes
/// about 68 KB (serde_json's maps), and 100,000 of them held parsed until created took
/// 6.8 GB on top of the store.
#[derive(Debug, Default)]
pub struct Seeds {
    crds: Vec<Value>,
    namespaces: Vec<Value>,
    rest: Vec<String>,
}

impl Seeds {
    /// Adds parsed documents.
    pub fn add(&mut self, objects: Vec<Value>) {
        for object in objects {
            match object.get("kind").and_then(Value::as_str) {
                Some("CustomResourceDefinition") => self.crds.push(object),
                Some("Namespace") => self.namespaces.push(object),
                _ => self.rest.push(object.to_string()),
            }
        }
    }

    /// The CRDs read, whose kinds must be registered before anything is created.
    pub fn crds(&self) -> &[Value] {
        &self.crds
    }

    /// Every object in creation order, each parsed only when its turn comes.
    pub fn into_objects(self) -> impl Iterator<Item = Value> {
        let rest = self
            .rest
            .into_iter()
            .map(|text| serde_json::from_str(&text).expect("written from a parsed value"));
        self.crds.into_iter().chain(self.namespaces).chain(rest)
    }
}

/// Orders objects so that CRDs come first, then namespaces, then the rest (stable).
pub fn creation_order(objects: &mut [Value]) {
    objects.sort_by_key(|o| match o.get("kind").and_then(Value::as_str) {
        Some("CustomResourceDefinition") => 0,
        Some("Namespace") => 1,
        _ => 2,
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn multi_document_yaml() {
        let text = "apiVersion: v1\nkind: Namespace\nmetadata:\n  name: a\n---\n---\napiVersion: v1\nkind: List\nitems:\n- apiVersion: v1\n  kind: Namespace\n  metadata: {name: b}\n";
        let docs = parse_documents(text, "t").unwrap();
        assert_eq!(docs.len(), 2);
        assert_eq!(docs[1]["metadata"]["name"], "b");
        assert!(parse_documents("a: [", "t").is_err());
    }

    #[test]
    fn seeds_come_out_in_creation_order() {
        let mut seeds = Seeds::default();
        let doc =
            |kind: &str, name: &str| serde_json::json!({"kind": kind, "metadata": {"name": name}});
        seeds.add(vec![doc("Deployment", "d1"), doc("Namespace", "n1")]);
        seeds.add(vec![
            doc("CustomResourceDefinition", "c1"),
            doc("Pod", "p1"),
            doc("Namespace", "n2"),
        ]);
        assert_eq!(seeds.crds().len(), 1);
        let names: Vec<String> = seeds
            .into_objects()
            .map(|o| o["metadata"]["name"].as_str().unwrap().to_string())
            .collect();
        assert_eq!(names, ["c1", "n1", "n2", "d1", "p1"]);
    }
}
