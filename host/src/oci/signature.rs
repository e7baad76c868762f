//! cosign signatures, stored as cosign stores them: for a manifest `sha256:<hex>`, an OCI
//! image manifest tagged `sha256-<hex>.sig` in the same repository, one layer per signature.
//! A layer is a simple-signing payload (`application/vnd.dev.cosign.simplesigning.v1+json`:
//! `{"critical":{"identity":{"docker-reference":…},"image":{"docker-manifest-digest":…},
//! "type":"cosign container image signature"},"optional":…}`) and carries the payload's
//! ECDSA signature, base64 of ASN.1 DER, in the `dev.cosignproject.cosign/signature`
//! annotation. `cosign verify --key` reads the same manifest (without a transparency-log
//! entry: `--insecure-ignore-tlog`).
//!
//! Every read is bounded (through [`super::fetch`]): the signature manifest to 4 MiB, each
//! payload to 64 KiB, at most [`MAX_SIGNATURES`] payloads read.

use super::access::Access;
use super::fetch::FetchError;
use super::reference::OciRef;
use super::registry::Registries;
use super::signature_error::SignatureError;
use super::transfer::{self, OCI_MANIFEST};
use crate::oci::keys::SigningKey;
use base64::Engine;
use serde_json::{Value, json};
use sha2::{Digest, Sha256};
use std::collections::BTreeMap;

/// The media type of a signature layer (a simple-signing payload).
pub const SIMPLE_SIGNING: &str = "application/vnd.dev.cosign.simplesigning.v1+json";
/// The annotation holding a layer's signature.
pub const SIGNATURE_ANNOTATION: &str = "dev.cosignproject.cosign/signature";
/// The payload's `critical.type`.
pub const PAYLOAD_TYPE: &str = "cosign container image signature";
/// The config media type of a signature manifest (cosign's, an OCI image config).
pub const SIGNATURE_CONFIG: &str = "application/vnd.oci.image.config.v1+json";
/// The largest signature payload read.
pub const MAX_PAYLOAD_BYTES: u64 = 64 << 10;
/// The longest signature annotation read (base64 of a DER signature is ~100 bytes).
pub const MAX_SIGNATURE_ANNOTATION_BYTES: usize = 4 << 10;
/// The most signature layers read from one manifest (each is a request).
pub const MAX_SIGNATURES: usize = 128;
/// The largest signature config copied by [`copy`].
const MAX_CONFIG_BYTES: u64 = 1 << 20;
/// The manifest media types asked for when reading the module to sign (indexes too, to
/// refuse them by name).
pub(crate) const MODULE_MANIFEST_TYPES: &[&str] = &[
    OCI_MANIFEST,
    "application/vnd.docker.distribution.manifest.v2+json",
    "application/vnd.oci.image.index.v1+json",
    "application/vnd.docker.distribution.manifest.list.v2+json",
];
/// The manifest media types a signature manifest may have.
const MANIFEST_TYPES: &[&str] = &[
    OCI_MANIFEST,
    "application/vnd.docker.distribution.manifest.v2+json",
];

/// The tag cosign stores the signatures of manifest `hex` under.
pub fn signature_tag(hex: &str) -> String {
    format!("sha256-{hex}.sig")
}

/// The signature manifest's reference for the module `pinned`: same registry and repository.
fn signature_ref(pinned: &OciRef, hex: &str) -> OciRef {
    OciRef {
        registry: pinned.registry.clone(),
        repository: pinned.repository.clone(),
        tag: Some(signature_tag(hex)),
        digest: None,
    }
}

/// The simple-signing payload cosign signs for `r`'s repository at manifest `hex`, with
/// `annotations` as its `optional` part (`null` when none, as cosign writes it).
pub fn payload(r: &OciRef, hex: &str, annotations: &BTreeMap<String, String>) -> Vec<u8> {
    let optional = if annotations.is_empty() {
        Value::Null
    } else {
        json!(annotations)
    };
    let doc = json!({
        "critical": {
            "identity": {"docker-reference": format!("{}/{}", r.registry, r.repository)},
            "image": {"docker-manifest-digest": format!("sha256:{hex}")},
            "type": PAYLOAD_TYPE,
        },
        "optional": optional,
    });
    serde_json::to_vec(&doc).unwrap_or_default()
}

