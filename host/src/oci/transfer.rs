//! Push and pull of wasm modules. Push writes the CNCF Wasm OCI artifact layout (as `wkg` and
//! `oci-wasm` do); pull accepts it and Kubewarden's layout, and refuses anything else (a
//! container image, an index, two wasm layers) naming what it found.

use super::pull_error::{LayoutError, PullError};
use super::push_error::{MirrorError, PushError};
use super::reference::OciRef;
use super::registry::Registries;
use oci_client::RegistryOperation;
use serde_json::{Value, json};
use sha2::{Digest, Sha256};
use std::io::Write;

/// The CNCF layout's layer media type.
pub const CNCF_LAYER: &str = "application/wasm";
/// The CNCF layout's config media type.
pub const CNCF_CONFIG: &str = "application/vnd.wasm.config.v0+json";
/// Kubewarden's layer media type.
pub const KUBEWARDEN_LAYER: &str = "application/vnd.wasm.content.layer.v1+wasm";
/// Kubewarden's config media type.
pub const KUBEWARDEN_CONFIG: &str = "application/vnd.wasm.config.v1+json";
/// The OCI image manifest media type.
pub const OCI_MANIFEST: &str = "application/vnd.oci.image.manifest.v1+json";
const DOCKER_MANIFEST: &str = "application/vnd.docker.distribution.manifest.v2+json";
const OCI_INDEX: &str = "application/vnd.oci.image.index.v1+json";
const DOCKER_LIST: &str = "application/vnd.docker.distribution.manifest.list.v2+json";

/// The manifest media types asked for (indexes too, to refuse them by name).
const ACCEPTED: &[&str] = &[OCI_MANIFEST, DOCKER_MANIFEST, OCI_INDEX, DOCKER_LIST];

/// A pulled module.
#[derive(Debug, Clone)]
pub struct Pulled {
    /// The reference pinned to the manifest's digest.
    pub pinned: OciRef,
    /// The manifest's digest (64 hex digits): what `@sha256:` pins.
    pub manifest_digest: String,
    /// The module's (the wasm layer's) SHA-256, 64 hex digits.
    pub module_digest: String,
    /// The component.
    pub bytes: Vec<u8>,
    /// Whether the module came from the cache (no blob was downloaded).
    pub cached: bool,
}

/// The one wasm layer a manifest names: its digest (hex) and size.
pub fn wasm_layer(manifest: &[u8]) -> Result<(String, u64), LayoutError> {
    let invalid = |text: &str| LayoutError(text.to_string());
    let m: Value =
        serde_json::from_slice(manifest).map_err(|_| invalid("the manifest is not JSON"))?;
    let media = m.get("mediaType").and_then(Value::as_str).unwrap_or("");
    if media == OCI_INDEX || media == DOCKER_LIST || m.get("manifests").is_some() {
        let n = m
            .get("manifests")
            .and_then(Value::as_array)
            .map_or(0, Vec::len);
        return Err(LayoutError(format!(
            "found an image index ({}) of {n} manifests, not a wasm module: push the module itself (kubeplug push)",
            media_type_shown(media)
        )));
    }
    let config = m
        .pointer("/config/mediaType")
        .and_then(Value::as_str)
        .unwrap_or("none");
    let layers = m
        .get("layers")
        .and_then(Value::as_array)
        .ok_or_else(|| invalid("the manifest has no layers"))?;
    let types: Vec<&str> = layers
        .iter()
        .map(|l| l.get("mediaType").and_then(Value::as_str).unwrap_or("none"))
        .collect();
    let wasm: Vec<&Value> = layers
        .iter()
        .zip(&types)
        .filter(|(_, t)| **t == CNCF_LAYER || **t == KUBEWARDEN_LAYER)
        .map(|(l, _)| l)
        .collect();
    let shown = |types: &[&str]| {
        types
            .iter()
            .take(5)
            .map(|t| media_type_shown(t))
            .collect::<Vec<_>>()
            .join(", ")
    };
    let layer = match wasm.as_slice() {
        [one] => *one,
        [] => {
            return Err(LayoutError(format!(
                "no wasm layer ({CNCF_LAYER} or {KUBEWARDEN_LAYER}): found config {} and {} layer(s) [{}]{}",
                media_type_shown(config),
                types.len(),
                shown(&types),
                if config.contains("image.config") || config.contains("container.image") {
                    ": a container image, not a wasm module"
                } else {
                    ""
                }
            )));
        }
        more => {
            return Err(LayoutError(format!(
                "{} wasm layers, expected one: found [{}]",
                more.len(),
                shown(&types)
            )));
        }
    };
    let digest = layer
        .get("digest")
        .and_then(Value::as_str)
        .ok_or_else(|| invalid("the wasm layer has no digest"))?;
    // The registry's text: not shown.
    let hex = super::reference::parse_digest(digest)
        .map_err(|_| invalid("the wasm layer's digest is not sha256:<64 lower-case hex digits>"))?;
    let size = layer
        .get("size")
        .and_then(Value::as_u64)
        .ok_or_else(|| invalid("the wasm layer has no size"))?;
    Ok((hex, size))
}

