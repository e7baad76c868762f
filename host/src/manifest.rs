//! Reading Kubernetes manifests: YAML (or JSON) files with one or more documents.

use serde_json::Value;
use std::path::Path;

/// A manifest that could not be read or parsed, naming the file.
#[derive(Debug, thiserror::Error)]
pub enum ManifestError {
    /// The file cannot be read.
    #[error("cannot read {path}: {source}")]
    Read {
        /// The file.
        path: String,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// The text is neither YAML nor JSON.
    #[error("{path} is not valid YAML or JSON: {source}")]
    Parse {
        /// Where the text came from.
        path: String,
        /// The parser's error (boxed: it is large, and errors travel in `Result`s).
        #[source]
        source: Box<serde_saphyr::Error>,
    },
    /// A document is not a Kubernetes object.
    #[error("{path}: document {index} is not an object with apiVersion, kind and metadata.name")]
    NotAnObject {
        /// Where the text came from.
        path: String,
        /// The document's position, from 1.
        index: usize,
    },
}

/// Parses every non-empty document of a YAML (or JSON) text; `origin` names it in errors.
/// A `kind: List` document contributes its items.
pub fn parse_documents(text: &str, origin: &str) -> Result<Vec<Value>, ManifestError> {
    let docs: Vec<Value> =
        serde_saphyr::from_multiple(text).map_err(|source| ManifestError::Parse {
            path: origin.to_string(),
            source: Box::new(source),
        })?;
    let mut out = Vec::new();
    for (index, doc) in docs.into_iter().enumerate() {
        match doc {
            Value::Null => {}
            Value::Object(ref m) if m.get("kind").and_then(Value::as_str) == Some("List") => {
                out.extend(
                    m.get("items")
                        .and_then(Value::as_array)
                        .cloned()
                        .unwrap_or_default(),
                );
            }
            Value::Object(_) if is_object(&doc) => out.push(doc),
            _ => {
                return Err(ManifestError::NotAnObject {
                    path: origin.to_string(),
                    index: index + 1,
                });
            }
        }
    }
    Ok(out)
}

fn is_object(doc: &Value) -> bool {
    let s = |p| {
        doc.pointer(p)
            .and_then(Value::as_str)
            .is_some_and(|v| !v.is_empty())
    };
    s("/apiVersion") && s("/kind") && s("/metadata/name")
}

/// Reads and parses a manifest file.
pub fn read_file(path: &Path) -> Result<Vec<Value>, ManifestError> {
    let origin = path.display().to_string();
    let text = std::fs::read_to_string(path).map_err(|source| ManifestError::Read {
        path: origin.clone(),
        source,
    })?;
    parse_documents(&text, &origin)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_several_documents_and_lists() {
        let text = "apiVersion: v1\nkind: Pod\nmetadata: {name: a}\n---\n---\n\
                    apiVersion: v1\nkind: List\nitems:\n- {apiVersion: v1, kind: Pod, metadata: {name: b}}\n";
        let docs = parse_documents(text, "t.yaml").unwrap();
        let names: Vec<_> = docs
            .iter()
            .map(|d| d["metadata"]["name"].as_str().unwrap())
            .collect();
        assert_eq!(names, ["a", "b"]);
    }

    #[test]
    fn errors_name_the_file_and_document() {
        let err = parse_documents("a: [1, 2", "bad.yaml").unwrap_err();
        assert!(
            err.to_string().starts_with("bad.yaml is not valid YAML"),
            "{err}"
        );
        let err = parse_documents(
            "apiVersion: v1\nkind: Pod\nmetadata: {name: a}\n---\n- 1\n",
            "x.yaml",
        )
        .unwrap_err();
        assert_eq!(
            err.to_string(),
            "x.yaml: document 2 is not an object with apiVersion, kind and metadata.name"
        );
    }
}