/// What verification needs of a payload.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Payload {
    /// `critical.image.docker-manifest-digest` without `sha256:`.
    pub digest: String,
    /// `critical.identity.docker-reference` (not checked: a mirrored module keeps its
    /// source's, as with cosign).
    pub reference: String,
    /// The string and number values of `optional`.
    pub annotations: BTreeMap<String, String>,
}

impl Payload {
    /// Parses a simple-signing payload; the error says what is missing.
    pub fn parse(bytes: &[u8]) -> Result<Payload, String> {
        let v: Value = serde_json::from_slice(bytes).map_err(|_| "not JSON".to_string())?;
        let kind = v.pointer("/critical/type").and_then(Value::as_str);
        if kind != Some(PAYLOAD_TYPE) {
            return Err(format!("not of type {PAYLOAD_TYPE:?}"));
        }
        let digest = v
            .pointer("/critical/image/docker-manifest-digest")
            .and_then(Value::as_str)
            .and_then(|d| d.strip_prefix("sha256:"))
            .ok_or("without a sha256 docker-manifest-digest")?
            .to_string();
        let reference = v
            .pointer("/critical/identity/docker-reference")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_string();
        let annotations = v
            .get("optional")
            .and_then(Value::as_object)
            .map(|o| {
                o.iter()
                    .filter_map(|(k, v)| match v {
                        Value::String(s) => Some((k.clone(), s.clone())),
                        Value::Number(n) => Some((k.clone(), n.to_string())),
                        Value::Bool(b) => Some((k.clone(), b.to_string())),
                        _ => None,
                    })
                    .collect()
            })
            .unwrap_or_default();
        Ok(Payload {
            digest,
            reference,
            annotations,
        })
    }
}

/// One signature: the payload's bytes and the signature over them (DER).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SignatureEntry {
    /// The payload, as signed (its digest checked against the layer's descriptor).
    pub payload: Vec<u8>,
    /// The signature, decoded from the annotation.
    pub signature: Vec<u8>,
}

/// The signatures read for one module.
#[derive(Debug, Clone, Default)]
pub struct Signatures {
    /// Those read.
    pub entries: Vec<SignatureEntry>,
    /// Layers not read: another media type, no or an oversized signature annotation, a
    /// payload over 64 KiB, past the first [`MAX_SIGNATURES`].
    pub skipped: usize,
}

/// A layer of a signature manifest as cosign writes it.
#[derive(Debug)]
struct Layer {
    hex: String,
    size: u64,
    signature: Option<String>,
    media_type: String,
}

/// A layer descriptor's signature annotation.
fn annotation(descriptor: &Value) -> Option<&str> {
    descriptor
        .get("annotations")?
        .get(SIGNATURE_ANNOTATION)?
        .as_str()
}

/// The error of signature manifest `sig` being malformed: `why`, never the registry's text.
fn malformed(sig: &OciRef, why: impl Into<String>) -> SignatureError {
    SignatureError::Manifest {
        manifest: sig.to_string(),
        why: why.into(),
    }
}

/// The layer descriptors of signature manifest `sig`, as they are.
fn layers_json(sig: &OciRef, manifest: &[u8]) -> Result<Vec<Value>, SignatureError> {
    let m: Value = serde_json::from_slice(manifest)
        .map_err(|_| malformed(sig, "the signature manifest is not JSON"))?;
    m.get("layers")
        .and_then(Value::as_array)
        .cloned()
        .ok_or_else(|| malformed(sig, "the signature manifest has no layers"))
}