/// A media type the registry wrote, as a message may show it: itself when it has the shape
/// of one (RFC 6838: `type/subtype` of at most 127 restricted characters each), else a
/// placeholder; never free text from a registry.
fn media_type_shown(t: &str) -> &str {
    let name = |part: &str| {
        (1..=127).contains(&part.len())
            && part.starts_with(|c: char| c.is_ascii_alphanumeric())
            && part
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || "!#$&^_.+-".contains(c))
    };
    match t.split_once('/') {
        Some((kind, sub)) if name(kind) && name(sub) => t,
        _ if t == "none" => t,
        _ => "(not a media type)",
    }
}

/// Pulls the module `r` names with the credentials the registry flags give.
pub async fn pull(reg: &Registries, r: &OciRef) -> Result<Pulled, PullError> {
    pull_with(reg, r, &reg.access()).await
}

/// Pulls the module `r` names: the manifest read (bounded, by tag or digest; its bytes
/// checked against a pinned digest) and checked (one wasm layer of a known media type,
/// within the size limit), the blob streamed into the cache with the limit enforced as it
/// arrives and its digest verified. A module already cached is not downloaded again; a
/// pinned reference whose manifest was seen needs no request at all. Every read is
/// bounded (see `fetch`); the error says which step failed ([`PullError`]).
pub async fn pull_with(
    reg: &Registries,
    r: &OciRef,
    access: &super::access::Access,
) -> Result<Pulled, PullError> {
    pull_inner(reg, r, access, true).await
}

/// [`pull_with`] that always asks the registry for the manifest with `auth`, even for a
/// pinned module already cached: a tenant whose credentials cannot read the image does not
/// get it from the cache another tenant filled. The module's bytes still come from the
/// cache when held.
pub async fn pull_checked(
    reg: &Registries,
    r: &OciRef,
    access: &super::access::Access,
) -> Result<Pulled, PullError> {
    pull_inner(reg, r, access, false).await
}

