//! Signing keys in the formats cosign reads and writes: ECDSA P-256 public keys as PEM
//! (`PUBLIC KEY`, PKIX), private keys as unencrypted PKCS#8 (`PRIVATE KEY`, as `openssl
//! genpkey` writes them) or SEC1 (`EC PRIVATE KEY`), and cosign's encrypted private key
//! (`ENCRYPTED SIGSTORE PRIVATE KEY`, older `ENCRYPTED COSIGN PRIVATE KEY`: a JSON document of
//! scrypt parameters, a salt, a NaCl secretbox nonce and the sealed PKCS#8 key, as
//! go-securesystemslib's `encrypted` package writes it).
//!
//! Every primitive is a RustCrypto crate (p256, scrypt, crypto_secretbox), the ones sigstore
//! builds on. sigstore itself is not a dependency (measured 2026-11-26, 2 cores): 0.15 with
//! only its `cosign` feature does not compile without `native-tls` (openssl) or `rustls-tls`
//! (aws-lc-rs, a C/cmake build) — a `compile_error!` — and up to that point it had added 80
//! crates (protobuf specs, OpenID Connect, RSA, x509) and 126 s of compile units; 0.13, which
//! Kubewarden uses, needs aws-lc-rs for `cosign` too. Its registry reads go through
//! oci-client, which reads bodies whole, where ours are bounded. These three crates add 29
//! small crates, 17 s of a cold build.

use base64::Engine;
use p256::ecdsa::signature::{Signer, Verifier};
use p256::ecdsa::{DerSignature, Signature};
use p256::elliptic_curve::zeroize::Zeroizing;
use p256::pkcs8::der::pem::{self, LineEnding};
use p256::pkcs8::{DecodePrivateKey, DecodePublicKey, EncodePrivateKey, EncodePublicKey};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use std::fmt;
use std::path::Path;

/// The largest key file read: a P-256 key in any of these formats is well under 1 KiB.
pub const MAX_KEY_FILE_BYTES: u64 = 64 << 10;
/// cosign's PEM label of an encrypted private key.
pub const SIGSTORE_PRIVATE_KEY: &str = "ENCRYPTED SIGSTORE PRIVATE KEY";
/// The label older cosign versions wrote; read as the same format.
pub const COSIGN_PRIVATE_KEY: &str = "ENCRYPTED COSIGN PRIVATE KEY";
/// The environment variable cosign reads the private key's password from.
pub const PASSWORD_ENV: &str = "COSIGN_PASSWORD";

/// scrypt's work factors go-securesystemslib accepts (legacy 2^15, standard 2^16 which cosign
/// writes today, OWASP 2^17), all with r = 8, p = 1. Anything else is refused before any
/// work: the parameters come from the key file, and scrypt's memory grows with them.
const SCRYPT_LOG_N: [u8; 3] = [15, 16, 17];
/// The work factor keys are written with (cosign's current default).
const SCRYPT_WRITE_LOG_N: u8 = 16;
const SCRYPT_R: u32 = 8;
const SCRYPT_P: u32 = 1;
const SALT_BYTES: usize = 32;
const NONCE_BYTES: usize = 24;
const BOX_KEY_BYTES: usize = 32;

/// Why a key could not be read or used.
#[derive(Debug, thiserror::Error)]
pub enum KeyError {
    /// The text is not PEM, or its label is none of the formats above.
    #[error("{0}")]
    Format(String),
    /// The key is not ECDSA P-256.
    #[error(
        "{0}: only ECDSA P-256 keys are supported (cosign's default; openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256)"
    )]
    Algorithm(String),
    /// An encrypted key and no password.
    #[error("the private key is encrypted: set {PASSWORD_ENV} to its password (may be empty)")]
    NoPassword,
    /// The password does not open the key.
    #[error(
        "wrong password ({PASSWORD_ENV}) or a damaged key: the encrypted private key did not open"
    )]
    WrongPassword,
    /// Reading the file failed.
    #[error("{path}: {why}")]
    File {
        /// The file.
        path: String,
        /// What went wrong.
        why: String,
    },
}