/// The layers of signature manifest `sig`, each with a sha256 digest.
fn layers(sig: &OciRef, manifest: &[u8]) -> Result<Vec<Layer>, SignatureError> {
    layers_json(sig, manifest)?
        .iter()
        .map(|l| {
            let digest = l.get("digest").and_then(Value::as_str).unwrap_or("");
            Ok(Layer {
                // The registry's text: not shown.
                hex: super::reference::parse_digest(digest).map_err(|_| {
                    malformed(
                        sig,
                        "a signature layer's digest is not sha256:<64 lower-case hex digits>",
                    )
                })?,
                size: l.get("size").and_then(Value::as_u64).unwrap_or(u64::MAX),
                signature: annotation(l).map(str::to_string),
                media_type: l
                    .get("mediaType")
                    .and_then(Value::as_str)
                    .unwrap_or("")
                    .to_string(),
            })
        })
        .collect()
}

/// Reads the signature manifest of manifest `hex` in `pinned`'s repository: `None` when the
/// registry has none (404).
async fn signature_manifest(
    reg: &Registries,
    pinned: &OciRef,
    hex: &str,
    access: &Access,
) -> Result<Option<Vec<u8>>, SignatureError> {
    let sig = signature_ref(pinned, hex);
    match reg
        .fetch
        .manifest(&sig, &signature_tag(hex), MANIFEST_TYPES, access)
        .await
    {
        Ok(m) => Ok(Some(m.bytes)),
        Err(FetchError::Status { status: 404, .. }) => Ok(None),
        Err(fault) => Err(SignatureError::Fetch {
            what: "the signature manifest".into(),
            fault,
        }),
    }
}

/// Reads the signatures of the module `pinned` names (a `@sha256:` reference): `None` when
/// it has no signature manifest. Layers that are not cosign signatures are counted, not
/// read; each payload read is bounded and checked against its layer's digest.
pub async fn read(
    reg: &Registries,
    pinned: &OciRef,
    access: &Access,
) -> Result<Option<Signatures>, SignatureError> {
    let hex = pinned
        .digest
        .as_deref()
        .ok_or_else(|| SignatureError::NotPinned {
            reference: pinned.to_string(),
        })?;
    let Some(manifest) = signature_manifest(reg, pinned, hex, access).await? else {
        return Ok(None);
    };
    let mut out = Signatures::default();
    let mut read_by_digest: std::collections::HashMap<String, Vec<u8>> = Default::default();
    for layer in layers(&signature_ref(pinned, hex), &manifest)? {
        let signature = layer
            .signature
            .as_deref()
            .filter(|s| s.len() <= MAX_SIGNATURE_ANNOTATION_BYTES)
            .and_then(|s| base64::engine::general_purpose::STANDARD.decode(s).ok());
        let readable = layer.media_type == SIMPLE_SIGNING
            && layer.size <= MAX_PAYLOAD_BYTES
            && out.entries.len() < MAX_SIGNATURES;
        let (Some(signature), true) = (signature, readable) else {
            out.skipped += 1;
            continue;
        };
        // Layers naming one blob (one payload, several signatures) read it once.
        let payload = match read_by_digest.get(&layer.hex) {
            Some(payload) => payload.clone(),
            None => {
                let payload = reg
                    .fetch
                    .blob_bytes(pinned, &layer.hex, layer.size, access)
                    .await
                    .map_err(|fault| SignatureError::Fetch {
                        what: format!("reading signature payload sha256:{}", layer.hex),
                        fault,
                    })?;
                read_by_digest.insert(layer.hex.clone(), payload.clone());
                payload
            }
        };
        out.entries.push(SignatureEntry { payload, signature });
    }
    Ok(Some(out))
}

/// What [`sign`] did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Signed {
    /// The signature manifest's reference (`…:sha256-<hex>.sig@sha256:…`).
    pub manifest: OciRef,
    /// Signatures in it now, this one included.
    pub count: usize,
    /// Whether this very signature was already there (nothing was pushed).
    pub already: bool,
}