async fn pull_inner(
    reg: &Registries,
    r: &OciRef,
    access: &super::access::Access,
    cache_answers_pinned: bool,
) -> Result<Pulled, PullError> {
    if cache_answers_pinned
        && let Some(manifest_digest) = &r.digest
        && let Some(module_digest) = reg.cache.module_of_manifest(manifest_digest)
        && let Some(bytes) = reg.cache.module(&module_digest)
    {
        return Ok(Pulled {
            pinned: r.clone(),
            manifest_digest: manifest_digest.clone(),
            module_digest,
            bytes,
            cached: true,
        });
    }
    let manifest = reg
        .fetch
        .manifest(r, &manifest_reference(r), ACCEPTED, access)
        .await
        .map_err(|fault| PullError::Fetch {
            what: format!("pulling the manifest of {r}"),
            fault,
        })?;
    let manifest_digest = manifest.digest;
    let pinned = r.pinned(&manifest_digest);
    let (module_digest, size) = wasm_layer(&manifest.bytes).map_err(|fault| PullError::Layout {
        image: pinned.to_string(),
        fault,
    })?;
    if size > reg.max_module_bytes {
        return Err(PullError::TooLarge {
            image: pinned.to_string(),
            size,
            limit_mib: reg.max_module_bytes >> 20,
        });
    }
    let (bytes, cached) = match reg.cache.module(&module_digest) {
        Some(bytes) => (bytes, true),
        None => (
            download(reg, &pinned, &module_digest, size, access).await?,
            false,
        ),
    };
    reg.cache
        .record_manifest(&manifest_digest, &module_digest)
        .map_err(|fault| PullError::Cache {
            what: "recording the manifest in",
            fault,
        })?;
    Ok(Pulled {
        pinned,
        manifest_digest,
        module_digest,
        bytes,
        cached,
    })
}

/// What the manifest URL names: the digest when pinned, else the tag.
fn manifest_reference(r: &OciRef) -> String {
    match &r.digest {
        Some(d) => format!("sha256:{d}"),
        None => r.tag_or_default().to_string(),
    }
}

async fn download(
    reg: &Registries,
    pinned: &OciRef,
    hex: &str,
    size: u64,
    access: &super::access::Access,
) -> Result<Vec<u8>, PullError> {
    let cache = |fault| PullError::Cache {
        what: "writing to",
        fault,
    };
    let mut temp = reg.cache.temp_file().map_err(cache)?;
    let mut bytes = Vec::with_capacity(size as usize);
    reg.fetch
        .blob(pinned, hex, size, access, |chunk| {
            bytes.extend_from_slice(chunk);
            temp.write_all(chunk)
        })
        .await
        .map_err(|fault| PullError::Fetch {
            what: format!("{pinned}: pulling the wasm layer"),
            fault,
        })?;
    reg.cache.commit(temp, hex).map_err(cache)?;
    Ok(bytes)
}

/// Pushes `module` to `r` (a tag; `latest` if none) in the CNCF Wasm layout and returns the
/// manifest's digest (64 hex digits).
pub async fn push(reg: &Registries, r: &OciRef, module: &[u8]) -> Result<String, PushError> {
    if r.digest.is_some() {
        return Err(PushError::ToDigest {
            reference: r.to_string(),
        });
    }
    if !module.starts_with(b"\0asm") {
        return Err(PushError::NotWasm);
    }
    if module.len() as u64 > reg.max_module_bytes {
        return Err(PushError::TooLarge {
            size: module.len() as u64,
            limit_mib: reg.max_module_bytes >> 20,
        });
    }
    let layer_digest = format!("sha256:{}", hex::encode(Sha256::digest(module)));
    // A JSON value's text is its compact serialization, which cannot fail.
    let config = json!({
        "architecture": "wasm",
        "os": "wasip2",
        "layerDigests": [layer_digest],
    })
    .to_string()
    .into_bytes();
    push_manifest_of(reg, r, module, CNCF_LAYER, &config, CNCF_CONFIG).await
}

/// Pushes one layer of `layer_type` and a config of `config_type` under `r`'s tag: the
/// building block of push and of tests that push other layouts.
pub async fn push_manifest_of(
    reg: &Registries,
    r: &OciRef,
    layer: &[u8],
    layer_type: &str,
    config: &[u8],
    config_type: &str,
) -> Result<String, PushError> {
    let manifest = json!({
        "schemaVersion": 2,
        "mediaType": OCI_MANIFEST,
        "config": descriptor(config_type, config),
        "layers": [descriptor(layer_type, layer)],
    });
    push_raw(reg, r, &[layer, config], manifest.to_string().as_bytes()).await
}