/// An ECDSA P-256 public key and its short id, which names it in verification errors.
#[derive(Clone, PartialEq, Eq)]
pub struct PublicKey {
    key: p256::ecdsa::VerifyingKey,
    id: String,
}

impl fmt::Debug for PublicKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "PublicKey({})", self.id)
    }
}

impl fmt::Display for PublicKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.id)
    }
}

impl PublicKey {
    /// Parses a `PUBLIC KEY` PEM (PKIX, as cosign.pub and `openssl pkey -pubout` write it).
    pub fn from_pem(text: &str) -> Result<PublicKey, KeyError> {
        let (label, der) = pem_block(text)?;
        if label != "PUBLIC KEY" {
            return Err(KeyError::Format(format!(
                "a {label:?} PEM block where a PUBLIC KEY was expected"
            )));
        }
        let key = p256::ecdsa::VerifyingKey::from_public_key_der(&der)
            .map_err(|e| KeyError::Algorithm(format!("the public key ({e})")))?;
        Ok(PublicKey::of(key))
    }

    /// Reads a public key file (bounded to 64 KiB).
    pub fn from_file(path: &Path) -> Result<PublicKey, KeyError> {
        PublicKey::from_pem(&read_key_file(path)?).map_err(|e| in_file(path, e))
    }

    fn of(key: p256::ecdsa::VerifyingKey) -> PublicKey {
        let der = key
            .to_public_key_der()
            .map(|d| d.as_bytes().to_vec())
            .unwrap_or_default();
        let hex = hex::encode(Sha256::digest(&der));
        PublicKey {
            key,
            id: format!("sha256:{}…", &hex[..12]),
        }
    }

    /// The key's id: `sha256:` and the first 12 hex digits of the SHA-256 of its PKIX DER.
    pub fn id(&self) -> &str {
        &self.id
    }

    /// The key as a `PUBLIC KEY` PEM.
    pub fn to_pem(&self) -> String {
        self.key
            .to_public_key_pem(LineEnding::LF)
            .unwrap_or_default()
    }

    /// Whether `signature` (ASN.1 DER, as cosign stores it) is this key's ECDSA-SHA256
    /// signature of `payload`.
    pub fn verifies(&self, payload: &[u8], signature: &[u8]) -> bool {
        match Signature::from_der(signature) {
            Ok(sig) => self.key.verify(payload, &sig).is_ok(),
            Err(_) => false,
        }
    }
}

/// An ECDSA P-256 private key.
pub struct SigningKey {
    key: p256::ecdsa::SigningKey,
}

impl fmt::Debug for SigningKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "SigningKey(public {})", self.public().id)
    }
}

impl SigningKey {
    /// A new random key (from the operating system's generator).
    pub fn generate() -> SigningKey {
        SigningKey {
            key: p256::ecdsa::SigningKey::random(&mut crypto_secretbox::aead::OsRng),
        }
    }

    /// Parses a private key PEM: `PRIVATE KEY` (PKCS#8), `EC PRIVATE KEY` (SEC1), or cosign's
    /// encrypted formats, opened with `password` (cosign reads it from `COSIGN_PASSWORD`).
    pub fn from_pem(text: &str, password: Option<&[u8]>) -> Result<SigningKey, KeyError> {
        let (label, der) = pem_block(text)?;
        let der = Zeroizing::new(der);
        let key = match label.as_str() {
            "PRIVATE KEY" => p256::ecdsa::SigningKey::from_pkcs8_der(&der)
                .map_err(|e| KeyError::Algorithm(format!("the PKCS#8 private key ({e})")))?,
            "EC PRIVATE KEY" => p256::SecretKey::from_sec1_der(&der)
                .map(p256::ecdsa::SigningKey::from)
                .map_err(|e| KeyError::Algorithm(format!("the SEC1 private key ({e})")))?,
            SIGSTORE_PRIVATE_KEY | COSIGN_PRIVATE_KEY => {
                let password = password.ok_or(KeyError::NoPassword)?;
                let pkcs8 = decrypt(&der, password)?;
                p256::ecdsa::SigningKey::from_pkcs8_der(&pkcs8).map_err(|e| {
                    KeyError::Algorithm(format!("the key inside the encrypted file ({e})"))
                })?
            }
            "ENCRYPTED PRIVATE KEY" => {
                return Err(KeyError::Format(
                    "an encrypted PKCS#8 key (openssl's -aes256): give it unencrypted (openssl pkey -in KEY -out PLAIN) or in cosign's format (kubeplug keygen)".into(),
                ));
            }
            other => {
                return Err(KeyError::Format(format!(
                    "a {other:?} PEM block: expected PRIVATE KEY, EC PRIVATE KEY or {SIGSTORE_PRIVATE_KEY}"
                )));
            }
        };
        Ok(SigningKey { key })
    }