/// Signs the module `pinned` names (a `@sha256:` reference) with `key`: its payload (the
/// repository, the digest, `annotations`) signed and appended as a layer to the module's
/// signature manifest, which keeps every signature it had (others' keys too). ECDSA here is
/// deterministic (RFC 6979), so signing twice with one key adds nothing.
pub async fn sign(
    reg: &Registries,
    pinned: &OciRef,
    key: &SigningKey,
    annotations: &BTreeMap<String, String>,
) -> Result<Signed, SignatureError> {
    let Some(hex) = pinned.digest.as_deref() else {
        return Err(SignatureError::SignTag {
            reference: pinned.to_string(),
        });
    };
    // The module must exist: a signature of nothing would sit under a tag nobody reads.
    let module = reg
        .fetch
        .manifest(
            pinned,
            &format!("sha256:{hex}"),
            MODULE_MANIFEST_TYPES,
            &reg.access(),
        )
        .await
        .map_err(|fault| SignatureError::Fetch {
            what: format!("{pinned}: reading the manifest to sign"),
            fault,
        })?;
    transfer::wasm_layer(&module.bytes).map_err(|fault| SignatureError::NotModule {
        reference: pinned.to_string(),
        fault,
    })?;
    let payload = payload(pinned, hex, annotations);
    let signature = base64::engine::general_purpose::STANDARD.encode(key.sign(&payload));
    let payload_hex = hex::encode(Sha256::digest(&payload));
    let existing = signature_manifest(reg, pinned, hex, &reg.access()).await?;
    let sig_ref = signature_ref(pinned, hex);
    let mut descriptors: Vec<Value> = match &existing {
        Some(bytes) => layers_json(&sig_ref, bytes)?,
        None => Vec::new(),
    };
    let already = descriptors.iter().any(|d| {
        d.get("digest").and_then(Value::as_str) == Some(&format!("sha256:{payload_hex}"))
            && annotation(d) == Some(signature.as_str())
    });
    let manifest_hex = match (&existing, already) {
        (Some(bytes), true) => hex::encode(Sha256::digest(bytes)),
        _ => {
            descriptors.push(json!({
                "mediaType": SIMPLE_SIGNING,
                "size": payload.len(),
                "digest": format!("sha256:{payload_hex}"),
                "annotations": {SIGNATURE_ANNOTATION: signature},
            }));
            let config = config_for(&descriptors);
            let manifest = json!({
                "schemaVersion": 2,
                "mediaType": OCI_MANIFEST,
                "config": {
                    "mediaType": SIGNATURE_CONFIG,
                    "size": config.len(),
                    "digest": format!("sha256:{}", hex::encode(Sha256::digest(&config))),
                },
                "layers": descriptors,
            });
            transfer::push_raw(
                reg,
                &sig_ref,
                &[&payload, &config],
                manifest.to_string().as_bytes(),
            )
            .await
            .map_err(|fault| SignatureError::Push {
                what: format!("{pinned}: pushing the signature"),
                fault: Box::new(fault),
            })?
        }
    };
    let count = descriptors.len();
    Ok(Signed {
        manifest: sig_ref.pinned(&manifest_hex),
        count,
        already,
    })
}

/// The image config cosign gives a signature manifest: an empty image whose root file
/// system lists each layer (a payload is its own diff id: it is not compressed).
fn config_for(descriptors: &[Value]) -> Vec<u8> {
    let diff_ids: Vec<&str> = descriptors
        .iter()
        .filter_map(|d| d.get("digest").and_then(Value::as_str))
        .collect();
    let history: Vec<Value> = diff_ids
        .iter()
        .map(|_| json!({"created": "0001-01-01T00:00:00Z"}))
        .collect();
    // A JSON value's text is its compact serialization, which cannot fail.
    json!({
        "architecture": "",
        "created": "0001-01-01T00:00:00Z",
        "history": history,
        "os": "",
        "rootfs": {"type": "layers", "diff_ids": diff_ids},
        "config": {},
    })
    .to_string()
    .into_bytes()
}