/// Pushes `blobs`, then `manifest` (an OCI image manifest) under `r`'s tag; returns the
/// manifest's digest (hex).
pub async fn push_raw(
    reg: &Registries,
    r: &OciRef,
    blobs: &[&[u8]],
    manifest: &[u8],
) -> Result<String, PushError> {
    push_raw_as(reg, r, blobs, manifest, OCI_MANIFEST).await
}

/// [`push_raw`] of a manifest of media type `media_type`.
async fn push_raw_as(
    reg: &Registries,
    r: &OciRef,
    blobs: &[&[u8]],
    manifest: &[u8],
    media_type: &str,
) -> Result<String, PushError> {
    let target = oci_client::Reference::with_tag(
        r.registry.clone(),
        r.repository.clone(),
        r.tag_or_default().to_string(),
    );
    let failed = |step: String| {
        move |fault| PushError::Registry {
            reference: r.to_string(),
            step,
            fault,
        }
    };
    let header = http::HeaderValue::from_str(media_type).map_err(|_| PushError::MediaType {
        reference: r.to_string(),
    })?;
    reg.client
        .auth(&target, &reg.auth(r), RegistryOperation::Push)
        .await
        .map_err(failed("authenticating to push".into()))?;
    for blob in blobs {
        let digest = format!("sha256:{}", hex::encode(Sha256::digest(blob)));
        if reg
            .client
            .blob_exists(&target, &digest)
            .await
            .unwrap_or(false)
        {
            continue;
        }
        reg.client
            .push_blob(&target, blob.to_vec(), &digest)
            .await
            .map_err(failed(format!("pushing blob {digest}")))?;
    }
    reg.client
        .push_manifest_raw(&target, manifest.to_vec(), header)
        .await
        .map_err(failed("pushing the manifest".into()))?;
    Ok(hex::encode(Sha256::digest(manifest)))
}

/// The largest config blob copied by [`mirror`].
const MAX_CONFIG_BYTES: u64 = 1 << 20;

/// Copies the module `src` names to `dst` (its registry and repository; `src`'s tag unless
/// `dst` names one): the same manifest bytes, so the same digest, which is returned. Only
/// wasm modules are copied (the same checks as pull). Signatures are not copied yet.
pub async fn mirror(reg: &Registries, src: &OciRef, dst: &OciRef) -> Result<String, MirrorError> {
    if dst.digest.is_some() {
        return Err(MirrorError::ToDigest {
            destination: dst.to_string(),
        });
    }
    let pulled = pull(reg, src).await?;
    let invalid = |why: String| MirrorError::Manifest {
        image: pulled.pinned.to_string(),
        why,
    };
    let manifest = reg
        .fetch
        .manifest(
            &pulled.pinned,
            &manifest_reference(&pulled.pinned),
            ACCEPTED,
            &reg.access(),
        )
        .await
        .map_err(|fault| MirrorError::Fetch {
            what: format!("pulling the manifest of {}", pulled.pinned),
            fault,
        })?
        .bytes;
    // serde's message may quote the registry's bytes: not shown.
    let m: Value = serde_json::from_slice(&manifest)
        .map_err(|_| invalid("the manifest is not JSON".into()))?;
    let media_type = m
        .get("mediaType")
        .and_then(Value::as_str)
        .unwrap_or(OCI_MANIFEST)
        .to_string();
    let config_digest = m
        .pointer("/config/digest")
        .and_then(Value::as_str)
        .ok_or_else(|| invalid("the manifest has no config".into()))?
        .to_string();
    let config_size = m
        .pointer("/config/size")
        .and_then(Value::as_u64)
        .ok_or_else(|| invalid("the manifest's config has no size".into()))?;
    if config_size > MAX_CONFIG_BYTES {
        return Err(invalid(format!(
            "a config of {config_size} bytes, more than {MAX_CONFIG_BYTES}"
        )));
    }
    let config_hex = super::reference::parse_digest(&config_digest)
        .map_err(|why| invalid(format!("the config's {why}")))?;
    let config = reg
        .fetch
        .blob_bytes(&pulled.pinned, &config_hex, config_size, &reg.access())
        .await
        .map_err(|fault| MirrorError::Fetch {
            what: format!("{}: pulling the config", pulled.pinned),
            fault,
        })?;
    let target = OciRef {
        digest: None,
        ..src.retargeted(dst)
    };
    let digest = push_raw_as(
        reg,
        &target,
        &[&pulled.bytes, &config],
        &manifest,
        &media_type,
    )
    .await?;
    if digest != pulled.manifest_digest {
        return Err(MirrorError::DigestDiffers {
            target: target.to_string(),
            digest,
        });
    }
    Ok(digest)
}

