//! `kubeplug keygen`, `kubeplug sign` and `kubeplug verify`: cosign's key-based signatures of
//! modules in OCI registries, stored as cosign stores them, for users without cosign.

use crate::oci::keys::{self, PublicKey, SigningKey};
use crate::oci::verification::{self, MAX_ANNOTATION_BYTES, MAX_ANNOTATIONS, VerificationConfig};
use crate::oci::{OciRef, Registries, RegistryArgs, signature};
use anyhow::{Context, bail};
use clap::Args;
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::ExitCode;

/// Options of `kubeplug keygen`.
#[derive(Debug, Args)]
pub struct KeygenArgs {
    /// Write PREFIX.key (encrypted with $COSIGN_PASSWORD) and PREFIX.pub, as
    /// `cosign generate-key-pair --output-key-prefix` does.
    #[arg(
        long = "output-key-prefix",
        value_name = "PREFIX",
        default_value = "cosign"
    )]
    pub output_key_prefix: String,
}

/// Options of `kubeplug sign`.
#[derive(Debug, Args)]
pub struct SignArgs {
    /// The private key: PKCS#8 or SEC1 PEM (as openssl writes it), or cosign's encrypted
    /// key (password from $COSIGN_PASSWORD).
    #[arg(long, value_name = "FILE")]
    pub key: PathBuf,
    /// An annotation put in the signed payload (cosign's `-a`); a verification rule can
    /// require it. Repeat for several.
    #[arg(short = 'a', long = "annotation", value_name = "KEY=VALUE")]
    pub annotations: Vec<String>,
    /// The module: oci://HOST[:PORT]/REPO@sha256:DIGEST (as push prints it).
    pub reference: OciRef,
    /// Registry flags.
    #[command(flatten)]
    pub registry: RegistryArgs,
}

/// Options of `kubeplug verify`.
#[derive(Debug, Args)]
pub struct VerifyArgs {
    /// The public key (cosign.pub) the module must be signed with; or give the rules with
    /// --verification-config.
    #[arg(long, value_name = "FILE")]
    pub key: Option<PathBuf>,
    /// An annotation the signature's payload must carry (with --key). Repeat for several.
    #[arg(short = 'a', long = "annotation", value_name = "KEY=VALUE")]
    pub annotations: Vec<String>,
    /// The module: oci://HOST[:PORT]/REPO[:TAG][@sha256:DIGEST] (a tag is resolved first).
    pub reference: OciRef,
    /// Registry flags.
    #[command(flatten)]
    pub registry: RegistryArgs,
}

/// The password of an encrypted private key, as cosign reads it.
fn password() -> Option<Vec<u8>> {
    std::env::var_os(keys::PASSWORD_ENV).map(|p| p.into_encoded_bytes())
}

/// `KEY=VALUE` pairs, bounded as verification rules are.
fn annotations(pairs: &[String]) -> anyhow::Result<BTreeMap<String, String>> {
    if pairs.len() > MAX_ANNOTATIONS {
        bail!("{} annotations, more than {MAX_ANNOTATIONS}", pairs.len());
    }
    pairs
        .iter()
        .map(|p| {
            let Some((k, v)) = p.split_once('=').filter(|(k, _)| !k.is_empty()) else {
                bail!("annotation {p:?}: expected KEY=VALUE");
            };
            if k.len() > MAX_ANNOTATION_BYTES || v.len() > MAX_ANNOTATION_BYTES {
                bail!("annotation {k:?}: key and value are at most {MAX_ANNOTATION_BYTES} bytes");
            }
            Ok((k.to_string(), v.to_string()))
        })
        .collect()
}

/// Writes a new key pair: PREFIX.key in cosign's encrypted format, PREFIX.pub. Existing
/// files are never overwritten.
pub fn keygen(args: KeygenArgs) -> anyhow::Result<ExitCode> {
    let Some(password) = password() else {
        bail!(
            "set {} to the password that encrypts the private key (it may be empty: {}= kubeplug keygen)",
            keys::PASSWORD_ENV,
            keys::PASSWORD_ENV
        );
    };
    let private_path = PathBuf::from(format!("{}.key", args.output_key_prefix));
    let public_path = PathBuf::from(format!("{}.pub", args.output_key_prefix));
    for path in [&private_path, &public_path] {
        if path.exists() {
            bail!("{} exists: not overwritten", path.display());
        }
    }
    let (private, public) = keys::generate_pair(&password)?;
    write_new(&private_path, private.as_bytes(), 0o600)?;
    write_new(&public_path, public.as_bytes(), 0o644)?;
    eprintln!(
        "Private key written to {}\nPublic key written to {}",
        private_path.display(),
        public_path.display()
    );
    Ok(ExitCode::SUCCESS)
}

fn write_new(path: &std::path::Path, bytes: &[u8], mode: u32) -> anyhow::Result<()> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(mode)
        .open(path)
        .with_context(|| format!("writing {}", path.display()))?;
    file.write_all(bytes)
        .with_context(|| format!("writing {}", path.display()))
}

/// Signs a pinned module and prints the signature manifest's reference.
pub async fn sign(args: SignArgs) -> anyhow::Result<ExitCode> {
    let key = SigningKey::from_file(&args.key, password().as_deref())?;
    let annotations = annotations(&args.annotations)?;
    let reg = Registries::new(&args.registry)?;
    let signed = signature::sign(&reg, &args.reference, &key, &annotations).await?;
    println!("{}", signed.manifest);
    eprintln!(
        "{} {} with key {} ({} signature(s) on it)",
        if signed.already {
            "already signed"
        } else {
            "signed"
        },
        args.reference,
        key.public(),
        signed.count
    );
    Ok(ExitCode::SUCCESS)
}

/// Checks a module's signatures against --key or --verification-config; prints the
/// reference pinned and the rules met, or fails naming the rule that was not.
pub async fn verify(args: VerifyArgs) -> anyhow::Result<ExitCode> {
    let config = match (&args.key, &args.registry.verification_config) {
        (Some(_), Some(_)) => bail!("give --key or --verification-config, not both"),
        (Some(path), None) => VerificationConfig::single_key(
            &PublicKey::from_file(path)?,
            annotations(&args.annotations)?,
        ),
        (None, Some(path)) => {
            if !args.annotations.is_empty() {
                bail!("--annotation goes with --key; a verification config names its own");
            }
            VerificationConfig::from_file(path)?
        }
        (None, None) => {
            bail!("give the key to verify with: --key cosign.pub or --verification-config FILE")
        }
    };
    let reg = Registries::new(&args.registry)?;
    let pinned = verification::resolve(&reg, &args.reference, &reg.access()).await?;
    let verified = verification::verify(&reg, &pinned, &config).await?;
    println!("{pinned}");
    for m in &verified.matched {
        eprintln!("verified: {}", m.rule);
    }
    Ok(ExitCode::SUCCESS)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn annotations_parsed_and_bounded() {
        let a = annotations(&["env=prod".into(), "team=a=b".into()]).unwrap();
        assert_eq!(a.get("env").unwrap(), "prod");
        assert_eq!(a.get("team").unwrap(), "a=b");
        assert!(annotations(&["novalue".into()]).is_err());
        assert!(annotations(&["=v".into()]).is_err());
        let long = format!("k={}", "v".repeat(MAX_ANNOTATION_BYTES + 1));
        assert!(annotations(&[long]).is_err());
        let many: Vec<String> = (0..=MAX_ANNOTATIONS).map(|i| format!("k{i}=v")).collect();
        assert!(annotations(&many).is_err());
    }
}