/// Copies the signatures of manifest `hex` from `src`'s repository to `dst`'s (registry
/// and repository; tags and digests ignored): the same signature manifest bytes, so the same
/// digest, with its config and every layer. Where `dst` already holds other signatures of
/// that manifest (signed there, or mirrored from elsewhere) they are kept: the source's are
/// appended to them, as `sign` appends. Returns how many signatures were added (0 when the
/// module has none, or `dst` has them all). What `kubeplug mirror` calls after copying the
/// module.
pub async fn copy(
    reg: &Registries,
    src: &OciRef,
    dst: &OciRef,
    hex: &str,
) -> Result<usize, SignatureError> {
    let source = src.pinned(hex);
    let sig = signature_ref(src, hex);
    let access = reg.access();
    let Some(manifest) = signature_manifest(reg, &source, hex, &access).await? else {
        return Ok(0);
    };
    let m: Value = serde_json::from_slice(&manifest)
        .map_err(|_| malformed(&sig, "the signature manifest is not JSON"))?;
    let media_type = m.get("mediaType").and_then(Value::as_str).unwrap_or("");
    if media_type != OCI_MANIFEST {
        return Err(malformed(
            &sig,
            format!(
                "a signature manifest of type {:?}: only {OCI_MANIFEST} ones are copied",
                crate::contract::text::prefix(media_type, 100)
            ),
        ));
    }
    let config_hex = m
        .pointer("/config/digest")
        .and_then(Value::as_str)
        .map(super::reference::parse_digest)
        .transpose()
        .map_err(|e| malformed(&sig, format!("the signature manifest's config digest: {e}")))?
        .ok_or_else(|| malformed(&sig, "the signature manifest has no config"))?;
    let config_size = m
        .pointer("/config/size")
        .and_then(Value::as_u64)
        .unwrap_or(u64::MAX);
    if config_size > MAX_CONFIG_BYTES {
        return Err(malformed(
            &sig,
            format!("a signature config of {config_size} bytes, more than {MAX_CONFIG_BYTES}"),
        ));
    }
    let layers = layers(&sig, &manifest)?;
    if layers.len() > MAX_SIGNATURES {
        return Err(malformed(
            &sig,
            format!(
                "{} signature layers, more than the {MAX_SIGNATURES} copied",
                layers.len()
            ),
        ));
    }
    let fetch = |what: String| move |fault| SignatureError::Fetch { what, fault };
    let mut blobs = vec![
        reg.fetch
            .blob_bytes(&source, &config_hex, config_size, &access)
            .await
            .map_err(fetch("reading the signature config".into()))?,
    ];
    for layer in &layers {
        if layer.size > MAX_PAYLOAD_BYTES {
            return Err(malformed(
                &sig,
                format!(
                    "a signature layer of {} bytes, more than {MAX_PAYLOAD_BYTES}",
                    layer.size
                ),
            ));
        }
        blobs.push(
            reg.fetch
                .blob_bytes(&source, &layer.hex, layer.size, &access)
                .await
                .map_err(fetch(format!(
                    "reading signature layer sha256:{}",
                    layer.hex
                )))?,
        );
    }
    let target = signature_ref(dst, hex);
    let pushing = |fault| SignatureError::Push {
        what: format!("{target}: pushing the signatures"),
        fault: Box::new(fault),
    };
    let existing = signature_manifest(reg, &dst.pinned(hex), hex, &reg.access()).await?;
    if let Some(existing) = existing.filter(|e| *e != manifest) {
        let mut merged = layers_json(&target, &existing)?;
        let before = merged.len();
        for descriptor in layers_json(&sig, &manifest)? {
            let same = |d: &Value| {
                d.get("digest") == descriptor.get("digest")
                    && annotation(d) == annotation(&descriptor)
            };
            if !merged.iter().any(same) {
                merged.push(descriptor);
            }
        }
        let added = merged.len() - before;
        if added == 0 {
            return Ok(0);
        }
        let config = config_for(&merged);
        let merged_manifest = json!({
            "schemaVersion": 2,
            "mediaType": OCI_MANIFEST,
            "config": {
                "mediaType": SIGNATURE_CONFIG,
                "size": config.len(),
                "digest": format!("sha256:{}", hex::encode(Sha256::digest(&config))),
            },
            "layers": merged,
        })
        .to_string();
        let mut refs: Vec<&[u8]> = blobs[1..].iter().map(Vec::as_slice).collect();
        refs.push(&config);
        transfer::push_raw(reg, &target, &refs, merged_manifest.as_bytes())
            .await
            .map_err(pushing)?;
        return Ok(added);
    }
    let refs: Vec<&[u8]> = blobs.iter().map(Vec::as_slice).collect();
    let pushed = transfer::push_raw(reg, &target, &refs, &manifest)
        .await
        .map_err(pushing)?;
    let want = hex::encode(Sha256::digest(&manifest));
    if pushed != want {
        return Err(SignatureError::DigestDiffers {
            target: target.to_string(),
            pushed,
            want,
        });
    }
    Ok(layers.len())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn payload_is_cosigns_simple_signing() {
        let r = OciRef::parse("oci://reg.example:5000/team-a/pinner:v1").unwrap();
        let hex = "ab".repeat(32);
        let bytes = payload(&r, &hex, &BTreeMap::new());
        assert_eq!(
            String::from_utf8(bytes.clone()).unwrap(),
            format!(
                r#"{{"critical":{{"identity":{{"docker-reference":"reg.example:5000/team-a/pinner"}},"image":{{"docker-manifest-digest":"sha256:{hex}"}},"type":"cosign container image signature"}},"optional":null}}"#
            )
        );
        let p = Payload::parse(&bytes).unwrap();
        assert_eq!(p.digest, hex);
        assert_eq!(p.reference, "reg.example:5000/team-a/pinner");
        assert!(p.annotations.is_empty());
        let with = payload(&r, &hex, &[("env".into(), "prod".into())].into());
        assert_eq!(
            Payload::parse(&with)
                .unwrap()
                .annotations
                .get("env")
                .unwrap(),
            "prod"
        );
        assert!(Payload::parse(b"{}").unwrap_err().contains("not of type"));
        assert!(Payload::parse(b"[").is_err());
        assert_eq!(signature_tag(&hex), format!("sha256-{hex}.sig"));
        // The tag is a valid reference tag.
        assert!(OciRef::parse(&format!("oci://r/x:{}", signature_tag(&hex))).is_ok());
    }

    #[test]
    fn layers_read_from_a_cosign_manifest() {
        let d = format!("sha256:{}", "c".repeat(64));
        let m = json!({"schemaVersion": 2, "mediaType": OCI_MANIFEST,
        "config": {"mediaType": SIGNATURE_CONFIG, "digest": d, "size": 3},
        "layers": [
            {"mediaType": SIMPLE_SIGNING, "digest": d, "size": 10,
             "annotations": {SIGNATURE_ANNOTATION: "MEUC"}},
            {"mediaType": "application/vnd.dev.sigstore.bundle.v0.3+json", "digest": d, "size": 10}
        ]});
        let sig = OciRef::parse("oci://r/x:sha256-00.sig").unwrap();
        let l = layers(&sig, &serde_json::to_vec(&m).unwrap()).unwrap();
        assert_eq!(l.len(), 2);
        assert_eq!(l[0].signature.as_deref(), Some("MEUC"));
        assert_eq!(l[0].size, 10);
        assert!(l[1].signature.is_none());
        let bad = json!({"layers": [{"digest": "md5:x"}]});
        let err = layers(&sig, &serde_json::to_vec(&bad).unwrap()).unwrap_err();
        assert!(
            matches!(&err, SignatureError::Manifest { manifest, .. } if manifest == "oci://r/x:sha256-00.sig"),
            "{err}"
        );
        assert!(!err.to_string().contains("md5"), "{err}");
    }
}