fn descriptor(media_type: &str, bytes: &[u8]) -> Value {
    json!({
        "mediaType": media_type,
        "digest": format!("sha256:{}", hex::encode(Sha256::digest(bytes))),
        "size": bytes.len(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn manifest(config: &str, layers: &[&str]) -> Vec<u8> {
        let d = format!("sha256:{}", "a".repeat(64));
        serde_json::to_vec(&json!({
            "schemaVersion": 2, "mediaType": OCI_MANIFEST,
            "config": {"mediaType": config, "digest": d, "size": 2},
            "layers": layers.iter().map(|t| json!({"mediaType": t, "digest": d, "size": 7})).collect::<Vec<_>>(),
        }))
        .unwrap()
    }

    #[test]
    fn both_conventions_and_nothing_else() {
        assert_eq!(
            wasm_layer(&manifest(CNCF_CONFIG, &[CNCF_LAYER])).unwrap().1,
            7
        );
        assert_eq!(
            wasm_layer(&manifest(KUBEWARDEN_CONFIG, &[KUBEWARDEN_LAYER]))
                .unwrap()
                .0,
            "a".repeat(64)
        );
        let err = wasm_layer(&manifest(
            "application/vnd.oci.image.config.v1+json",
            &["application/vnd.oci.image.layer.v1.tar+gzip"],
        ))
        .unwrap_err()
        .to_string();
        assert!(err.contains("a container image"), "{err}");
        assert!(
            err.contains("application/vnd.oci.image.layer.v1.tar+gzip"),
            "{err}"
        );
        let err = wasm_layer(&manifest(CNCF_CONFIG, &[CNCF_LAYER, KUBEWARDEN_LAYER]))
            .unwrap_err()
            .to_string();
        assert!(err.starts_with("2 wasm layers"), "{err}");
        let index = json!({"schemaVersion": 2, "mediaType": OCI_INDEX, "manifests": [{}, {}]});
        let err = wasm_layer(&serde_json::to_vec(&index).unwrap())
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("image index") && err.contains("of 2 manifests"),
            "{err}"
        );
        // An index named by its `manifests` alone: its media type is the registry's text, not
        // shown unless it has a media type's shape.
        let index = json!({"mediaType": "secret\u{1b}[31m token=abc", "manifests": [{}]});
        let err = wasm_layer(&serde_json::to_vec(&index).unwrap())
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("image index ((not a media type)) of 1 manifests")
                && !err.contains("secret"),
            "{err}"
        );
        assert!(wasm_layer(b"<html>").is_err());
        // A registry's free text in a media type's place is not shown.
        let err = wasm_layer(&manifest(
            "root:x:0:0:root:/root:/bin/bash",
            &["text/plain; internal secret"],
        ))
        .unwrap_err()
        .to_string();
        assert!(!err.contains("root") && !err.contains("secret"), "{err}");
        assert!(err.contains("(not a media type)"), "{err}");
    }
}