    /// Reads a private key file (bounded to 64 KiB).
    pub fn from_file(path: &Path, password: Option<&[u8]>) -> Result<SigningKey, KeyError> {
        SigningKey::from_pem(&read_key_file(path)?, password).map_err(|e| in_file(path, e))
    }

    /// The matching public key.
    pub fn public(&self) -> PublicKey {
        PublicKey::of(*self.key.verifying_key())
    }

    /// The ECDSA-SHA256 signature of `payload`, ASN.1 DER (what cosign stores, base64, in
    /// the signature annotation).
    pub fn sign(&self, payload: &[u8]) -> Vec<u8> {
        let sig: Signature = self.key.sign(payload);
        let der: DerSignature = sig.to_der();
        der.as_bytes().to_vec()
    }

    /// The key in cosign's encrypted format (`ENCRYPTED SIGSTORE PRIVATE KEY`), sealed with
    /// `password`, as `cosign generate-key-pair` writes it.
    pub fn to_encrypted_pem(&self, password: &[u8]) -> Result<String, KeyError> {
        let pkcs8 = self
            .key
            .to_pkcs8_der()
            .map_err(|e| KeyError::Format(format!("encoding the private key: {e}")))?;
        let sealed = encrypt(pkcs8.as_bytes(), password, SCRYPT_WRITE_LOG_N)?;
        pem::encode_string(SIGSTORE_PRIVATE_KEY, LineEnding::LF, &sealed)
            .map_err(|e| KeyError::Format(format!("encoding the PEM: {e}")))
    }
}

/// go-securesystemslib's `encrypted` document: byte fields are standard base64 (Go's
/// encoding of `[]byte`).
#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct Sealed {
    kdf: Kdf,
    cipher: Cipher,
    ciphertext: String,
}

#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct Kdf {
    name: String,
    params: KdfParams,
    salt: String,
}

#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct KdfParams {
    #[serde(rename = "N")]
    n: u64,
    r: u32,
    p: u32,
}

#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct Cipher {
    name: String,
    nonce: String,
}

fn box_key(password: &[u8], salt: &[u8], log_n: u8) -> Result<Zeroizing<[u8; 32]>, KeyError> {
    let params = scrypt::Params::new(log_n, SCRYPT_R, SCRYPT_P, BOX_KEY_BYTES)
        .map_err(|e| KeyError::Format(format!("scrypt parameters: {e}")))?;
    let mut key = Zeroizing::new([0u8; BOX_KEY_BYTES]);
    scrypt::scrypt(password, salt, &params, key.as_mut())
        .map_err(|e| KeyError::Format(format!("scrypt: {e}")))?;
    Ok(key)
}

fn encrypt(plaintext: &[u8], password: &[u8], log_n: u8) -> Result<Vec<u8>, KeyError> {
    use crypto_secretbox::aead::{Aead, AeadCore, KeyInit, OsRng, rand_core::RngCore};
    let mut salt = [0u8; SALT_BYTES];
    OsRng.fill_bytes(&mut salt);
    let key = box_key(password, &salt, log_n)?;
    let nonce = crypto_secretbox::XSalsa20Poly1305::generate_nonce(&mut OsRng);
    let sealed = crypto_secretbox::XSalsa20Poly1305::new(key.as_ref().into())
        .encrypt(&nonce, plaintext)
        .map_err(|_| KeyError::Format("sealing the private key failed".into()))?;
    let b64 = base64::engine::general_purpose::STANDARD;
    let doc = Sealed {
        kdf: Kdf {
            name: "scrypt".into(),
            params: KdfParams {
                n: 1 << log_n,
                r: SCRYPT_R,
                p: SCRYPT_P,
            },
            salt: b64.encode(salt),
        },
        cipher: Cipher {
            name: "nacl/secretbox".into(),
            nonce: b64.encode(nonce),
        },
        ciphertext: b64.encode(sealed),
    };
    serde_json::to_vec(&doc).map_err(|e| KeyError::Format(e.to_string()))
}

fn decrypt(document: &[u8], password: &[u8]) -> Result<Zeroizing<Vec<u8>>, KeyError> {
    use crypto_secretbox::aead::{Aead, KeyInit};
    let bad = |why: &str| KeyError::Format(format!("cosign's encrypted private key: {why}"));
    let doc: Sealed = serde_json::from_slice(document)
        .map_err(|e| bad(&format!("not the JSON document expected ({e})")))?;
    if doc.kdf.name != "scrypt" {
        return Err(bad(&format!(
            "key derivation {:?}, expected scrypt",
            crate::contract::text::prefix(&doc.kdf.name, 40)
        )));
    }
    if doc.cipher.name != "nacl/secretbox" {
        return Err(bad(&format!(
            "cipher {:?}, expected nacl/secretbox",
            crate::contract::text::prefix(&doc.cipher.name, 40)
        )));
    }
    let p = &doc.kdf.params;
    let log_n = SCRYPT_LOG_N
        .into_iter()
        .find(|l| p.n == 1u64 << l)
        .filter(|_| p.r == SCRYPT_R && p.p == SCRYPT_P)
        .ok_or_else(|| {
            bad(&format!(
                "scrypt parameters N={} r={} p={}: expected N of 2^15, 2^16 or 2^17 with r=8, p=1",
                p.n, p.r, p.p
            ))
        })?;
    let b64 = base64::engine::general_purpose::STANDARD;
    let salt = b64
        .decode(&doc.kdf.salt)
        .map_err(|_| bad("the salt is not base64"))?;
    let nonce = b64
        .decode(&doc.cipher.nonce)
        .map_err(|_| bad("the nonce is not base64"))?;
    if nonce.len() != NONCE_BYTES {
        return Err(bad(&format!(
            "a nonce of {} bytes, expected {NONCE_BYTES}",
            nonce.len()
        )));
    }
    let sealed = b64
        .decode(&doc.ciphertext)
        .map_err(|_| bad("the ciphertext is not base64"))?;
    let key = box_key(password, &salt, log_n)?;
    let plain = crypto_secretbox::XSalsa20Poly1305::new(key.as_ref().into())
        .decrypt(nonce.as_slice().into(), sealed.as_slice())
        .map_err(|_| KeyError::WrongPassword)?;
    Ok(Zeroizing::new(plain))
}

/// A freshly generated pair as cosign writes it: the encrypted private key and the public
/// key, both PEM.
pub fn generate_pair(password: &[u8]) -> Result<(String, String), KeyError> {
    let key = SigningKey::generate();
    Ok((key.to_encrypted_pem(password)?, key.public().to_pem()))
}

/// The one PEM block of `text` (anything around it is ignored, as openssl does): its label
/// and contents.
fn pem_block(text: &str) -> Result<(String, Vec<u8>), KeyError> {
    let begin = text
        .find("-----BEGIN ")
        .ok_or_else(|| KeyError::Format("no PEM block (-----BEGIN …-----) in the key".into()))?;
    let rest = &text[begin..];
    let end_label = rest
        .find("-----END ")
        .ok_or_else(|| KeyError::Format("a PEM block without its -----END line".into()))?;
    let end = rest[end_label + 9..]
        .find("-----")
        .map(|i| end_label + 9 + i + 5)
        .ok_or_else(|| KeyError::Format("a PEM block without its -----END line".into()))?;
    let block = format!("{}\n", rest[..end].replace("\r\n", "\n"));
    let (label, der) = pem::decode_vec(block.as_bytes())
        .map_err(|e| KeyError::Format(format!("not a valid PEM block ({e})")))?;
    Ok((label.to_string(), der))
}

fn read_key_file(path: &Path) -> Result<String, KeyError> {
    use std::io::Read;
    let fail = |why: String| KeyError::File {
        path: path.display().to_string(),
        why,
    };
    let file = std::fs::File::open(path).map_err(|e| fail(e.to_string()))?;
    let mut text = String::new();
    file.take(MAX_KEY_FILE_BYTES + 1)
        .read_to_string(&mut text)
        .map_err(|e| fail(e.to_string()))?;
    if text.len() as u64 > MAX_KEY_FILE_BYTES {
        return Err(fail(format!(
            "larger than {MAX_KEY_FILE_BYTES} bytes: not a key"
        )));
    }
    Ok(text)
}

fn in_file(path: &Path, e: KeyError) -> KeyError {
    match e {
        KeyError::File { .. } => e,
        other => KeyError::File {
            path: path.display().to_string(),
            why: other.to_string(),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A P-256 key as `openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256` wrote
    /// it, and its public half from `openssl pkey -pubout`.
    const OPENSSL_KEY: &str = "-----BEGIN PRIVATE KEY-----
MIGHAgEAMBMGByqGSM49AgEGCCqGSM49AwEHBG0wawIBAQQgfXE0CqIGEwlqH/nw
5J75Vk+9ospTRIYBUKAPpuoYCv2hRANCAASusWesZI8mRyhbhS5Rvr1Ql8JkPwWZ
1r3yXlVQaXg1ASeu9ZgckW2uCKGHRB8phrQo7Zm8enWmtlpAjuAZwBPX
-----END PRIVATE KEY-----
";
    const OPENSSL_PUB: &str = "-----BEGIN PUBLIC KEY-----
MFkwEwYHKoZIzj0CAQYIKoZIzj0DAQcDQgAErrFnrGSPJkcoW4UuUb69UJfCZD8F
mda98l5VUGl4NQEnrvWYHJFtrgihh0QfKYa0KO2ZvHp1prZaQI7gGcAT1w==
-----END PUBLIC KEY-----
";

    #[test]
    fn openssl_pkcs8_key_signs_and_its_public_key_verifies() {
        let key = SigningKey::from_pem(OPENSSL_KEY, None).unwrap();
        let public = PublicKey::from_pem(OPENSSL_PUB).unwrap();
        assert_eq!(key.public(), public);
        let sig = key.sign(b"payload");
        assert!(public.verifies(b"payload", &sig));
        assert!(!public.verifies(b"payload!", &sig));
        assert!(!public.verifies(b"payload", b"not DER"));
        let other = SigningKey::generate().public();
        assert!(!other.verifies(b"payload", &sig));
        assert_ne!(other.id(), public.id());
        assert!(public.id().starts_with("sha256:") && public.id().len() == 7 + 12 + 3);
    }

    #[test]
    fn encrypted_pair_round_trips_and_a_wrong_password_is_a_clear_error() {
        let (private, public) = generate_pair(b"s3cret").unwrap();
        assert!(private.starts_with("-----BEGIN ENCRYPTED SIGSTORE PRIVATE KEY-----\n"));
        assert!(public.starts_with("-----BEGIN PUBLIC KEY-----\n"));
        let key = SigningKey::from_pem(&private, Some(b"s3cret")).unwrap();
        assert_eq!(key.public(), PublicKey::from_pem(&public).unwrap());
        let err = SigningKey::from_pem(&private, Some(b"wrong")).unwrap_err();
        assert!(matches!(err, KeyError::WrongPassword), "{err}");
        assert!(err.to_string().contains("wrong password (COSIGN_PASSWORD)"));
        let err = SigningKey::from_pem(&private, None).unwrap_err();
        assert!(err.to_string().contains("set COSIGN_PASSWORD"), "{err}");
        // The older label is the same format.
        let older = private.replace(SIGSTORE_PRIVATE_KEY, COSIGN_PRIVATE_KEY);
        assert!(SigningKey::from_pem(&older, Some(b"s3cret")).is_ok());
    }

    /// The JSON inside: go-securesystemslib's field names, standard base64, N = 2^16.
    #[test]
    fn encrypted_document_is_go_securesystemslib_shape() {
        let (private, _) = generate_pair(b"").unwrap();
        let (_, doc) = pem_block(&private).unwrap();
        let v: serde_json::Value = serde_json::from_slice(&doc).unwrap();
        assert_eq!(v["kdf"]["name"], "scrypt");
        assert_eq!(
            v["kdf"]["params"],
            serde_json::json!({"N": 65536, "r": 8, "p": 1})
        );
        assert_eq!(v["cipher"]["name"], "nacl/secretbox");
        let b64 = base64::engine::general_purpose::STANDARD;
        assert_eq!(
            b64.decode(v["kdf"]["salt"].as_str().unwrap())
                .unwrap()
                .len(),
            32
        );
        assert_eq!(
            b64.decode(v["cipher"]["nonce"].as_str().unwrap())
                .unwrap()
                .len(),
            24
        );
        // An empty password is a password (cosign allows it).
        assert!(SigningKey::from_pem(&private, Some(b"")).is_ok());
    }

    #[test]
    fn hostile_scrypt_parameters_refused_before_any_work() {
        let (private, _) = generate_pair(b"pw").unwrap();
        let (_, doc) = pem_block(&private).unwrap();
        let mut v: serde_json::Value = serde_json::from_slice(&doc).unwrap();
        v["kdf"]["params"]["N"] = serde_json::json!(1u64 << 30);
        let bytes = serde_json::to_vec(&v).unwrap();
        let text = pem::encode_string(SIGSTORE_PRIVATE_KEY, LineEnding::LF, &bytes).unwrap();
        let err = SigningKey::from_pem(&text, Some(b"pw"))
            .unwrap_err()
            .to_string();
        assert!(err.contains("scrypt parameters N=1073741824"), "{err}");
    }

    #[test]
    fn key_files_bounded() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("big.pem");
        let mut text = OPENSSL_KEY.to_string();
        text.push_str(&"#".repeat(MAX_KEY_FILE_BYTES as usize));
        std::fs::write(&path, text).unwrap();
        let err = SigningKey::from_file(&path, None).unwrap_err().to_string();
        assert!(err.contains("larger than 65536 bytes: not a key"), "{err}");
        let err = PublicKey::from_file(&path).unwrap_err().to_string();
        assert!(err.contains("larger than 65536 bytes"), "{err}");
        std::fs::write(&path, OPENSSL_KEY).unwrap();
        assert!(SigningKey::from_file(&path, None).is_ok());
    }

    #[test]
    fn other_formats_refused_by_name() {
        let err = PublicKey::from_pem("hello").unwrap_err().to_string();
        assert!(err.contains("no PEM block"), "{err}");
        let err = PublicKey::from_pem(OPENSSL_KEY).unwrap_err().to_string();
        assert!(err.contains("where a PUBLIC KEY was expected"), "{err}");
        // An Ed25519 key (openssl genpkey -algorithm ed25519).
        let ed = "-----BEGIN PRIVATE KEY-----
MC4CAQAwBQYDK2VwBCIEIIn84yeXBSlCA8Xa1R4fmmF9ZbKA7zg335a9Btc0Qhfd
-----END PRIVATE KEY-----
";
        let err = SigningKey::from_pem(ed, None).unwrap_err().to_string();
        assert!(err.contains("only ECDSA P-256 keys"), "{err}");
        let err = SigningKey::from_pem(
            "-----BEGIN ENCRYPTED PRIVATE KEY-----\nAAAA\n-----END ENCRYPTED PRIVATE KEY-----\n",
            None,
        )
        .unwrap_err()
        .to_string();
        assert!(err.contains("openssl pkey"), "{err}");
    }
}
